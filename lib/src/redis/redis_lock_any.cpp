// redis_lock as a tokenlock::lock (tokenlock/lock.hpp).
#include "lock_grant.hpp"
#include "net/server_url.hpp"
#include "tokenlock/clock_judgement.hpp"
#include "tokenlock/redis_inspect.hpp"
#include "tokenlock/redis_lock.hpp"

namespace tokenlock {
namespace {

struct redis_traits : detail::server_traits<redis_handle> {
  // A shared grant fences nothing.
  static std::optional<std::uint64_t> fence(const redis_handle& h) noexcept {
    if (h.mode() == lock_mode::shared) return std::nullopt;
    return h.fence();
  }
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
  const std::string who = "pid " + std::to_string(h.pid) + " on host " + h.host_tag;
  out = detail::server_holder(h, redis_holder_liveness(h), who);
  out.mode = h.mode;
  out.slots = h.slots;
  out.waiting_writer = h.waiting_writer;
  if (h.waiting_writer) {
    // A mark, not a grant: no fence, and its lease is the mark's.
    out.fence.reset();
    out.facts.erase(out.facts.begin());
    out.stale = false;
    out.reason = "a writer, " + who + ", waits for the shared holders to leave (its mark bars new "
                 "ones), " + seconds_text(std::chrono::duration_cast<std::chrono::microseconds>(
                                  h.remaining)) + " of its mark left";
  } else if (h.mode == lock_mode::shared) {
    // A shared hold fences nothing; the fence shown is the shared grant's.
    out.fence.reset();
    const std::string how =
        h.slots ? "a slot of " + std::to_string(h.slots) + " held" : std::string("held shared");
    out.reason = how + out.reason.substr(4);
  }
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

std::vector<lock_holder> redis_lock::holders_any(std::error_code& ec) noexcept {
  std::vector<lock_holder> out;
  for (redis_holder_info& h : holders(ec)) {
    if (ec) break;
    std::optional<lock_holder> one =
        detail::common_holder(std::optional<redis_holder_info>(std::move(h)), describe, ec);
    if (one) out.push_back(std::move(*one));
  }
  if (ec) out.clear();
  return out;
}

}  // namespace tokenlock
