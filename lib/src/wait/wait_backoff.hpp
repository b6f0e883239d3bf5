// How long a waiter pauses between rounds, and until when it may wait.
//
// Decides the length of each pause only: exponential backoff with jitter,
// the wait budget that cuts the last pause at the deadline, and the rounds
// that retry at once without pausing. Whether a round looks at the holder
// (wait_look.hpp), whether the waiter sleeps in the line (wait_place.hpp)
// and whether a pause is a sleep or a watch (wait_watch.hpp) are decided
// elsewhere.
#pragma once

#include <chrono>
#include <cstdint>

#include "tokenlock/lock_options.hpp"

namespace tokenlock::detail {

// Exponential backoff with ±25 % jitter, from options.backoff_min doubling
// to options.backoff_max. Jitter keeps waiters that started together from
// retrying in lockstep.
class backoff {
 public:
  explicit backoff(const lock_options& options);
  // The next pause: the current step (it then doubles, up to the cap) less
  // a quarter, plus `random` modulo half of it.
  std::chrono::microseconds next(std::uint64_t random) noexcept;

 private:
  std::int64_t current_;
  std::int64_t max_;
};

// The wait budget (lock_options::wait, monotonic clock); none when the
// caller may not wait (try_acquire: a single round).
class wait_budget {
 public:
  wait_budget(std::int64_t start_us, const lock_options& options, bool may_wait) noexcept;
  // Whether the caller waits at all: then running out is timed_out, not busy.
  bool waits() const noexcept { return waits_; }
  std::int64_t deadline() const noexcept { return deadline_; }
  bool spent(std::int64_t now_us) const noexcept { return now_us >= deadline_; }
  // `pause`, cut so that it ends at the deadline at the latest.
  std::chrono::microseconds cap(std::chrono::microseconds pause, std::int64_t now_us) const noexcept;

 private:
  std::int64_t deadline_;
  bool waits_;
};

// Rounds that end in "again" (the token moved while we looked, or we just
// created the directory) retry at once, but only this often in a row:
// beyond that the lock counts as busy and we wait like any waiter.
class immediate_retries {
 public:
  static constexpr int max_in_a_row = 16;
  // Whether the round that just ended (`again`: it ended in "again")
  // retries at once; any round that does not starts the count again.
  bool retry_at_once(bool again) noexcept;

 private:
  int in_a_row_ = 0;
};

}  // namespace tokenlock::detail
