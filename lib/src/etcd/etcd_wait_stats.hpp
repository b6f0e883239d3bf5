// What etcd_lock's waiting did on the calling thread, counted since the
// thread began: how many watches it opened (on a predecessor's key, or on
// what a shared waiter waits for), and how many of them ended with what
// they waited for: the key deleted, or put again (a wake-up). The FIFO tests read
// it around one acquire: a waiter in line wakes once per release ahead of
// it that concerns it, not once per release. on_answer, when set, is called
// as each request's answer has arrived on this thread (bench/etcd_bench
// times a hand-off from the release's delete being answered with it).
// Nothing else depends on them.
#pragma once

#include <cstdint>
#include <functional>

namespace tokenlock::detail {

struct etcd_wait_stats {
  std::uint64_t watches = 0;
  std::uint64_t wakes = 0;
  std::function<void()> on_answer;
};

etcd_wait_stats& this_thread_etcd_wait_stats() noexcept;

}  // namespace tokenlock::detail
