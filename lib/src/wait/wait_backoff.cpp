#include "wait/wait_backoff.hpp"

#include <algorithm>

namespace tokenlock::detail {

backoff::backoff(const lock_options& o)
    : current_(std::max<std::int64_t>(o.backoff_min.count(), 1)),
      max_(std::max<std::int64_t>(o.backoff_max.count(), current_)) {}

std::chrono::microseconds backoff::next(std::uint64_t random) noexcept {
  const std::int64_t base = current_;
  current_ = std::min<std::int64_t>(current_ * 2, max_);
  const std::int64_t spread = base / 2;  // ±25 % = a window of 50 %
  const std::int64_t jitter =
      spread > 0 ? static_cast<std::int64_t>(random % static_cast<std::uint64_t>(spread + 1)) : 0;
  return std::chrono::microseconds(base - base / 4 + jitter);
}

wait_budget::wait_budget(std::int64_t start_us, const lock_options& o, bool may_wait) noexcept
    : deadline_(start_us + (may_wait ? o.wait.count() * 1000 : 0)),
      waits_(may_wait && o.wait.count() > 0) {}

std::chrono::microseconds wait_budget::cap(std::chrono::microseconds pause,
                                           std::int64_t now_us) const noexcept {
  return std::min(pause, std::chrono::microseconds(deadline_ - now_us));
}

bool immediate_retries::retry_at_once(bool again) noexcept {
  if (again && ++in_a_row_ < max_in_a_row) return true;
  in_a_row_ = 0;
  return false;
}

}  // namespace tokenlock::detail
