// acquire, release, refresh, status and break with --redis URL.
#include "commands_redis.hpp"

#include <iostream>
#include <sstream>

#include <unistd.h>

#include "cli.hpp"

#if TOKENLOCK_HAVE_REDIS
#include "tokenlock/clock_judgement.hpp"
#include "tokenlock/redis_inspect.hpp"
#include "tokenlock/redis_lock.hpp"
#endif

namespace tokenlock::cli {

#if TOKENLOCK_HAVE_REDIS

bool redis_available() { return true; }

namespace {

redis_lock_options options_with(std::chrono::milliseconds lease, std::chrono::milliseconds wait) {
  redis_lock_options o;
  o.lease = lease;
  o.wait = wait;
  return o;
}

// The server without credentials: output ends up in logs. `url` has
// worked already, so it parses.
std::string server_of(const std::string& url) {
  std::error_code ec;
  const std::string server = redis_server_of(url, ec);
  return ec ? std::string("the Redis server") : server;
}

std::string token_of(const redis_handle& h) { return std::to_string(h.fence()) + "." + h.owner(); }

// "<fence>.<owner>" -> owner; throws po::error when it is not a token.
std::string owner_of(const std::string& token) {
  const auto dot = token.find('.');
  if (dot == 0 || dot == std::string::npos || token.find_first_not_of("0123456789") != dot ||
      dot + 1 == token.size())
    throw po::error("\"" + token + "\" is not a Redis lock token (<fence>.<owner>, as acquire prints it)");
  return token.substr(dot + 1);
}

}  // namespace

void warn_if_clock_behind(const redis_handle& h, const std::string& url) {
  if (h.clock_behind().count() <= 0) return;
  std::cerr << "tokenlock: warning: the clock of " << server_of(url) << " is "
            << seconds_text(h.clock_behind())
            << " behind the last fence it granted for this lock (it went back: a failover or a "
               "clock step); fences still increase, but fix the server's clock (NTP)\n";
}

int redis_acquire(const std::string& url, const std::string& name, std::chrono::milliseconds lease,
                  std::chrono::milliseconds wait, int conflict) {
  redis_lock lock(url, name, options_with(lease, wait));
  std::error_code ec;
  redis_handle h = lock.acquire(ec);
  if (ec) return report(ec, last_error_message(), conflict);
  warn_if_clock_behind(h, url);
  std::cout << token_of(h) << std::endl;
  h.detach();
  return exit_code::ok;
}

int redis_release(const std::string& url, const std::string& name, const std::string& token) {
  redis_lock lock(url, name);
  std::error_code ec;
  redis_handle h = lock.adopt(owner_of(token), ec);
  if (!ec) h.release(ec);
  return ec ? report(ec, last_error_message()) : exit_code::ok;
}

int redis_refresh(const std::string& url, const std::string& name, const std::string& token,
                  std::chrono::milliseconds lease) {
  redis_lock lock(url, name);
  std::error_code ec;
  redis_handle h = lock.adopt(owner_of(token), ec);
  if (!ec) h.refresh(lease, ec);
  if (ec) return report(ec, last_error_message());
  std::cout << token_of(h) << std::endl;  // unchanged: the fence stays
  h.detach();
  return exit_code::ok;
}

int redis_status(const std::string& url, const std::string& name, bool json) {
  redis_lock lock(url, name);
  std::error_code ec;
  std::optional<redis_holder_info> h = lock.holder(ec);
  if (ec) return report(ec, last_error_message());
  if (json) {
    std::ostringstream j;
    j << "{\"redis\":" << json_string(server_of(url)) << ",\"name\":" << json_string(name)
      << ",\"state\":\"" << (h ? "held" : "free") << "\"";
    if (h)
      j << ",\"token\":" << json_string(std::to_string(h->fence) + "." + h->owner)
        << ",\"fence\":" << h->fence << ",\"owner\":" << json_string(h->owner)
        << ",\"pid\":" << h->pid << ",\"host_tag\":" << json_string(h->host_tag)
        << ",\"remaining_ms\":" << h->remaining.count();
    j << "}";
    std::cout << j.str() << std::endl;
    return exit_code::ok;
  }
  if (!h) {
    std::cout << "free\n";
    return exit_code::ok;
  }
  std::cout << "held by pid " << h->pid << " on host " << h->host_tag << " (fence " << h->fence
            << "), " << seconds_text(std::chrono::duration_cast<std::chrono::microseconds>(h->remaining))
            << " of its lease left\n  token " << h->fence << "." << h->owner << "\n";
  return exit_code::ok;
}

int redis_break(const std::string& url, const std::string& name, const std::string& token,
                bool force) {
  const std::string owner = owner_of(token);
  redis_lock lock(url, name);
  std::error_code ec;
  std::optional<redis_holder_info> h = lock.holder(ec);
  if (ec) return report(ec, last_error_message());
  if (!h || h->owner != owner)
    return report(make_error_code(errc::lock_lost),
                  "tokenlock: break " + name + ": the lock is not held by " + token +
                      (h ? " (fence " + std::to_string(h->fence) + " holds it)" : " (it is free)"));
  // Its lease still runs (an ended one is gone from Redis): only a holder
  // provably dead on this host may be broken without --force.
  const bool dead = redis_holder_liveness(*h) == owner_liveness::dead;
  if (!force && !dead)
    return report(make_error_code(errc::busy),
                  "tokenlock: break " + name + ": refusing to break a grant whose lease still runs "
                  "(pid " + std::to_string(h->pid) + " on host " + h->host_tag + ", " +
                  std::to_string(h->remaining.count()) +
                  " ms left); Redis frees it when the lease ends; force it only if you know its "
                  "owner is gone");
  lock.break_owner(owner, ec);
  if (ec) return report(ec, last_error_message());
  std::cout << "broke " << token << "; the lock is free" << std::endl;
  return exit_code::ok;
}

#else

bool redis_available() { return false; }

namespace {
// Noted as an operation this build does not support (ENOTSUP), so that
// --errors=json names it too.
int unavailable() {
  const std::string line =
      "tokenlock: --redis: this tokenlock was built without the Redis backend (hiredis was not "
      "found; install libhiredis-dev and rebuild)";
  std::cerr << line << "\n";
  note_failure(std::make_error_code(std::errc::not_supported), line);
  return exit_code::software;
}
}  // namespace

int redis_acquire(const std::string&, const std::string&, std::chrono::milliseconds,
                  std::chrono::milliseconds, int) {
  return unavailable();
}
int redis_release(const std::string&, const std::string&, const std::string&) { return unavailable(); }
int redis_refresh(const std::string&, const std::string&, const std::string&,
                  std::chrono::milliseconds) {
  return unavailable();
}
int redis_status(const std::string&, const std::string&, bool) { return unavailable(); }
int redis_break(const std::string&, const std::string&, const std::string&, bool) {
  return unavailable();
}
int redis_run(const std::string&, const std::string&, const std::vector<std::string>&,
              std::chrono::milliseconds, std::chrono::milliseconds, int, bool) {
  return unavailable();
}

#endif

}  // namespace tokenlock::cli
