// acquire, release, refresh, status, break: the lock from shell scripts.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <unistd.h>

#include <boost/filesystem/operations.hpp>

#include "cli.hpp"
#include "commands.hpp"
#include "commands_server.hpp"
#include "json_output.hpp"
#include "tokenlock/clock_judgement.hpp"
#include "tokenlock/tokenlock.hpp"

namespace tokenlock::cli {
namespace {

// Default lease for `acquire`: the lock belongs to a script, which is
// detected dead at once on this host, so the lease only matters across
// hosts and for scripts that are stopped.
constexpr double acquire_default_lease_s = 3600;
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

// Where status measures the clock: in the lock directory, whose file
// server stamps the tokens; before its first use, in its parent, where it
// will be created (the same filesystem unless a mount point is in between).
std::string clock_directory(std::string lockdir) {
  boost::system::error_code e;
  if (boost::filesystem::is_directory(lockdir, e)) return lockdir;
  while (lockdir.size() > 1 && lockdir.back() == '/') lockdir.pop_back();
  const auto slash = lockdir.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : lockdir.substr(0, slash);
}

// The library's messages start with "tokenlock: "; inside a line of our
// own that would say it twice.
std::string without_prefix(const std::string& message) {
  const std::string prefix = "tokenlock: ";
  return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
}

const char* liveness_name(owner_liveness l) {
  switch (l) {
    case owner_liveness::alive: return "alive";
    case owner_liveness::dead: return "dead";
    case owner_liveness::unknown: return "unknown";
  }
  return "unknown";
}

// The token of a lock held elsewhere, or the failure's exit status.
int with_adopted(const po::variables_map& v, const std::function<int(lock_handle&)>& body) {
  rename_lock lock(v["lockdir"].as<std::string>(), directory_options(v));
  std::error_code ec;
  lock_handle h = lock.adopt(v["token"].as<std::string>(), ec);
  if (ec) return report(ec, last_error_message());
  return body(h);
}

// What status found: the holder, and the clock measured beside it.
struct status_seen {
  std::optional<holder_info> holder;
  std::string clock_dir;
  clock_offset clock;
  std::string clock_error;  // empty when the clock was measured
  std::chrono::microseconds allowance = lock_options{}.skew_allowance;
  clock_judgement judged;
};

const char* state_of(const status_seen& s) {
  return !s.holder ? "free" : s.holder->stale ? "stale" : "held";
}

// The holder's fields of status --json.
void put_holder(json& j, const holder_info& h) {
  put_text(j, "token", h.token);
  j["pid"] = h.pid;
  put_text(j, "host_tag", h.host_tag);
  j["same_host"] = h.same_host;
  j["owner"] = liveness_name(h.owner);
  j["expires"] = utc(h.expires);
  j["expires_us"] = micros(h.expires);
  j["stale"] = h.stale;
  put_text(j, "reason", h.reason);
  j["legacy"] = h.legacy;
}

// The clock object of status --json.
json clock_json(const status_seen& s) {
  json c;
  put_text(c, "measured_in", s.clock_dir);
  if (!s.clock_error.empty()) {
    put_text(c, "error", s.clock_error);
    return c;
  }
  c["offset_us"] = s.clock.offset.count();
  c["uncertainty_us"] = s.clock.uncertainty.count();
  c["skew_allowance_us"] = s.allowance.count();
  c["verdict"] = clock_verdict_name(s.judged.verdict);
  return c;
}

// status --json: one object, and its newline.
std::string status_json(const std::string& dir, const status_seen& s) {
  json j;
  put_text(j, "lock_dir", dir);
  j["state"] = state_of(s);
  if (s.holder) put_holder(j, *s.holder);
  j["clock"] = clock_json(s);
  return compact(j) + "\n";
}

// status: who holds the lock, then the clock's line.
std::string status_text(const status_seen& s) {
  const auto& h = s.holder;
  std::string t = !h ? "free\n"
                     : (h->stale ? "stale: " : "") + h->reason + "\n  token " + h->token + "\n";
  if (!s.clock_error.empty())
    return t + "clock: not measured: " + s.clock_error + "\n";
  return t + "clock: " + s.judged.text + (s.judged.fix.empty() ? "" : "; fix: " + s.judged.fix) +
         "\n";
}

}  // namespace

int cmd_acquire(const args& a) {
  po::options_description d(
      "Usage: tokenlock acquire [-w SECS | -n] [--lease SECS] [--pid PID] LOCKDIR\n\n"
      "Acquires the lock and prints its token. The lock stays held after this command\n"
      "ends: it belongs to the calling process (the shell), or to PID, and is released\n"
      "with 'tokenlock release LOCKDIR TOKEN', when its lease ends, or as soon as its\n"
      "owner is found dead.\n\nOptions");
  add_wait_options(d);
  add_legacy_option(d);
  add_lease_option(d,
                   "how long the lock stays valid without a refresh (default 3600; with --redis "
                   "or --etcd 300: the server cannot see that the owner died)");
  d.add_options()(
      "pid", po::value<int>()->value_name("PID"), "the owner process (default: the parent)");
  add_dir_mode_option(d);
  add_server_options(d);
  return with_command_line("acquire", a, d, {"lockdir"}, [](const po::variables_map& v) {
    lock_options o;
    const int conflict = apply_wait(v, o);
    if (const auto s = server_lock_of(v, v["lockdir"].as<std::string>())) {
      if (v.count("pid")) throw po::error("--pid has no meaning with a lock server");
      const double lease = v.count("lease") ? v["lease"].as<double>() : server_default_lease_s;
      return server_acquire(*s, lease_option(lease), o.wait, conflict);
    }
    o = directory_options(v, o);
    o.lease = lease_option(v.count("lease") ? v["lease"].as<double>() : acquire_default_lease_s);
    o.owner_pid = v.count("pid") ? v["pid"].as<int>() : static_cast<int>(::getppid());
    if (o.owner_pid <= 0) throw po::error("--pid takes a process id");
    std::error_code ec;
    lock_handle h = rename_lock(v["lockdir"].as<std::string>(), o).acquire(ec);
    if (ec) return report(ec, last_error_message(), conflict);
    std::cout << h.detach() << std::endl;
    return exit_code::ok;
  });
}

int cmd_release(const args& a) {
  po::options_description d(
      "Usage: tokenlock release LOCKDIR TOKEN\n\n"
      "Releases the lock held with TOKEN (as printed by acquire or refresh). Exits 3\n"
      "when the lock does not hold TOKEN any more: it was taken over, or TOKEN belongs\n"
      "to another lock.\n\nOptions");
  add_dir_mode_option(d);
  add_server_options(d);
  return with_command_line("release", a, d, {"lockdir", "token"}, [](const po::variables_map& v) {
    if (const auto s = server_lock_of(v, v["lockdir"].as<std::string>()))
      return server_release(*s, v["token"].as<std::string>());
    return with_adopted(v, [](lock_handle& h) {
      std::error_code ec;
      h.release(ec);
      return ec ? report(ec, last_error_message()) : exit_code::ok;
    });
  });
}

int cmd_refresh(const args& a) {
  po::options_description d(
      "Usage: tokenlock refresh [--lease SECS] LOCKDIR TOKEN\n\n"
      "Extends the lease of the lock held with TOKEN and prints the new token (the\n"
      "token's name carries its expiry, so it changes). Exits 3 when the lock does\n"
      "not hold TOKEN any more.\n\nOptions");
  add_lease_option(d, "the new lease, from now", acquire_default_lease_s);
  add_dir_mode_option(d);
  add_server_options(d);
  return with_command_line("refresh", a, d, {"lockdir", "token"}, [](const po::variables_map& v) {
    const auto lease = lease_option(v["lease"].as<double>());
    if (const auto s = server_lock_of(v, v["lockdir"].as<std::string>()))
      return server_refresh(*s, v["token"].as<std::string>(), lease, !v["lease"].defaulted());
    return with_adopted(v, [&](lock_handle& h) {
      std::error_code ec;
      h.refresh(lease, ec);
      if (ec) return report(ec, last_error_message());
      std::cout << h.detach() << std::endl;
      return exit_code::ok;
    });
  });
}

int cmd_status(const args& a) {
  po::options_description d(
      "Usage: tokenlock status [--json] LOCKDIR\n\n"
      "Says who holds the lock: free, held by pid P on host H until T, or stale (and\n"
      "why); then, on a line of its own, how this host's clock compares with the file\n"
      "server's, and whether that is inside the skew allowance (1 s) that leases from\n"
      "other hosts rest on. --json prints one object; its fields are listed in\n"
      "tokenlock(1).\n\nOptions");
  d.add_options()("json", "print a JSON object");
  add_legacy_option(d);
  add_dir_mode_option(d);
  add_server_options(d);
  return with_command_line("status", a, d, {"lockdir"}, [](const po::variables_map& v) {
    const std::string dir = v["lockdir"].as<std::string>();
    if (const auto s = server_lock_of(v, dir)) return server_status(*s, v.count("json") > 0);
    std::error_code ec;
    status_seen s;
    s.holder = rename_lock(dir, directory_options(v)).holder(ec);
    if (ec) return report(ec, last_error_message());
    s.clock_dir = clock_directory(dir);
    s.clock = estimate_clock_offset(s.clock_dir, ec);
    if (ec) s.clock_error = without_prefix(last_error_message());
    s.judged = judge_clock_offset(s.clock, s.allowance);
    std::cout << (v.count("json") ? status_json(dir, s) : status_text(s)) << std::flush;
    return exit_code::ok;
  });
}

int cmd_break(const args& a) {
  po::options_description d(
      "Usage: tokenlock break [--force] LOCKDIR TOKEN\n\n"
      "Takes over exactly TOKEN if it is stale, then frees the lock. A token that is\n"
      "not stale is refused (exit 1) unless --force is given; any other token is never\n"
      "touched. Exits 3 when the lock does not hold TOKEN any more.\n\nOptions");
  d.add_options()("force", "take it over even if its owner looks alive and its lease runs");
  add_legacy_option(d);
  add_dir_mode_option(d);
  add_server_options(d);
  return with_command_line("break", a, d, {"lockdir", "token"}, [](const po::variables_map& v) {
    const std::string token = v["token"].as<std::string>();
    if (const auto s = server_lock_of(v, v["lockdir"].as<std::string>()))
      return server_break(*s, token, v.count("force") > 0);
    std::error_code ec;
    lock_handle h = rename_lock(v["lockdir"].as<std::string>(), directory_options(v))
                        .take_over(token, v.count("force") > 0, ec);
    if (!ec) h.release(ec);
    if (ec) return report(ec, last_error_message());
    std::cout << "broke " << token << "; the lock is free" << std::endl;
    return exit_code::ok;
  });
}

}  // namespace tokenlock::cli
