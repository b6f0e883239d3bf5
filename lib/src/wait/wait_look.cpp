#include "wait/wait_look.hpp"

namespace tokenlock::detail {

bool look_policy::due(std::int64_t now, std::int64_t deadline) noexcept {
  const bool look = (!looked_ && !defer_first_) || (looked_ && now - last_ >= interval_us) ||
                    now >= deadline;
  defer_first_ = false;
  if (look) {
    looked_ = true;
    last_ = now;
  }
  return look;
}

void look_policy::judged_by_head(std::int64_t now) noexcept {
  looked_ = true;
  last_ = now;
}

}  // namespace tokenlock::detail
