// The fence directory that fences a file update under a lock server's
// grant (redis_lock, etcd_lock), and those locks' part of update_flow
// (docs/redis.md, The file fence):
//
//   TARGET.fence/f.<fence, 20 digits>     exactly one entry, a directory
//
// After acquiring, and before reading the target, the holder renames the
// one entry to its own fence's name, unless the entry's number is larger
// than its own (then a newer holder has been here: lock_lost, nothing
// written). Its temporary file is written inside that entry and committed
// by a rename through the entry's path: a holder whose entry was renamed
// away by a newer one (it stalled past its lease) finds the path gone and
// writes nothing. The rename happens before the newer holder reads, so
// whatever a stalled holder committed before it is read by the newer one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "files/atomic_write_impl.hpp"
#include "files/file_writer.hpp"
#include "lockdir/lock_directory.hpp"
#include "posix/os.hpp"
#include "files/update_impl.hpp"

namespace tokenlock::detail {

// The fence directory, by descriptor: judged (trust.hpp) before the
// temporary file is made in our entry, and the commit renamed relative to
// it, through the entry's name. (The entry is judged through a descriptor
// of its own, closed once judged: the temporary file goes in by path.)
struct fence_fds {
  os& sys;
  int dir = -1;
  ~fence_fds() {
    if (dir >= 0) sys.close(dir);
  }
};

// Makes TARGET.fence/f.<fence> the one entry of the fence directory, and
// sets `workspace` to it once judged, with the directory open in `fds`.
failure claim_fence(os& sys, const write_target& t, std::uint64_t fence, unsigned dir_mode,
                    std::string& workspace, fence_fds& fds);

// A commit that found our entry renamed away: the lock is lost.
failure lost_at_commit(const write_target& t, std::uint64_t fence);

// A lock server's part of the update flow (update_flow, update_impl.hpp),
// for a Lock whose acquire(std::error_code&) gives a Handle with fence(),
// release(std::error_code&) (redis_lock, etcd_lock).
template <class Lock, class Handle>
class fenced_lock_steps {
 public:
  fenced_lock_steps(os& sys, Lock& lock) : sys_(sys), lock_(lock), fds_{sys} {}

  failure acquire() {
    std::error_code ec;
    h_ = lock_.acquire(ec);
    if (ec) return make_failure(ec, last_error_message());
    return {};
  }

  // The lease the server granted, which may be longer than the one asked
  // for (etcd's minimum TTL): temporary files younger than it may be a
  // live writer's.
  std::chrono::milliseconds lease() const { return h_.lease(); }
  Handle& handle() { return h_; }

  // The fence entry is claimed before the read: whatever a stalled holder
  // committed before that is read by us, and nothing it commits after.
  failure read(const write_target& t, std::optional<std::string>& current, int& fd,
               const read_rules& rules) {
    if (failure f = claim_fence(sys_, t, h_.fence(), 0755, workspace_, fds_)) return f;
    return read_file_impl(sys_, t.path, current, &fd, rules);
  }

  failure commit(const write_target& t, const std::string& next, const write_options& in_lock) {
    temp_file tmp;
    // By path, through the entry's name (see fenced_commit in update.cpp).
    if (failure f = write_temp(sys_, t, workspace_, next, in_lock, tmp))
      return f.code == std::errc::no_such_file_or_directory && entry_gone() ? lost_at_commit(t, h_.fence()) : f;
    // Relative to the fence directory and through our entry's name: the fence.
    const std::string in_fence = tmp.path.substr(t.path.size() + std::string(".fence/").size());
    std::error_code ec = sys_.rename_at(fds_.dir, in_fence, os::cwd, t.path);
    if (!ec) return {};
    sys_.remove_file(tmp.path);  // gone with the entry when a newer holder took it
    if (ec == std::errc::no_such_file_or_directory && entry_gone())
      return lost_at_commit(t, h_.fence());
    return write_failure("rename", t, "cannot rename " + tmp.path + " over the target", ec);
  }

  void release() {
    std::error_code ec;
    h_.release(ec);
  }

 private:
  bool entry_gone() {
    file_status st;
    return sys_.status(workspace_, st) == std::errc::no_such_file_or_directory;
  }

  os& sys_;
  Lock& lock_;
  Handle h_;
  std::string workspace_;
  fence_fds fds_;
};

// update_file and increment_counter under a lock server's grant, both
// forms each: what redis_update.cpp and etcd_update.cpp export is these,
// for their Lock and Handle.
template <class Lock, class Handle>
class fenced_update {
 public:
  static update_result file(const boost::filesystem::path& target, Lock& lock,
                            const update_function& fn, const update_options& options) {
    failure f = with_user_function(fn, [&](const compute_function& c) {
      return run(*system_os(), target, lock, c, options, update_read_rules(options));
    });
    if (f) throw_failure(f);
    return update_result{};
  }

  static update_result file(const boost::filesystem::path& target, Lock& lock,
                            const update_function& fn, const update_options& options,
                            std::error_code& ec) {
    with_user_function(fn, [&](const compute_function& c) {
      failure inner;
      run_noexcept(ec, [&] {
        inner = run(*system_os(), target, lock, c, options, update_read_rules(options));
        return inner;
      });
      return inner;
    });
    return update_result{};
  }

  static std::uint64_t counter(const boost::filesystem::path& file, Lock& lock, std::uint64_t by,
                               const update_options& options) {
    std::uint64_t value = 0;
    run_throwing([&] {
      return run(*system_os(), file, lock, counter_step(file.string(), by, value), options,
                 counter_update_rules(options));
    });
    return value;
  }

  static std::uint64_t counter(const boost::filesystem::path& file, Lock& lock, std::uint64_t by,
                               const update_options& options, std::error_code& ec) noexcept {
    std::uint64_t value = 0;
    run_noexcept(ec, [&] {
      return run(*system_os(), file, lock, counter_step(file.string(), by, value), options,
                 counter_update_rules(options));
    });
    return !ec || ec == errc::dir_sync_failed ? value : 0;
  }

 private:
  static failure run(os& sys, const boost::filesystem::path& target, Lock& lock,
                     const compute_function& compute, const update_options& options,
                     const read_rules& rules) {
    fenced_lock_steps<Lock, Handle> steps(sys, lock);
    return update_flow(sys, steps, target, compute, options, rules);
  }
};

}  // namespace tokenlock::detail
