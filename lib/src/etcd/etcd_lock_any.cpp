// etcd_lock as a tokenlock::lock (tokenlock/lock.hpp).
#include "lock_grant.hpp"
#include "open/lock_spec.hpp"
#include "tokenlock/etcd_lock.hpp"

namespace tokenlock {
namespace {

// An etcd lease keeps the TTL it was granted with: a keep-alive renews
// that TTL, and no request changes it. A shorter lease asked for is
// granted by renewing it; a longer one cannot be. No lease is 0 ms or
// less (lock.hpp): such a refresh is refused as on the other backends,
// not taken as a shorter lease.
struct etcd_traits : detail::server_traits<etcd_handle> {
  static void refresh(etcd_handle& h, std::chrono::milliseconds lease,
                      std::error_code& ec) noexcept {
    if (lease > std::chrono::milliseconds(0) && lease <= h.lease()) {
      h.refresh(ec);
      return;
    }
    detail::run_noexcept(ec, [&] {
      const std::string why =
          lease > std::chrono::milliseconds(0)
              ? "an etcd lease keeps the TTL it was granted (" + std::to_string(h.lease().count()) +
                    " ms), so it cannot be refreshed for " + std::to_string(lease.count()) +
                    " ms; ask for the longer lease when acquiring"
              : "a lease of " + std::to_string(lease.count()) +
                    " ms; a lease is more than 0 and at most 24 hours";
      return detail::make_failure(errc::bad_argument, "tokenlock: refresh " + h.key() + ": " + why);
    });
  }
};

}  // namespace

std::string etcd_lock::spec() const { return detail::server_spec_text(url_, true, name_); }

handle etcd_lock::acquire_any(std::error_code& ec) noexcept {
  return detail::erase<etcd_traits>(acquire(ec), ec);
}

std::optional<handle> etcd_lock::try_acquire_any(std::error_code& ec) noexcept {
  return detail::erase<etcd_traits>(try_acquire(ec), ec);
}

handle etcd_lock::adopt_any(const std::string& owner, std::error_code& ec) noexcept {
  return detail::erase<etcd_traits>(adopt(owner, ec), ec);
}

void etcd_lock::break_owner_any(const std::string& owner, std::error_code& ec) noexcept {
  break_owner(owner, ec);
}

std::optional<lock_holder> etcd_lock::holder_any(std::error_code& ec) noexcept {
  return detail::common_holder(holder(ec), etcd_holder_liveness, ec);
}

}  // namespace tokenlock
