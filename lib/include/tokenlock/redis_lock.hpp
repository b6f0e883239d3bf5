// tokenlock/redis_lock.hpp — the same lock across hosts that share no
// filesystem, through a Redis server, with fencing tokens.
//
// Purpose
//   Processes on several hosts exclude each other by a lock NAME kept in one
//   Redis server. Each grant comes with a fencing token: a number that
//   strictly increases for that name across everything Redis can do to its
//   data (keys expiring or evicted, FLUSHALL, a restart without
//   persistence, a failover to a replica that missed writes), so that a
//   resource that remembers the largest token it has seen can refuse a
//   holder that stalled past its lease. A holder that lost its lock is told
//   so (errc::lock_lost, with the reason) by its next release or refresh.
//   docs/redis.md has the keys, the scripts and what the fence guarantees.
//
// Calling sequence
//     tokenlock::redis_lock lock("redis://127.0.0.1:6379/0", "coupons");
//     {
//       tokenlock::redis_handle h = lock.acquire();  // waits up to options.wait
//       use(resource, h.fence());   // the resource checks the token
//       h.release();   // or let the destructor release (it never throws)
//     }
//   try_acquire() makes one attempt and returns std::nullopt when the lock
//   is held. Waiters block on the server (one woken per release) and never
//   poll; a crashed holder's lock frees when its lease ends.
//
// The server
//   URL: redis://[[user]:password@]host[:port][/db] (port 6379, db 0 by
//   default; IPv6 hosts in brackets) or unix:///path/to.sock[?db=N]
//   (the password of a unix socket: unix://:password@/path/to.sock).
//   Passwords may be percent-encoded. Redis 5 or newer (the scripts rely
//   on effects replication); user names need Redis 6 (ACL).
//
// Errors
//   Each fallible call has a throwing form (tokenlock::lock_error) and a
//   noexcept form taking std::error_code& (see errors.hpp). Conditions:
//   - errc::busy / errc::timed_out: as for rename_lock.
//   - errc::lock_lost   release()/refresh() found the lock no longer ours;
//                       the message says why: our lease ended, a newer
//                       token holds it, or the server lost its state
//                       (restart, FLUSHALL, failover).
//   - errc::bad_argument a URL or options that cannot work (the message
//                       says which part); a lease of 0, below or above 24
//                       hours (the protocol's maximum lease, the same for
//                       every process), in the options or refresh(lease);
//                       a name ending in :fence, :wake, :waiters or
//                       :handoff (the keys of the lock without it).
//   - errc::lock_corrupt one of the lock's keys holds what the lock never
//                       writes: a fence key that is not a decimal below
//                       2^63 (or is 2^63 - 1, which no fence can follow), a
//                       grant that is not "<fence> <owner>" or has no
//                       expiry, or a key of another type. Reported by
//                       every call that reads that key (acquire,
//                       try_acquire, holder, break_owner, and release or
//                       refresh of a grant no longer ours); the message
//                       names the key, what it holds (escaped, cut) and
//                       the redis-cli command that repairs it. Nothing is
//                       written, and a handle whose grant it was owns
//                       nothing afterwards. docs/redis.md, "What is
//                       refused".
//   - errc::server_error the server answered an error: a wrong password,
//                       a command refused (READONLY replica, OOM, ACL).
//   - errc::not_replicated options.replicas were asked for and fewer
//                       acknowledged the grant in time: the grant was
//                       released again.
//   - std::errc codes for the connection (connection_refused, timed_out,
//                       host_unreachable, ...), never later than the wait
//                       budget (or the connect timeout, for try_acquire).
//   Every message names the server and the step. A failed acquire leaves
//   nothing of its own in Redis.
//
// Threads and fork
//   A redis_lock keeps one connection for commands and, while waiting, one
//   for blocking; it must not be used by two threads at once (make one per
//   thread). A redis_handle in a child of fork(2) owns nothing, as for
//   lock_handle.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "tokenlock/errors.hpp"
#include "tokenlock/lock.hpp"
#include "tokenlock/update_any.hpp"
#include "tokenlock/update_options.hpp"

namespace tokenlock {

namespace detail {
class redis_connection;
struct redis_handle_access;
}

struct redis_lock_options {
  // How long a grant stays valid after acquire or refresh (milliseconds on
  // the server's clock: no host clocks are involved). More than 0 and at
  // most 24 hours; anything else is errc::bad_argument.
  std::chrono::milliseconds lease = std::chrono::seconds(60);
  // How long acquire() waits for a busy lock before errc::timed_out. Zero
  // means one attempt (errc::busy).
  std::chrono::milliseconds wait = std::chrono::seconds(10);
  // Connecting, and each command, give up after these.
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(2);
  std::chrono::milliseconds command_timeout = std::chrono::seconds(2);
  // After a grant, wait for this many replicas to acknowledge it (WAIT) for
  // up to replica_timeout; fewer: the grant is released and acquire fails
  // with errc::not_replicated. 0: do not wait.
  int replicas = 0;
  std::chrono::milliseconds replica_timeout = std::chrono::milliseconds(500);
  // Prefix of the keys the lock uses (docs/redis.md).
  std::string key_prefix = "tokenlock:";
  // exclusive (the default), or shared: shared holders hold together, a
  // writer alone; a waiting writer bars new shared holders (docs/redis.md,
  // Shared locks and semaphores). A shared grant has no fence.
  lock_mode mode = lock_mode::exclusive;
  // A semaphore of `slots` holders (1 to max_slots), each with its own
  // lease; non-zero implies shared. Every process using the lock gives the
  // same count: one with another waits until the holders of the first are
  // gone. 0: no limit.
  std::uint32_t slots = 0;
};

// Who holds a Redis lock, as holder() reports it.
struct redis_holder_info {
  std::string owner;          // the holder's unique id ("<host>-<hash>.<pid>.<start>.<nonce>")
  std::uint64_t fence = 0;    // its fencing token
  std::chrono::milliseconds remaining{0};  // of its lease, on the server's clock
  std::string host_tag;       // "<host>-<hash8>", parsed from owner
  int pid = 0;                // parsed from owner
  // exclusive, or shared (slots: the semaphore's size, 0 for readers); a
  // shared holder's fence is the shared grant's, which fences nothing.
  lock_mode mode = lock_mode::exclusive;
  std::uint32_t slots = 0;
  // Not a holder: a writer waiting for the shared holders to leave, whose
  // mark bars new ones (remaining: of the mark).
  bool waiting_writer = false;
};

class redis_handle;

// A tokenlock::lock (lock.hpp): through a tokenlock::lock& its calls give
// tokenlock::handle, whose id() is the owner id and fence() the grant's
// fence; called on a redis_lock they give redis_handle, as here.
class redis_lock : public lock {
 public:
  // Parses `url` and remembers the lock name; connects on first use.
  // A bad URL or name is reported by the first call (bad_argument).
  redis_lock(std::string url, std::string name, redis_lock_options options = {});
  ~redis_lock();
  redis_lock(redis_lock&&) noexcept;
  redis_lock& operator=(redis_lock&&) noexcept;
  redis_lock(const redis_lock&) = delete;
  redis_lock& operator=(const redis_lock&) = delete;

  redis_handle acquire();
  redis_handle acquire(std::error_code& ec) noexcept;
  std::optional<redis_handle> try_acquire();
  std::optional<redis_handle> try_acquire(std::error_code& ec) noexcept;

  // A handle for the grant whose owner id is `owner` (as acquire() made
  // it: redis_handle::owner()), so that another process can refresh or
  // release it. lock_lost when the lock is not held by that owner;
  // bad_argument for an empty owner.
  redis_handle adopt(const std::string& owner);
  redis_handle adopt(const std::string& owner, std::error_code& ec) noexcept;

  // Removes the grant of `owner`, whoever holds it now must be that owner
  // (compare and delete): for an operator who knows its holder is gone.
  // lock_lost when another owner (or nobody) holds it; bad_argument for an
  // empty owner.
  void break_owner(const std::string& owner);
  void break_owner(const std::string& owner, std::error_code& ec) noexcept;

  // Who holds the lock now (shared holders: the first of them);
  // std::nullopt when it is free.
  std::optional<redis_holder_info> holder();
  std::optional<redis_holder_info> holder(std::error_code& ec) noexcept;
  // Every holder with a live lease (at most the first 500 shared ones),
  // then the writer waiting for them, if any; empty when free.
  std::vector<redis_holder_info> holders();
  std::vector<redis_holder_info> holders(std::error_code& ec) noexcept;

  const std::string& url() const noexcept { return url_; }
  const std::string& name() const noexcept { return name_; }
  const redis_lock_options& options() const noexcept { return options_; }

  // The URL with its password masked, '#' and the name (tokenlock::lock::spec()).
  std::string spec() const override;
  lock_backend backend() const noexcept override { return lock_backend::redis; }
  lock_features features() const noexcept override;
  std::vector<lock_fact> location() const override;

 private:
  handle acquire_any(std::error_code& ec) noexcept override;
  std::optional<handle> try_acquire_any(std::error_code& ec) noexcept override;
  handle adopt_any(const std::string& owner, std::error_code& ec) noexcept override;
  void break_owner_any(const std::string& owner, std::error_code& ec) noexcept override;
  std::optional<lock_holder> holder_any(std::error_code& ec) noexcept override;
  std::vector<lock_holder> holders_any(std::error_code& ec) noexcept override;

  // What handle::notice() says of a grant `h` of this lock.
  std::string grant_notice(const redis_handle& h) const;

  friend class redis_handle;
  std::string url_;
  std::string name_;
  redis_lock_options options_;
  std::shared_ptr<detail::redis_connection> conn_;
};

// One grant. Move-only; the destructor releases (and never throws).
class redis_handle {
 public:
  redis_handle() noexcept = default;
  redis_handle(redis_handle&& other) noexcept;
  redis_handle& operator=(redis_handle&& other) noexcept;  // releases ours first
  redis_handle(const redis_handle&) = delete;
  redis_handle& operator=(const redis_handle&) = delete;
  ~redis_handle();

  // Deletes the grant if it is still ours and wakes one waiter. lock_lost
  // (with the reason) when it was not ours any more. On an empty handle:
  // does nothing. not_owner in a forked child.
  void release();
  void release(std::error_code& ec) noexcept;

  // Extends the lease to now + `lease` (default: the lease acquired with;
  // more than 0 and at most 24 hours, else bad_argument and the grant is
  // left as it was). lock_lost when the grant is not ours any more. The
  // fence stays.
  void refresh();
  void refresh(std::error_code& ec) noexcept;
  void refresh(std::chrono::milliseconds lease);
  void refresh(std::chrono::milliseconds lease, std::error_code& ec) noexcept;

  // Gives up the handle without releasing; returns the owner id (for
  // adopt() in another process).
  std::string detach() noexcept;

  bool owns() const noexcept;
  explicit operator bool() const noexcept { return owns(); }

  // The fencing token of this grant: larger than every token granted for
  // this name before it. 0 for a shared grant, which has none.
  std::uint64_t fence() const noexcept { return fence_; }
  const std::string& owner() const noexcept { return owner_; }
  // When the lease ends, by this host's clock (the server counts the
  // lease itself; this is the local estimate from the grant's reply).
  std::chrono::system_clock::time_point expires() const noexcept { return expires_; }
  std::chrono::milliseconds lease() const noexcept { return lease_; }
  // How far the server's clock was behind the last fence granted for this
  // name when it granted ours (zero normally). Not zero means the server's
  // clock went back (a failover to a machine whose clock is behind, or a
  // clock step): fences still increase (by one each), but if the server
  // also loses its keys now, a new fence could repeat an old one. Fix the
  // server's clock (NTP); the command warns on stderr.
  std::chrono::microseconds clock_behind() const noexcept { return clock_behind_; }
  // exclusive, or shared (a shared holder's or a semaphore's grant).
  lock_mode mode() const noexcept { return mode_; }

 private:
  friend struct detail::redis_handle_access;
  void forget() noexcept;

  std::shared_ptr<detail::redis_connection> conn_;
  std::string key_;    // the lock's key in Redis
  std::string owner_;
  std::uint64_t fence_ = 0;
  std::chrono::system_clock::time_point expires_{};
  std::chrono::milliseconds lease_{0};
  std::chrono::microseconds clock_behind_{0};
  std::uint64_t fork_generation_ = 0;
  lock_mode mode_ = lock_mode::exclusive;
};

// update_file, increment_counter and commit_file under a Redis lock are
// tokenlock/update_any.hpp's forms for any tokenlock::lock (included here, so
// that code written for this header's own overloads still compiles): the
// commit is fenced by the grant's fence through a directory TARGET.fence
// beside the target; a holder that stalled past its lease writes nothing
// (lock_lost), and a holder whose fence is older than the last one that
// updated the file fails at once. The target must be written only through
// these (or by processes that honour the fence directory).
// update_result::fenced is always true.

}  // namespace tokenlock
