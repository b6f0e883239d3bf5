// etcd_lock as a tokenlock::lock (tokenlock/lock.hpp).
#include "etcd/etcd_url.hpp"
#include "lock_grant.hpp"
#include "net/server_url.hpp"
#include "tokenlock/clock_judgement.hpp"
#include "tokenlock/etcd_lock.hpp"

namespace tokenlock {
namespace {

// An etcd lease keeps the TTL it was granted with: a keep-alive renews
// that TTL, and no request changes it. A shorter lease asked for is
// granted by renewing it; a longer one cannot be. No lease is 0 ms or
// less (lock.hpp): such a refresh is refused as on the other backends,
// not taken as a shorter lease.
struct etcd_traits : detail::server_traits<etcd_handle> {
  // A shared grant has no fence: its holders write nothing fenced.
  static std::optional<std::uint64_t> fence(const etcd_handle& h) noexcept {
    if (h.mode() == lock_mode::shared) return std::nullopt;
    return h.fence();
  }
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

// A shared holder, or a writer waiting behind shared holders, in words.
std::string line_reason(const etcd_holder_info& h, bool stale) {
  const std::string who = "owner " + h.owner;
  const std::string left =
      seconds_text(std::chrono::duration_cast<std::chrono::microseconds>(h.remaining)) +
      " of its lease left" + (stale ? "; its process is gone (same host)" : "");
  if (h.waiting_writer) return "a writer waiting for the shared holders to leave: " + who + ", " + left;
  return "held shared by " + who +
         (h.slots > 0 ? " (one of a semaphore of " + std::to_string(h.slots) + ")" : std::string()) +
         ", " + left;
}

// As every server holder is reported (server_holder), with the mode. A
// shared holder has no fence, and a waiting writer none yet: their keys'
// create revisions are their places in line (the fact "revision").
void describe(const etcd_holder_info& h, lock_holder& out) {
  out = detail::server_holder(h, etcd_holder_liveness(h), "owner " + h.owner);
  out.mode = h.mode;
  out.slots = h.slots;
  out.waiting_writer = h.waiting_writer;
  if (h.mode == lock_mode::shared || h.waiting_writer) {
    out.fence.reset();
    out.facts.erase(out.facts.begin());  // server_holder's "fence"
    out.reason = line_reason(h, out.stale);
  }
  out.facts.push_back({"revision", h.revision});
  out.facts.push_back({"lease_id", h.lease_id});
  out.facts.push_back({"lease_ms", static_cast<std::int64_t>(h.lease.count())});
  out.facts.push_back({"key", h.key});
}

// A short lease that etcd raised to its minimum TTL: the lock is held
// longer than the caller asked for, and it should know.
std::string grant_notice(const etcd_handle& h) {
  if (!h.lease_raised()) return {};
  return "etcd granted a lease of " +
         seconds_text(std::chrono::duration_cast<std::chrono::microseconds>(h.lease())) +
         ", longer than asked (its minimum TTL, or whole seconds)";
}

// The members without user and password, as the parser reads them; a URL
// that does not parse (the first call reports it) is named by nothing of
// it, since a password may hold any character.
std::string members_of(const std::string& url) {
  detail::etcd_url parsed;
  return detail::parse_etcd_url(url, parsed) ? std::string("the etcd cluster") : parsed.display();
}

}  // namespace

lock_features etcd_lock::features() const noexcept {
  lock_features f;
  f.fences = true;
  f.lease_adjustable = false;
  return f;
}

std::vector<lock_fact> etcd_lock::location() const {
  return {{"etcd", members_of(url_)}, {"name", name_}};
}

std::string etcd_lock::spec() const { return detail::server_spec_text(url_, true, name_); }

handle etcd_lock::acquire_any(std::error_code& ec) noexcept {
  return detail::erase<etcd_traits>(acquire(ec), ec, grant_notice);
}

std::optional<handle> etcd_lock::try_acquire_any(std::error_code& ec) noexcept {
  return detail::erase<etcd_traits>(try_acquire(ec), ec, grant_notice);
}

handle etcd_lock::adopt_any(const std::string& owner, std::error_code& ec) noexcept {
  return detail::erase<etcd_traits>(adopt(owner, ec), ec);
}

void etcd_lock::break_owner_any(const std::string& owner, std::error_code& ec) noexcept {
  break_owner(owner, ec);
}

std::optional<lock_holder> etcd_lock::holder_any(std::error_code& ec) noexcept {
  return detail::common_holder(holder(ec), describe, ec);
}

std::vector<lock_holder> etcd_lock::holders_any(std::error_code& ec) noexcept {
  std::vector<etcd_holder_info> infos = holders(ec);
  std::vector<lock_holder> out;
  if (ec) return out;
  detail::run_noexcept(ec, [&] {
    for (const etcd_holder_info& h : infos) {
      out.emplace_back();
      describe(h, out.back());
    }
    return detail::failure{};
  });
  if (ec) out.clear();
  return out;
}

}  // namespace tokenlock
