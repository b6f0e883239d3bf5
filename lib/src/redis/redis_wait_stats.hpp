// What redis_lock's waiting did on the calling thread, counted since the
// thread began: how often a release's wake-up reached it (BLPOP answered
// with an element), and how often the attempt that followed found the lock
// taken all the same (woken, and lost to someone else). The fairness tests
// read it around one acquire (docs/redis.md, "Hand-off"); nothing else
// depends on it.
#pragma once

#include <cstdint>

namespace tokenlock::detail {

struct redis_wait_stats {
  std::uint64_t wakes = 0;
  std::uint64_t wakes_lost = 0;
};

// This thread's counts; a thread that never waits has zeros.
redis_wait_stats& this_thread_redis_wait_stats() noexcept;

}  // namespace tokenlock::detail
