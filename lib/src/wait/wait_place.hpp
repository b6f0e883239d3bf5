// One waiter's place in the line of waiters (wait_line.hpp): whether it
// lines up, whether it heads the line or sleeps, how long the head pauses,
// and when the head marks the line hungry.
//
// The line decides only when a waiter looks at the lock; every acquisition
// is still a rename of the protocol. Whatever the board holds, a sleeper
// looks at the lock itself at least every sleeper_look_interval(), which
// bounds how long a board can keep it from a free lock (docs/protocol.md,
// The line of waiters).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "posix/os.hpp"
#include "tokenlock/lock_options.hpp"
#include "wait/wait_backoff.hpp"
#include "wait/wait_line.hpp"

namespace tokenlock::detail {

// A head of the line that has not beaten for this long is taken to be gone:
// twice backoff_max (it beats at least that often) and 10 ms more for a
// busy scheduler.
std::chrono::milliseconds stale_head_after(const lock_options& options);

// The longest a sleeper in the line goes without looking at the lock
// itself: four times stale_head_after, 8 x backoff_max + 40 ms (440 ms with
// the default options). After the lock is freed, a waiter takes it within
// this bound (and a round), whatever the board holds: another boot's or
// host's beat, a beat in the future, garbage, or a board that something
// keeps rewriting.
std::chrono::milliseconds sleeper_look_interval(const lock_options& options);

// Where a lock's wait board is, and whose board to trust: all that the
// line knows of the lock it waits for (the rename-token lock's is
// lock_board_site, lockdir/waiting.hpp).
class board_site {
 public:
  virtual const std::string& board_path() const = 0;
  // The mode of what the lock creates (lock_paths::dir_mode): the board is
  // made with its read and write bits.
  virtual unsigned dir_mode() const = 0;
  // Who may have made the board, asked when the line first opens it.
  virtual board_owners owners(os& sys) const = 0;

 protected:
  ~board_site() = default;
};

// The wait board of one lock object, mapped once and shared by its threads
// and waits (a mapping stays valid across fork). Thread-safe.
class board_keeper {
 public:
  // The board if an earlier wait mapped it, without opening it.
  std::shared_ptr<wait_board> mapped();
  // The board, mapping it on first use. With `create` false an absent board
  // stays absent (and may be created by a later call): only a waiter that
  // has seen the lock held creates one, so a lock that was never contended
  // leaves no file beside it. Sets `settled` when the answer is final
  // (mapped, or known to be unusable).
  std::shared_ptr<wait_board> board_for(os& sys, const board_site& site, bool create,
                                        bool& settled);

 private:
  // A board whose file was truncated under its mapping is dropped, and the
  // file opened afresh by the next wait that needs it. Called locked.
  void drop_broken_board();

  std::mutex mutex_;
  std::shared_ptr<wait_board> board_;
  bool settled_ = false;
};

class place_in_line {
 public:
  // A head of the line that has waited this long marks the line hungry
  // (wait_line::hungry): long enough for a holder that releases and
  // re-acquires at once to keep the lock through short bursts, short enough
  // that the head gets it within a few critical sections. docs/benchmarks.md
  // has the measurements.
  static constexpr std::int64_t head_patience_us = 1000;

  place_in_line(os& sys, const lock_options& options, board_keeper& boards,
                const board_site& site) noexcept
      : sys_(sys), options_(options), boards_(boards), site_(site) {}

  // Whether a process that waited on this lock before (its board is still
  // mapped) finds a live, hungry head at `now_us`: it then joins the line
  // instead of taking a free lock past the head. Memory only.
  bool hungry_line_ahead(std::int64_t now_us);
  // Joins the line, once: false while there is no board yet and `create`
  // (the waiter has seen a live holder) is not set; true once in a line,
  // or when there is none to join (queue_waiters off, no usable board).
  bool join(bool create);
  // Whether this waiter is in a line it can use.
  bool usable() const noexcept { return line_ && line_->usable(); }
  // Whether this waiter heads the line now (taking a free or stale place);
  // `turn` receives the turn to sleep on when it does not.
  bool claim_head(std::uint32_t& turn) noexcept { return line_->claim_head(turn); }
  // The head's pause at `now_us`: its own backoff, from backoff_min again
  // when it becomes head (the lock may be released any moment, and only the
  // head looks). Marks the line hungry once past head_patience_us.
  std::chrono::microseconds head_pause(std::int64_t now_us);
  // A hungry head that polls (`watching` false) looks again after
  // backoff_min at most: the others now leave a freed lock to it, which
  // would otherwise stay free for the rest of a pause of up to backoff_max.
  // A watching head is woken by the release anyway.
  std::chrono::microseconds poll_pause(std::chrono::microseconds pause, bool watching) const;
  // Sleeps until this waiter heads the line, `deadline_us`, or its own next
  // look at the lock (sleeper_look_interval from now), whichever is first.
  wait_line::place sleep(std::uint32_t turn, std::int64_t deadline_us);

 private:
  os& sys_;
  const lock_options& options_;
  board_keeper& boards_;
  const board_site& site_;
  std::optional<wait_line> line_;  // left (handing the head's place on) when the wait ends
  std::optional<backoff> head_delay_;
  std::int64_t head_since_ = 0;
  bool hungry_ = false;
};

}  // namespace tokenlock::detail
