// What redis_lock's waiting did on the calling thread, counted since the
// thread began: how often a release's wake-up reached it (BLPOP answered
// with an element), and how often the attempt that followed found the lock
// taken all the same (woken, and lost to someone else). The fairness tests
// read it around one acquire (docs/redis.md, "Hand-off"); nothing else
// depends on it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

namespace tokenlock::detail {

struct redis_wait_stats {
  std::uint64_t wakes = 0;
  std::uint64_t wakes_lost = 0;
  // Of wakes_lost, those whose attempt was answered within the hand-off's
  // grace of the BLPOP being sent (so within the grace of the release that
  // woke it, which came after): the hand-off promises there are none. A
  // later one may lose to anyone once the hand-off has expired.
  std::uint64_t wakes_lost_within_grace = 0;
  // Called when a BLPOP has been written to the server: the waiter is in
  // the line from the moment the server reads it, before any other
  // client's next command (the server reads what is ready in one pass).
  std::function<void()> joined_line;
};

// How long a release keeps the free lock for the waiter it woke
// (lib/src/redis/scripts/wake.lua sets the hand-off key for as long).
constexpr std::chrono::milliseconds redis_handoff_grace{500};

// This thread's counts; a thread that never waits has zeros.
redis_wait_stats& this_thread_redis_wait_stats() noexcept;

}  // namespace tokenlock::detail
