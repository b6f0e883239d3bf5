// tokenlock/keep_alive.hpp — refreshing a held lock's lease in the background.
//
// Purpose
//   A lease bounds how long a stalled holder can keep others out. Work that
//   may outlast the lease (a slow computation, a large copy) keeps the lock
//   by refreshing it; keep_alive does that from a thread of its own, so the
//   work need not be interrupted to call refresh(). If a refresh fails
//   because the lock was taken over, keep_alive stops and says so, and the
//   caller's fenced commit fails with lock_lost as it would without it.
//
// Calling sequence
//     tokenlock::lock_handle h = lock.acquire();  // or any tokenlock::handle
//     {
//       tokenlock::keep_alive ka(h);       // refreshes at a third of the lease
//       ... long work that does not touch h ...
//       if (std::error_code ec = ka.stop()) { ... ec == errc::lock_lost ... }
//     }
//     ... commit through h.path(), then h.release() ...
//   update_options::keep_alive does the same around update_file's function.
//
// Errors
//   stop() returns the error that ended the keeping: errc::lock_lost (the
//   token was taken over; the handle is then empty), errc::not_owner (the
//   handle owned nothing, or was inherited by fork), or the errno code of
//   the last refresh that failed for another reason (such a refresh is
//   retried at the next interval while the lease lasts). last_message()
//   has the text. A success returns an empty error_code.
//
// Thread safety
//   Between construction and stop() (or destruction) the handle belongs to
//   the keep_alive's thread: no other thread may call any of its members,
//   path() and token() included, because a refresh renames the token. The
//   keep_alive object itself may be queried (lost(), refreshes()) from any
//   thread. Do not fork while one runs: the child gets no thread, and its
//   copy of the handle owns nothing anyway.

#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

namespace tokenlock {

class handle;
class lock_handle;

struct keep_alive_options {
  // Time between refreshes; zero means a third of the handle's lease, which
  // leaves two more attempts before the lease ends if one fails.
  std::chrono::milliseconds interval{0};
  // Called on the keep_alive's thread after each refresh attempt, with its
  // result (empty on success). For logging; it must not touch the handle.
  std::function<void(const std::error_code&)> on_refresh;
};

class keep_alive {
 public:
  // Starts refreshing `handle`, which must outlive this object. Throws
  // lock_error(not_owner) when the handle owns nothing, bad_argument when
  // the interval is not shorter than the lease, and std::system_error when
  // no thread can be started.
  explicit keep_alive(lock_handle& handle, keep_alive_options options = {});
  // As above; on failure `ec` is set (with last_error_message() and
  // last_message()), no thread runs, and stop() returns the same code.
  keep_alive(lock_handle& handle, keep_alive_options options, std::error_code& ec) noexcept;
  // The same for a grant of any lock (tokenlock/lock.hpp), whatever its
  // backend. Not a template, like the lock_handle forms: the calls a
  // keep_alive makes on a handle are compiled once, in the library, and
  // this header needs no more than the handle's name.
  explicit keep_alive(handle& h, keep_alive_options options = {});
  keep_alive(handle& h, keep_alive_options options, std::error_code& ec) noexcept;
  // The same for any other handle with refresh(std::error_code&), owns()
  // and lease(), such as a Redis or etcd lock's own grant (redis_handle,
  // etcd_handle): this header knows no backend's types, which a program
  // may not link.
  template <class Handle>
  explicit keep_alive(Handle& handle, keep_alive_options options = {})
      : keep_alive([&handle](std::error_code& e) { handle.refresh(e); }, handle.owns(),
                   handle.lease(), std::move(options), nullptr) {}
  template <class Handle>
  keep_alive(Handle& handle, keep_alive_options options, std::error_code& ec) noexcept
      : keep_alive([&handle](std::error_code& e) { handle.refresh(e); }, handle.owns(),
                   handle.lease(), std::move(options), &ec) {}
  keep_alive(const keep_alive&) = delete;
  keep_alive& operator=(const keep_alive&) = delete;
  ~keep_alive();  // stop(), ignoring its result

  // Stops refreshing and waits for the thread to end (at most one refresh
  // in progress). Afterwards the handle is the caller's again. Returns why
  // keeping failed, or an empty code. Idempotent.
  std::error_code stop() noexcept;

  // True once a refresh found the lock taken over (or the handle empty).
  bool lost() const noexcept;
  // Successful refreshes so far.
  std::uint64_t refreshes() const noexcept;
  // The message of the error stop() returns (empty if none).
  std::string last_message() const;

 private:
  using refresher = std::function<void(std::error_code&)>;
  // Throws when `ec` is null; otherwise sets it.
  keep_alive(refresher refresh, bool owns, std::chrono::milliseconds lease,
             keep_alive_options options, std::error_code* ec);
  // The refresh interval, or why there is none (and its message).
  static std::error_code choose_interval(bool owns, std::chrono::milliseconds lease,
                                         const keep_alive_options& options,
                                         std::chrono::milliseconds& interval,
                                         std::string& message);
  void run() noexcept;

  refresher refresh_;  // the handle's refresh(ec)
  std::chrono::milliseconds interval_{0};
  std::function<void(const std::error_code&)> on_refresh_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool lost_ = false;
  std::uint64_t refreshes_ = 0;
  std::error_code error_;
  std::string message_;
  std::thread thread_;  // started in the constructor's body, once everything is set
};

}  // namespace tokenlock
