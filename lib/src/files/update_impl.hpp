// The updater's core, over a given OS, for the public functions and tests.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>

#include "files/atomic_write_impl.hpp"
#include "core/failure.hpp"
#include "files/file_writer.hpp"
#include "posix/os.hpp"
#include "tokenlock/keep_alive.hpp"
#include "tokenlock/update.hpp"

namespace tokenlock::detail {

// Computes the new contents from the current ones, or fails (nothing is
// then written).
using compute_function =
    std::function<failure(const std::optional<std::string>& current, std::string& next)>;

// `rules` bound the read of the target (null: update_read_rules(options));
// a counter's are counter_update_rules(options).
failure update_impl(os& sys, const boost::filesystem::path& target, const rename_lock& lock,
                    const compute_function& compute, const update_options& options,
                    update_result& result, const read_rules* rules = nullptr);

// After a commit (and the release): flushes the target's directory when
// options.write.sync asks for it; a failure is dir_sync_failed, saying the
// update is committed.
failure sync_after_commit(os& sys, const write_target& t, const update_options& options);

// A shared hold (lock_mode::shared, a semaphore's slot) has no fence: a
// fenced update or commit under one is a bad argument, and nothing is
// written.
inline failure refuse_shared(const char* step, const std::string& target) {
  return make_failure(errc::bad_argument,
                      describe(step, target,
                               "a shared hold gives no fence; take the lock exclusively to write "
                               "(nothing was written)",
                               {}));
}

// About one update in options.sweep_every removes this target's temporary
// files older than `lease`, left beside it by writers that crashed.
void sweep_target_temps(os& sys, const write_target& t, std::chrono::milliseconds lease,
                        const update_options& options);

// What the commit writes under the lock: the file is flushed before its
// rename; the directory is flushed after the release (sync_after_commit), so
// that the next holder, whose update contains this one, need not wait.
inline write_options in_lock_options(const write_options& w) {
  write_options in_lock = w;
  if (in_lock.sync == durability::file_and_dir) in_lock.sync = durability::file;
  return in_lock;
}

// The descriptor of the version an update replaces, closed when the update
// returns, after the release: its last close then frees the old blocks
// outside the lock. Freed inside the commit's rename, they held the lock for
// most of an update where freeing is slow: large files, or ext4 without a
// journal mounted with `discard`, where the rename waited for a synchronous
// discard (docs/atomic-writes.md, update_file and increment_counter).
struct close_later {
  os& sys;
  int fd = -1;
  close_later(const close_later&) = delete;
  close_later& operator=(const close_later&) = delete;
  ~close_later() {
    if (fd >= 0) sys.close(fd);
  }
};

// The update flow, the same for every kind of lock: acquire, read, compute,
// commit through the lock's fence, release, flush. `Steps` is what a kind
// of lock brings (the file lock's in update.cpp, a lock server's grant's
// in fence_directory.hpp):
//   failure acquire();
//   std::chrono::milliseconds lease() const;
//   Handle& handle();   the held lock, for keep_alive
//   failure read(const write_target&, std::optional<std::string>& current,
//                int& fd, const read_rules&);   under the lock, fenced
//   failure commit(const write_target&, const std::string& next,
//                  const write_options& in_lock);
//   void release();     a failure is not reported: the update is in place
template <class Steps>
failure update_flow(os& sys, Steps& steps, const boost::filesystem::path& target,
                    const compute_function& compute, const update_options& options,
                    const read_rules& rules);

// Runs `compute`, refreshing the lease meanwhile when `keep` is set. A
// takeover during the computation fails the update before anything is
// written; other refresh errors are left to the commit's fence to judge.
template <class Handle>
failure compute_keeping(Handle& h, const write_target& t, const compute_function& compute,
                        const std::optional<std::string>& current, std::string& next,
                        bool keep) {
  if (!keep) return compute(current, next);
  std::error_code ec;
  keep_alive keeper(h, {}, ec);
  if (ec)
    return make_failure(ec, describe("keep the lease alive", t.path,
                                     keeper.last_message() + "; nothing was written", {}));
  failure f = compute(current, next);
  keeper.stop();
  if (f) return f;
  if (keeper.lost())
    return make_failure(errc::lock_lost,
                        describe("commit", t.path,
                                 "the lock was taken over while the update function ran (" +
                                     keeper.last_message() +
                                     "); nothing was written and the new owner's data is intact",
                                 {}));
  return {};
}

template <class Steps>
failure update_flow(os& sys, Steps& steps, const boost::filesystem::path& target,
                    const compute_function& compute, const update_options& options,
                    const read_rules& rules) {
  if (failure f = steps.acquire()) return f;
  write_target t;
  if (failure f = resolve_target(sys, target, options.write, t)) return f;
  sweep_target_temps(sys, t, steps.lease(), options);
  close_later replaced{sys};
  std::optional<std::string> current;
  if (failure f = steps.read(t, current, replaced.fd, rules)) return f;
  std::string next;
  if (failure f = compute_keeping(steps.handle(), t, compute, current, next, options.keep_alive))
    return f;
  if (failure f = steps.commit(t, next, in_lock_options(options.write))) return f;
  // Committed. A failed release cannot undo that, and reporting it would
  // invite a retry that applies the update twice; the handle's destructor
  // tries once more.
  steps.release();
  return sync_after_commit(sys, t, options);
}

// The step of increment_counter: parses the counter (a missing file is 0),
// adds `by` (EOVERFLOW past 64 bits) and stores the new value in `out`.
compute_function counter_step(const std::string& path, std::uint64_t by, std::uint64_t& out);

// Runs an update whose function is the caller's: an exception it throws is
// carried past the lock's release and rethrown.
template <class Run>
failure with_user_function(const update_function& fn, Run run) {
  std::exception_ptr thrown;
  compute_function compute = [&](const std::optional<std::string>& current,
                                 std::string& next) -> failure {
    try {
      next = fn(current);
    } catch (...) {
      thrown = std::current_exception();
      return make_failure(errc::bad_argument, "tokenlock: the update function threw");
    }
    return {};
  };
  failure f = run(compute);
  if (thrown) std::rethrow_exception(thrown);
  return f;
}

// One unsigned 64-bit decimal and a newline, canonical (no sign, no leading
// zero); a missing file (std::nullopt) is no value. Anything else is
// corrupt_data.
failure parse_counter(const std::string& path, const std::optional<std::string>& text,
                      std::optional<std::uint64_t>& value);

}  // namespace tokenlock::detail
