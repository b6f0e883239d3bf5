// acquire, release, refresh, status, break: the lock from shell scripts.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <unistd.h>

#include "cli.hpp"
#include "commands.hpp"
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

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

const char* liveness_name(owner_liveness l) {
  switch (l) {
    case owner_liveness::alive: return "alive";
    case owner_liveness::dead: return "dead";
    case owner_liveness::unknown: return "unknown";
  }
  return "unknown";
}

void add_wait_options(po::options_description& d) {
  d.add_options()("wait,w", po::value<double>()->value_name("SECS"),
                  "wait at most SECS seconds for the lock (default: wait as long as it takes)")(
      "nonblock,n", "fail at once if the lock is busy")(
      "conflict-exit-code,E", po::value<int>()->value_name("CODE")->default_value(exit_code::busy),
      "exit status when the lock is busy or the wait times out");
}

// -w/-n into lock_options::wait; throws po::error when both are given.
void apply_wait(const po::variables_map& v, lock_options& o) {
  if (v.count("wait") && v.count("nonblock")) throw po::error("-w and -n exclude each other");
  if (v.count("nonblock"))
    o.wait = std::chrono::milliseconds(0);
  else if (v.count("wait"))
    o.wait = seconds_option("wait", v["wait"].as<double>(), true);
  else
    o.wait = std::chrono::hours(24 * 365);
}

int busy_code(const po::variables_map& v) {
  int code = v["conflict-exit-code"].as<int>();
  if (code < 0 || code > 255) throw po::error("-E takes an exit status from 0 to 255");
  return code;
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
  d.add_options()("lease", po::value<double>()->value_name("SECS")->default_value(acquire_default_lease_s),
                  "how long the lock stays valid without a refresh")(
      "pid", po::value<int>()->value_name("PID"), "the owner process (default: the parent)");
  po::options_description hidden;
  hidden.add_options()("lockdir", po::value<std::string>()->required(), "");
  po::positional_options_description pos;
  pos.add("lockdir", 1);
  lock_options o;
  int conflict = exit_code::busy;
  try {
    parsed p = parse(a, d, hidden, pos);
    if (p.help) {
      std::cout << d << "\n";
      return exit_code::ok;
    }
    apply_wait(p.vars, o);
    conflict = busy_code(p.vars);
    o.lease = seconds_option("lease", p.vars["lease"].as<double>(), false);
    o.max_lease = std::max(o.max_lease, std::chrono::duration_cast<std::chrono::milliseconds>(o.lease));
    o.owner_pid = p.vars.count("pid") ? p.vars["pid"].as<int>() : static_cast<int>(::getppid());
    if (o.owner_pid <= 0) throw po::error("--pid takes a process id");
    rename_lock lock(p.vars["lockdir"].as<std::string>(), o);
    std::error_code ec;
    lock_handle h = lock.acquire(ec);
    if (ec) return report(ec, last_error_message(), conflict);
    std::cout << h.detach() << std::endl;
    return exit_code::ok;
  } catch (const po::error& e) {
    return usage_error("acquire", e.what());
  }
}

int cmd_release(const args& a) {
  po::options_description d(
      "Usage: tokenlock release LOCKDIR TOKEN\n\n"
      "Releases the lock held with TOKEN (as printed by acquire or refresh). Exits 3\n"
      "when the lock does not hold TOKEN any more: it was taken over, or TOKEN belongs\n"
      "to another lock.\n\nOptions");
  po::options_description hidden;
  hidden.add_options()("lockdir", po::value<std::string>()->required(), "")(
      "token", po::value<std::string>()->required(), "");
  po::positional_options_description pos;
  pos.add("lockdir", 1).add("token", 1);
  try {
    parsed p = parse(a, d, hidden, pos);
    if (p.help) {
      std::cout << d << "\n";
      return exit_code::ok;
    }
    rename_lock lock(p.vars["lockdir"].as<std::string>());
    std::error_code ec;
    lock_handle h = lock.adopt(p.vars["token"].as<std::string>(), ec);
    if (!ec) h.release(ec);
    if (ec) return report(ec, last_error_message());
    return exit_code::ok;
  } catch (const po::error& e) {
    return usage_error("release", e.what());
  }
}

int cmd_refresh(const args& a) {
  po::options_description d(
      "Usage: tokenlock refresh [--lease SECS] LOCKDIR TOKEN\n\n"
      "Extends the lease of the lock held with TOKEN and prints the new token (the\n"
      "token's name carries its expiry, so it changes). Exits 3 when the lock does\n"
      "not hold TOKEN any more.\n\nOptions");
  d.add_options()("lease", po::value<double>()->value_name("SECS")->default_value(acquire_default_lease_s),
                  "the new lease, from now");
  po::options_description hidden;
  hidden.add_options()("lockdir", po::value<std::string>()->required(), "")(
      "token", po::value<std::string>()->required(), "");
  po::positional_options_description pos;
  pos.add("lockdir", 1).add("token", 1);
  try {
    parsed p = parse(a, d, hidden, pos);
    if (p.help) {
      std::cout << d << "\n";
      return exit_code::ok;
    }
    const auto lease = seconds_option("lease", p.vars["lease"].as<double>(), false);
    rename_lock lock(p.vars["lockdir"].as<std::string>());
    std::error_code ec;
    lock_handle h = lock.adopt(p.vars["token"].as<std::string>(), ec);
    if (!ec) h.refresh(lease, ec);
    if (ec) return report(ec, last_error_message());
    std::cout << h.detach() << std::endl;
    return exit_code::ok;
  } catch (const po::error& e) {
    return usage_error("refresh", e.what());
  }
}

int cmd_status(const args& a) {
  po::options_description d(
      "Usage: tokenlock status [--json] LOCKDIR\n\n"
      "Says who holds the lock: free, held by pid P on host H until T, or stale (and\n"
      "why). --json prints one object; its fields are listed in tokenlock(1).\n\nOptions");
  d.add_options()("json", "print a JSON object");
  po::options_description hidden;
  hidden.add_options()("lockdir", po::value<std::string>()->required(), "");
  po::positional_options_description pos;
  pos.add("lockdir", 1);
  try {
    parsed p = parse(a, d, hidden, pos);
    if (p.help) {
      std::cout << d << "\n";
      return exit_code::ok;
    }
    const std::string dir = p.vars["lockdir"].as<std::string>();
    rename_lock lock(dir);
    std::error_code ec;
    std::optional<holder_info> h = lock.holder(ec);
    if (ec) return report(ec, last_error_message());
    const char* state = !h ? "free" : h->stale ? "stale" : "held";
    if (p.vars.count("json")) {
      std::ostringstream j;
      j << "{\"lock_dir\":" << json_string(dir) << ",\"state\":\"" << state << "\"";
      if (h) {
        j << ",\"token\":" << json_string(h->token) << ",\"pid\":" << h->pid
          << ",\"host_tag\":" << json_string(h->host_tag)
          << ",\"same_host\":" << (h->same_host ? "true" : "false") << ",\"owner\":\""
          << liveness_name(h->owner) << "\",\"expires\":" << json_string(utc(h->expires))
          << ",\"expires_us\":" << micros(h->expires) << ",\"stale\":" << (h->stale ? "true" : "false")
          << ",\"reason\":" << json_string(h->reason);
      }
      j << "}";
      std::cout << j.str() << std::endl;
    } else if (!h) {
      std::cout << "free" << std::endl;
    } else if (h->stale) {
      std::cout << "stale: " << h->reason << "\n  token " << h->token << std::endl;
    } else {
      std::cout << h->reason << "\n  token " << h->token << std::endl;
    }
    return exit_code::ok;
  } catch (const po::error& e) {
    return usage_error("status", e.what());
  }
}

int cmd_break(const args& a) {
  po::options_description d(
      "Usage: tokenlock break [--force] LOCKDIR TOKEN\n\n"
      "Takes over exactly TOKEN if it is stale, then frees the lock. A token that is\n"
      "not stale is refused (exit 1) unless --force is given; any other token is never\n"
      "touched. Exits 3 when the lock does not hold TOKEN any more.\n\nOptions");
  d.add_options()("force", "take it over even if its owner looks alive and its lease runs");
  po::options_description hidden;
  hidden.add_options()("lockdir", po::value<std::string>()->required(), "")(
      "token", po::value<std::string>()->required(), "");
  po::positional_options_description pos;
  pos.add("lockdir", 1).add("token", 1);
  try {
    parsed p = parse(a, d, hidden, pos);
    if (p.help) {
      std::cout << d << "\n";
      return exit_code::ok;
    }
    rename_lock lock(p.vars["lockdir"].as<std::string>());
    const std::string token = p.vars["token"].as<std::string>();
    std::error_code ec;
    lock_handle h = lock.take_over(token, p.vars.count("force") > 0, ec);
    if (!ec) h.release(ec);
    if (ec) return report(ec, last_error_message());
    std::cout << "broke " << token << "; the lock is free" << std::endl;
    return exit_code::ok;
  } catch (const po::error& e) {
    return usage_error("break", e.what());
  }
}

}  // namespace tokenlock::cli
