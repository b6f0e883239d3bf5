// rename_lock as a tokenlock::lock (tokenlock/lock.hpp): its calls, their
// lock_handle behind a tokenlock::handle.
#include <string>

#include "lock_grant.hpp"
#include "tokenlock/rename_lock.hpp"

namespace tokenlock {
namespace {

// A token's name is its id; a lock directory has no fence (lock.hpp, Fences).
struct directory_traits {
  static std::optional<std::uint64_t> fence(const lock_handle&) noexcept { return std::nullopt; }
  static const std::string& id(const lock_handle& h) noexcept { return h.token(); }
  static void refresh(lock_handle& h, std::chrono::milliseconds lease,
                      std::error_code& ec) noexcept {
    h.refresh(lease, ec);
  }
};

lock_holder directory_holder(holder_info&& h) {
  lock_holder out;
  out.id = std::move(h.token);
  out.expires = h.expires;
  out.owner = h.owner;
  out.stale = h.stale;
  out.reason = std::move(h.reason);
  return out;
}

}  // namespace

handle rename_lock::acquire_any(std::error_code& ec) noexcept {
  return detail::erase<directory_traits>(acquire(ec), ec);
}

std::optional<handle> rename_lock::try_acquire_any(std::error_code& ec) noexcept {
  return detail::erase<directory_traits>(try_acquire(ec), ec);
}

handle rename_lock::adopt_any(const std::string& token, std::error_code& ec) noexcept {
  return detail::erase<directory_traits>(adopt(token, ec), ec);
}

// Taking the token over (forced: the caller vouches that its holder is
// gone) and releasing it: any other token is never touched.
void rename_lock::break_owner_any(const std::string& token, std::error_code& ec) noexcept {
  lock_handle taken = take_over(token, true, ec);
  if (!ec) taken.release(ec);
}

std::optional<lock_holder> rename_lock::holder_any(std::error_code& ec) noexcept {
  std::optional<holder_info> h = holder(ec);
  if (ec || !h) return std::nullopt;
  return directory_holder(std::move(*h));  // moves only: nothing to fail
}

}  // namespace tokenlock
