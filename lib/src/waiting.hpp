// How a process waits for a busy rename-token lock: when it looks at the
// lock again, how it is woken, and how the waiters of one host line up.
//
// The protocol (rename_lock.cpp) decides who holds the lock, one rename at
// a time; this unit decides only when the next round of it runs. Nothing
// here renames anything, so a waiting scheme that misjudges costs latency,
// never exclusion. The policy:
//   - every round retries the fast-path rename; the directory is listed and
//     the holder judged at most every look interval (10 ms), and always on
//     the last round before the deadline, so a verdict is never stale;
//   - between rounds: exponential backoff with jitter, cut short by a
//     directory watch (inotify) when the lock is released;
//   - waiters on one host line up on a wait board (wait_line.hpp): only the
//     head watches the lock, the others sleep on a futex. A sleeper looks
//     at the lock itself at least every sleeper_look_interval(), whatever
//     the board holds, which bounds how long a board can keep it from a
//     free lock (docs/protocol.md, The line of waiters).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "failure.hpp"
#include "lock_directory.hpp"
#include "posix/os.hpp"

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

 protected:
  ~lock_attempt() = default;
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

// A head of the line that has not beaten for this long is taken to be gone:
// twice backoff_max (it beats at least that often) and 10 ms more for a
// busy scheduler.
std::chrono::milliseconds stale_head_after(const lock_options& options);

// The longest a sleeper in the line goes without looking at the lock
// itself: four times stale_head_after (440 ms with the default options).
// After the lock is freed, a waiter takes it within this bound (and a
// round), whatever the board holds: another boot's or host's beat, a beat
// in the future, garbage, or a board that something keeps rewriting.
std::chrono::milliseconds sleeper_look_interval(const lock_options& options);

}  // namespace tokenlock::detail
