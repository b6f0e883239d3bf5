// redis_lock as a tokenlock::lock (tokenlock/lock.hpp).
#include "lock_grant.hpp"
#include "open/lock_spec.hpp"
#include "tokenlock/redis_inspect.hpp"
#include "tokenlock/redis_lock.hpp"

namespace tokenlock {
namespace {

struct redis_traits : detail::server_traits<redis_handle> {
  static void refresh(redis_handle& h, std::chrono::milliseconds lease,
                      std::error_code& ec) noexcept {
    h.refresh(lease, ec);
  }
};

}  // namespace

std::string redis_lock::spec() const { return detail::server_spec_text(url_, false, name_); }

handle redis_lock::acquire_any(std::error_code& ec) noexcept {
  return detail::erase<redis_traits>(acquire(ec), ec);
}

std::optional<handle> redis_lock::try_acquire_any(std::error_code& ec) noexcept {
  return detail::erase<redis_traits>(try_acquire(ec), ec);
}

handle redis_lock::adopt_any(const std::string& owner, std::error_code& ec) noexcept {
  return detail::erase<redis_traits>(adopt(owner, ec), ec);
}

void redis_lock::break_owner_any(const std::string& owner, std::error_code& ec) noexcept {
  break_owner(owner, ec);
}

std::optional<lock_holder> redis_lock::holder_any(std::error_code& ec) noexcept {
  return detail::common_holder(holder(ec), redis_holder_liveness, ec);
}

}  // namespace tokenlock
