// What differs between the lock servers behind --redis and --etcd, for the
// command code that is the same for both (commands_server.cpp, cmd_run.cpp).
// Each backend names its lock, handle and holder types and says how to
// refresh, judge and describe a holder.
#pragma once

#include <chrono>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "commands_server.hpp"
#include "json_output.hpp"
#include "tokenlock/clock_judgement.hpp"
#include "tokenlock/lock_options.hpp"

#if TOKENLOCK_HAVE_REDIS
#include "tokenlock/redis_inspect.hpp"
#include "tokenlock/redis_lock.hpp"
#endif
#if TOKENLOCK_HAVE_ETCD
#include "tokenlock/etcd_lock.hpp"
#endif

namespace tokenlock::cli {

#if TOKENLOCK_HAVE_REDIS
struct redis_backend {
  using lock_type = redis_lock;
  using handle_type = redis_handle;
  using holder_type = redis_holder_info;
  using options_type = redis_lock_options;
  static constexpr const char* noun = "Redis lock";
  static constexpr const char* json_key = "redis";

  // The server without credentials: output ends up in logs. `url` has
  // worked already, so it parses.
  static std::string server(const std::string& url) {
    std::error_code ec;
    const std::string s = redis_server_of(url, ec);
    return ec ? std::string("the Redis server") : s;
  }
  // The server's clock behind the lock's last fence: fences still
  // increase, but the operator should know.
  static void on_grant(const redis_handle& h, const std::string& url) {
    if (h.clock_behind().count() <= 0) return;
    std::cerr << "tokenlock: warning: the clock of " << server(url) << " is "
              << seconds_text(h.clock_behind())
              << " behind the last fence it granted for this lock (it went back: a failover or "
                 "a clock step); fences still increase, but fix the server's clock (NTP)\n";
  }
  static void refresh(redis_handle& h, std::chrono::milliseconds lease, std::error_code& ec) {
    h.refresh(lease, ec);
  }
  static owner_liveness liveness(const redis_holder_info& h) { return redis_holder_liveness(h); }
  static std::string who(const redis_holder_info& h) {
    return "pid " + std::to_string(h.pid) + " on host " + h.host_tag;
  }
  static void json_fields(json& j, const redis_holder_info& h) {
    j["pid"] = h.pid;
    put_text(j, "host_tag", h.host_tag);
  }
};
#endif

#if TOKENLOCK_HAVE_ETCD
struct etcd_backend {
  using lock_type = etcd_lock;
  using handle_type = etcd_handle;
  using holder_type = etcd_holder_info;
  using options_type = etcd_lock_options;
  static constexpr const char* noun = "etcd lock";
  static constexpr const char* json_key = "etcd";

  // The members without user and password (etcd://[user:password@]host...).
  static std::string server(const std::string& url) {
    const auto scheme = url.find("://");
    if (scheme == std::string::npos) return url;
    const auto start = scheme + 3;
    const auto end = std::min(url.find('?', start), url.size());
    const auto at = url.rfind('@', end == 0 ? 0 : end - 1);
    if (at == std::string::npos || at < start) return url.substr(0, end);
    return url.substr(0, start) + url.substr(at + 1, end - at - 1);
  }
  // A short TTL that etcd raised to its minimum: the lock is held longer
  // than the script asked, and it should know.
  static void on_grant(const etcd_handle& h, const std::string&) {
    if (!h.lease_raised()) return;
    std::cerr << "tokenlock: note: etcd granted a lease of "
              << seconds_text(std::chrono::duration_cast<std::chrono::microseconds>(h.lease()))
              << ", longer than asked (its minimum TTL, or whole seconds)\n";
  }
  static void refresh(etcd_handle& h, std::chrono::milliseconds, std::error_code& ec) {
    h.refresh(ec);
  }
  static owner_liveness liveness(const etcd_holder_info& h) { return etcd_holder_liveness(h); }
  static std::string who(const etcd_holder_info& h) { return "owner " + h.owner; }
  static void json_fields(json& j, const etcd_holder_info& h) {
    j["lease_id"] = h.lease_id;
    j["lease_ms"] = h.lease.count();
    put_text(j, "key", h.key);
  }
};
#endif

// A backend's lock options with this lease and wait (the rest its defaults).
template <class B>
typename B::options_type options_with(std::chrono::milliseconds lease,
                                      std::chrono::milliseconds wait) {
  typename B::options_type o;
  o.lease = lease;
  o.wait = wait;
  return o;
}

// run under a server's lock (cmd_run.cpp), one per backend this build has.
#if TOKENLOCK_HAVE_REDIS
int run_under(redis_backend, const server_lock& s, const std::vector<std::string>& command,
              std::chrono::milliseconds lease, std::chrono::milliseconds wait, int conflict,
              bool verbose);
#endif
#if TOKENLOCK_HAVE_ETCD
int run_under(etcd_backend, const server_lock& s, const std::vector<std::string>& command,
              std::chrono::milliseconds lease, std::chrono::milliseconds wait, int conflict,
              bool verbose);
#endif

}  // namespace tokenlock::cli
