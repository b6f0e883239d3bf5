// rename_lock as a tokenlock::lock (tokenlock/lock.hpp): its calls, their
// lock_handle behind a tokenlock::handle.
#include <chrono>
#include <ctime>
#include <string>
#include <vector>

#include "lock_grant.hpp"
#include "lockdir/shared_lock.hpp"
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

const char* liveness_name(owner_liveness l) noexcept {
  switch (l) {
    case owner_liveness::alive: return "alive";
    case owner_liveness::dead: return "dead";
    case owner_liveness::unknown: return "unknown";
  }
  return "unknown";
}

std::int64_t micros(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

std::string utc(std::chrono::system_clock::time_point t) {
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// What `tokenlock status --json` has always said of a token's holder.
std::vector<lock_fact> directory_facts(const holder_info& h) {
  return {{"pid", static_cast<std::int64_t>(h.pid)},
          {"host_tag", h.host_tag},
          {"same_host", h.same_host},
          {"owner", std::string(liveness_name(h.owner))},
          {"expires", utc(h.expires)},
          {"expires_us", micros(h.expires)},
          {"stale", h.stale},
          {"reason", h.reason},
          {"legacy", h.legacy}};
}

lock_holder directory_holder(holder_info&& h) {
  lock_holder out;
  out.facts = directory_facts(h);
  out.mode = h.mode;
  out.slots = h.slots;
  out.waiting_writer = h.waiting_writer;
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
  if (token.compare(0, detail::entry_prefix.size(), detail::entry_prefix) == 0) {
    detail::run_noexcept(ec, [&] { return detail::break_share(core_, options_, token); });
    return;
  }
  lock_handle taken = take_over(token, true, ec);
  if (!ec) {
    taken.release(ec);
    return;
  }
  // A lone share converted into a group since: its copies are its share.
  if (ec == errc::lock_lost && detail::is_lone_name(token)) {
    ec.clear();
    detail::run_noexcept(ec, [&] { return detail::break_share(core_, options_, token); });
  }
}

std::optional<lock_holder> rename_lock::holder_any(std::error_code& ec) noexcept {
  std::optional<holder_info> h = holder(ec);
  if (ec || !h) return std::nullopt;
  std::optional<lock_holder> out;
  detail::run_noexcept(ec, [&] {
    out = directory_holder(std::move(*h));
    return detail::failure{};
  });
  return out;
}

std::vector<lock_holder> rename_lock::holders_any(std::error_code& ec) noexcept {
  std::vector<holder_info> all = holders(ec);
  std::vector<lock_holder> out;
  if (ec) return out;
  detail::run_noexcept(ec, [&] {
    for (auto& h : all) out.push_back(directory_holder(std::move(h)));
    return detail::failure{};
  });
  return out;
}

lock_features rename_lock::features() const noexcept {
  lock_features f;
  f.frees_dead_owners = true;
  f.local_clock = true;
  return f;
}

std::vector<lock_fact> rename_lock::location() const { return {{"lock_dir", dir_.string()}}; }

}  // namespace tokenlock
