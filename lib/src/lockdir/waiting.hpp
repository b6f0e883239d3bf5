// How a process waits for a busy rename-token lock: when it looks at the
// lock again, how it is woken, and how the waiters of one host line up.
//
// The protocol (rename_lock.cpp) decides who holds the lock, one rename at
// a time; this unit decides only when the next round of it runs. Nothing
// here renames anything, so a waiting scheme that misjudges costs latency,
// never exclusion. The wait loop asks four parts, each deciding one thing,
// in lib/src/wait/, which knows nothing of lock directories: what they
// need of the lock (its board, whose board to trust, the name a release
// brings back) this unit hands them.
//   - wait_look.hpp: which rounds list the directory and judge the holder
//     (at most every 10 ms, and always the last round before the deadline,
//     so a verdict is never stale); every round retries the fast path;
//   - wait_place.hpp: the line of waiters of one host, on a wait board
//     (wait_line.hpp): only the head watches the lock, the others sleep on
//     a futex, and a sleeper looks at the lock itself at least every
//     sleeper_look_interval(), whatever the board holds (docs/protocol.md,
//     The line of waiters);
//   - wait_watch.hpp: whether a pause is cut short by a directory watch
//     (inotify) when the lock is released, or polls when releases come fast;
//   - wait_backoff.hpp: how long each pause is (exponential backoff with
//     jitter), and the wait budget.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "core/failure.hpp"
#include "lockdir/lock_directory.hpp"
#include "posix/os.hpp"
#include "wait/wait_place.hpp"

namespace tokenlock::detail {

enum class outcome {
  acquired,
  busy,   // held by a live owner, or not looked at this round
  again,  // the lock changed while we looked (or we created it): retry now
};

// One round of the protocol, as the wait loop drives it.
class lock_attempt {
 public:
  // Tries the fast-path rename; with `look`, also lists the directory and
  // judges the holder (taking over a stale token, creating a missing
  // directory). A round that looked and ends busy has seen a live holder.
  virtual failure attempt(outcome& result, bool look) = 0;
  // Why the lock is busy, for the timed_out and busy messages.
  virtual std::string busy_reason() const = 0;
  // The name whose appearance in the lock directory may admit this waiter
  // (dir_watch::wait_for): lockfile, or "lockfile*" while any rename of
  // the token may (a shared holder; a writer whose mark waits for its
  // hand-over). Must stay valid while the attempt lives.
  virtual std::string_view wake_name() const { return free_token; }
  // Whether a holder that came in ahead of this waiter may be joined (a
  // shared holder): a sleeper handed the head's place on then looks at
  // once, where an exclusive waiter only tries the fast path.
  virtual bool may_join_holders() const { return false; }

 protected:
  ~lock_attempt() = default;
};

// The wait board of a lock directory (lock_paths::board_path). Whose board
// is trusted: the lock directory's owner's, or a member's of the group the
// lock is shared with; before the directory is open, only this process's
// own.
class lock_board_site final : public board_site {
 public:
  explicit lock_board_site(const lock_paths& paths) noexcept : paths_(paths) {}
  const std::string& board_path() const override { return paths_.board_path; }
  unsigned dir_mode() const override { return paths_.dir_mode; }
  board_owners owners(os& sys) const override;

 private:
  const lock_paths& paths_;
};

// What the waits of one lock object keep between them (an idle directory
// watch, the mapped wait board, the memory that the lock cycles fast).
// Shared by the copies of a rename_lock; thread-safe.
struct wait_state;
std::shared_ptr<wait_state> make_wait_state();

// Runs rounds of `attempt` until it acquires, fails, or the wait budget
// (options.wait; none when !may_wait) ends: then timed_out, or busy for a
// single round, with `busy` set.
failure wait_for_lock(os& sys, const lock_paths& paths, const lock_options& options,
                      wait_state& state, bool may_wait, lock_attempt& attempt, bool& busy);

}  // namespace tokenlock::detail
