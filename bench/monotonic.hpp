// The monotonic clock in seconds, for the benchmarks that time whole runs
// of forked processes (contention, read_mostly).
#pragma once

#include <time.h>

namespace tokenlock::bench {

inline double now_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

}  // namespace tokenlock::bench
