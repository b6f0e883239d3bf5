// redis_lock as a tokenlock::lock (tokenlock/lock.hpp).
#include "lock_grant.hpp"
#include "net/server_url.hpp"
#include "tokenlock/clock_judgement.hpp"
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

// The server without credentials: facts and notices end up in logs. A URL
// that does not parse has failed the call already; say "the Redis server".
std::string server_of(const std::string& url) {
  std::error_code ec;
  std::string s = redis_server_of(url, ec);
  return ec ? std::string("the Redis server") : s;
}

void describe(const redis_holder_info& h, lock_holder& out) {
  out = detail::server_holder(
      h, redis_holder_liveness(h), "pid " + std::to_string(h.pid) + " on host " + h.host_tag);
  out.facts.push_back({"pid", static_cast<std::int64_t>(h.pid)});
  out.facts.push_back({"host_tag", h.host_tag});
}

}  // namespace

// The server's clock behind the lock's last fence: fences still increase,
// but the operator should know.
std::string redis_lock::grant_notice(const redis_handle& h) const {
  if (h.clock_behind().count() <= 0) return {};
  return "the clock of " + server_of(url_) + " is " + seconds_text(h.clock_behind()) +
         " behind the last fence it granted for this lock (it went back: a failover or a clock "
         "step); fences still increase, but fix the server's clock (NTP)";
}

lock_features redis_lock::features() const noexcept {
  lock_features f;
  f.fences = true;
  return f;
}

std::vector<lock_fact> redis_lock::location() const {
  return {{"redis", server_of(url_)}, {"name", name_}};
}

std::string redis_lock::spec() const { return detail::server_spec_text(url_, false, name_); }

handle redis_lock::acquire_any(std::error_code& ec) noexcept {
  return detail::erase<redis_traits>(acquire(ec), ec,
                                     [this](const redis_handle& h) { return grant_notice(h); });
}

std::optional<handle> redis_lock::try_acquire_any(std::error_code& ec) noexcept {
  return detail::erase<redis_traits>(try_acquire(ec), ec,
                                     [this](const redis_handle& h) { return grant_notice(h); });
}

handle redis_lock::adopt_any(const std::string& owner, std::error_code& ec) noexcept {
  return detail::erase<redis_traits>(adopt(owner, ec), ec);
}

void redis_lock::break_owner_any(const std::string& owner, std::error_code& ec) noexcept {
  break_owner(owner, ec);
}

std::optional<lock_holder> redis_lock::holder_any(std::error_code& ec) noexcept {
  return detail::common_holder(holder(ec), describe, ec);
}

}  // namespace tokenlock
