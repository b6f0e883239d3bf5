// The line of waiters of one lock on one host.
//
// Without it every waiter polls the lock on its own schedule: a freed lock
// stays idle until one of them happens to look, and waking them all on each
// release (inotify) costs the CPU that the holder needs. With it, waiters
// share a wait board (os.hpp) and only the head of the line watches the
// lock; the others sleep on a futex. When the head gets the lock, or gives
// up, it hands its place to the sleeper that has slept longest, which then
// watches while the new holder works.
//
// The line decides only when a waiter looks at the lock. Every acquisition
// is still a rename of the protocol, so a board that is missing, stale or
// scribbled on costs latency, never safety: sleepers wake on their own
// backoff anyway, and a head that stops beating (killed, stopped) is
// replaced by the first sleeper to notice.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "posix/os.hpp"

namespace tokenlock::detail {

class wait_line {
 public:
  // Word numbers on the board.
  static constexpr int magic_word = 0;  // board_magic once initialised
  static constexpr int turn_word = 1;   // bumped at each hand-off; sleepers wait on it
  static constexpr int head_word = 2;   // id of the head of the line, 0: none
  static constexpr int beat_word = 3;   // the head's last look, steady clock in ms
  static constexpr int hungry_word = 4; // 1: the head has waited past its patience
  static constexpr std::uint32_t board_magic = 0x544c5731;  // "TLW1"

  // `board` may be null (no line: the caller polls on its own). A head
  // whose beat is older than `stale_after`, or ahead of this host's clock
  // by more than that (written on another boot or host), is replaced.
  wait_line(os& sys, std::shared_ptr<wait_board> board, std::chrono::milliseconds stale_after);
  // Leaves the line, handing the head's place on.
  ~wait_line();
  wait_line(const wait_line&) = delete;
  wait_line& operator=(const wait_line&) = delete;

  bool usable() const noexcept { return board_ != nullptr; }

  // Takes the head's place when it is free, already ours, or its holder has
  // stopped beating; records a beat when it is ours. `turn` receives the
  // turn to sleep on otherwise (read before looking at the head, so that a
  // hand-off in between wakes the sleep at once).
  bool claim_head(std::uint32_t& turn) noexcept;
  // The head marks the line hungry once it has waited past its patience;
  // leaving the head's place clears the mark.
  void mark_hungry() noexcept;
  // Whether a live head of the line on `board` is hungry. A process that
  // already has the board mapped (it waited on this lock before) then joins
  // the line instead of taking a free lock past the head: otherwise a
  // process that releases and acquires again in a loop wins nearly every
  // time, before the head has even woken up. Reads shared memory only.
  static bool hungry(wait_board& board, std::uint32_t now_ms, std::int64_t stale_ms) noexcept;

  // How a sleeper came to head the line (wait_for_place).
  enum class place {
    handed_on,  // a live head handed it on: it has just taken the lock or given up
    taken,      // the place was free, or its head had stopped beating
    none,       // the deadline passed first
  };
  // Sleeps until this waiter heads the line or `deadline_us` (steady clock)
  // passes. It wakes when the head hands its place on, and otherwise when
  // the head's last beat would have gone stale, so a head that died is
  // replaced within `stale_after`. Meanwhile it leaves the lock alone: a
  // sleeper that looked at the lock each time it woke made thousands of
  // wake-ups a second under contention, and the CPU they took was what
  // starting processes needed (docs/protocol.md, The line of waiters).
  // `turn` is what the failed claim_head gave. The caller passes a deadline
  // no later than its own next look at the lock (sleeper_look_interval,
  // wait_place.hpp): the board only times waits, and a head that never hands
  // on must not keep a sleeper from a free lock for longer than that.
  place wait_for_place(std::uint32_t turn, std::int64_t deadline_us) noexcept;

 private:
  void leave() noexcept;
  std::uint32_t now_ms() noexcept;

  os& sys_;
  std::shared_ptr<wait_board> board_;
  std::int64_t stale_ms_;
  std::uint32_t id_ = 0;
  bool head_ = false;
};

// Initialises a freshly created board and checks one that exists; false
// when it holds something else (then it is not used).
bool board_is_usable(wait_board& board) noexcept;

}  // namespace tokenlock::detail
