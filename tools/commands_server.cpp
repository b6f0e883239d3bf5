// acquire, release, refresh, status, break, run, write and incr with
// --redis URL or --etcd URL: one implementation over the backend's types
// (server_backends.hpp); run's supervision is cmd_run.cpp's.
#include "commands_server.hpp"

#include <iostream>
#include <sstream>

#include "server_backends.hpp"
#include "url_source.hpp"
#include "tokenlock/clock_judgement.hpp"

namespace tokenlock::cli {

void add_server_options(po::options_description& d) {
  d.add_options()("redis", po::value<std::string>()->value_name("URL"),
                  "the lock is the NAME given for LOCKDIR in this Redis server "
                  "(redis://[[user]:password@]host[:port][/db] or unix:///path[?db=N]; "
                  "env:VAR or file:PATH read it from there, keeping a password off the "
                  "command line)")(
      "etcd", po::value<std::string>()->value_name("URL"),
      "the lock is the NAME given for LOCKDIR in this etcd cluster "
      "(etcd://[user:password@]host:port[,host:port...][?cacert=PATH], or etcds:// for HTTPS; "
      "env:VAR or file:PATH as for --redis)");
}

std::optional<server_lock> server_lock_of(const po::variables_map& v, const std::string& name) {
  const bool redis = v.count("redis") > 0, etcd = v.count("etcd") > 0;
  if (!redis && !etcd) return std::nullopt;
  if (redis && etcd) throw po::error("--redis and --etcd exclude each other: name one lock server");
  const char* opt = redis ? "--redis" : "--etcd";
  if (v.count("dir-mode")) throw po::error(std::string("--dir-mode has no meaning with ") + opt);
  if (v.count("group")) throw po::error(std::string("--group has no meaning with ") + opt);
  if (v.count("legacy-timeout"))
    throw po::error(std::string("--legacy-timeout has no meaning with ") + opt);
  server_lock s;
  s.kind = redis ? lock_server::redis : lock_server::etcd;
  s.url = url_from_source(v[redis ? "redis" : "etcd"].as<std::string>(), opt);
  s.name = name;
  return s;
}

namespace {

template <class H>
std::string token_of(const H& h) {
  return std::to_string(h.fence()) + "." + h.owner();
}

// "<fence>.<owner>" -> owner; throws po::error when it is not a token.
template <class B>
std::string owner_of(const std::string& token) {
  const auto dot = token.find('.');
  if (dot == 0 || dot == std::string::npos || token.find_first_not_of("0123456789") != dot ||
      dot + 1 == token.size())
    throw po::error("\"" + token + "\" is not a " + B::noun +
                    " token (<fence>.<owner>, as acquire prints it)");
  return token.substr(dot + 1);
}

template <class B>
int acquire_on(const server_lock& s, std::chrono::milliseconds lease,
               std::chrono::milliseconds wait, int conflict) {
  typename B::lock_type lock(s.url, s.name, options_with<B>(lease, wait));
  std::error_code ec;
  typename B::handle_type h = lock.acquire(ec);
  if (ec) return report(ec, last_error_message(), conflict);
  B::on_grant(h, s.url);
  std::cout << token_of(h) << std::endl;
  h.detach();
  return exit_code::ok;
}

template <class B>
int release_on(const server_lock& s, const std::string& token) {
  typename B::lock_type lock(s.url, s.name);
  std::error_code ec;
  typename B::handle_type h = lock.adopt(owner_of<B>(token), ec);
  if (!ec) h.release(ec);
  return ec ? report(ec, last_error_message()) : exit_code::ok;
}

template <class B>
int refresh_on(const server_lock& s, const std::string& token, std::chrono::milliseconds lease) {
  typename B::lock_type lock(s.url, s.name);
  std::error_code ec;
  typename B::handle_type h = lock.adopt(owner_of<B>(token), ec);
  if (!ec) B::refresh(h, lease, ec);
  if (ec) return report(ec, last_error_message());
  std::cout << token_of(h) << std::endl;  // unchanged: the fence stays
  h.detach();
  return exit_code::ok;
}

// status --json of a server's lock.
template <class B>
json status_json(const server_lock& s, const std::optional<typename B::holder_type>& h) {
  json j;
  put_text(j, B::json_key, B::server(s.url));
  put_text(j, "name", s.name);
  j["state"] = h ? "held" : "free";
  if (h) {
    put_text(j, "token", std::to_string(h->fence) + "." + h->owner);
    j["fence"] = h->fence;
    put_text(j, "owner", h->owner);
    B::json_fields(j, *h);
    j["remaining_ms"] = h->remaining.count();
  }
  return j;
}

template <class B>
int status_on(const server_lock& s, bool json) {
  typename B::lock_type lock(s.url, s.name);
  std::error_code ec;
  const std::optional<typename B::holder_type> h = lock.holder(ec);
  if (ec) return report(ec, last_error_message());
  if (json) {
    std::cout << compact(status_json<B>(s, h)) << std::endl;
    return exit_code::ok;
  }
  if (!h) {
    std::cout << "free\n";
    return exit_code::ok;
  }
  std::cout << "held by " << escaped(B::who(*h)) << " (fence " << h->fence << "), "
            << seconds_text(std::chrono::duration_cast<std::chrono::microseconds>(h->remaining))
            << " of its lease left\n  token " << h->fence << "." << escaped(h->owner) << "\n";
  return exit_code::ok;
}

template <class B>
int break_on(const server_lock& s, const std::string& token, bool force) {
  const std::string owner = owner_of<B>(token);
  typename B::lock_type lock(s.url, s.name);
  std::error_code ec;
  const std::optional<typename B::holder_type> h = lock.holder(ec);
  if (ec) return report(ec, last_error_message());
  if (!h || h->owner != owner)
    return report(make_error_code(errc::lock_lost),
                  "tokenlock: break " + s.name + ": the lock is not held by " + token +
                      (h ? " (fence " + std::to_string(h->fence) + " holds it)" : " (it is free)"));
  // Its lease still runs (an ended one is gone from the server): only a
  // holder provably dead on this host may be broken without --force.
  const bool dead = B::liveness(*h) == owner_liveness::dead;
  if (!force && !dead)
    return report(make_error_code(errc::busy),
                  "tokenlock: break " + s.name + ": refusing to break a grant whose lease still "
                  "runs (" + B::who(*h) + ", " + std::to_string(h->remaining.count()) +
                  " ms left); the server frees it when the lease ends; force it only if you know "
                  "its owner is gone");
  lock.break_owner(owner, ec);
  if (ec) return report(ec, last_error_message());
  std::cout << "broke " << token << "; the lock is free" << std::endl;
  return exit_code::ok;
}

}  // namespace

// Noted as an operation this build does not support (ENOTSUP), so that
// --errors=json names it too.
int server_unavailable(lock_server kind) {
  const std::string line =
      kind == lock_server::redis
          ? "tokenlock: --redis: this tokenlock was built without the Redis backend (hiredis was "
            "not found; install libhiredis-dev and rebuild)"
          : "tokenlock: --etcd: this tokenlock was built without the etcd backend (install "
            "nlohmann-json3-dev and libssl-dev, the archives for a static build, and rebuild)";
  std::cerr << line << "\n";
  note_failure(std::make_error_code(std::errc::not_supported), line);
  return exit_code::software;
}

namespace {

// Calls `f` with the backend of `kind` (as a value of its type), or
// reports that this build has none.
template <class F>
int with_backend(lock_server kind, [[maybe_unused]] F&& f) {
#if TOKENLOCK_HAVE_REDIS
  if (kind == lock_server::redis) return f(redis_backend{});
#endif
#if TOKENLOCK_HAVE_ETCD
  if (kind == lock_server::etcd) return f(etcd_backend{});
#endif
  return server_unavailable(kind);
}

// An update through a backend; in a build without it (which the caller
// checked first), not_supported.
template <class F>
void with_update_backend(lock_server kind, std::error_code& ec, F&& f) {
  const int code = with_backend(kind, [&](auto b) {
    f(b);
    return exit_code::ok;
  });
  if (code != exit_code::ok) ec = std::make_error_code(std::errc::not_supported);
}

}  // namespace

bool server_available([[maybe_unused]] lock_server kind) {
#if TOKENLOCK_HAVE_REDIS
  if (kind == lock_server::redis) return true;
#endif
#if TOKENLOCK_HAVE_ETCD
  if (kind == lock_server::etcd) return true;
#endif
  return false;
}

int server_acquire(const server_lock& s, std::chrono::milliseconds lease,
                   std::chrono::milliseconds wait, int conflict) {
  return with_backend(s.kind, [&](auto b) {
    return acquire_on<decltype(b)>(s, lease, wait, conflict);
  });
}

int server_release(const server_lock& s, const std::string& token) {
  return with_backend(s.kind, [&](auto b) { return release_on<decltype(b)>(s, token); });
}

int server_refresh(const server_lock& s, const std::string& token,
                   std::chrono::milliseconds lease, bool lease_given) {
  if (s.kind == lock_server::etcd && lease_given)
    throw po::error("--lease has no meaning in refresh with --etcd: an etcd lease keeps the TTL "
                    "it was granted with; acquire with the lease you need");
  return with_backend(s.kind, [&](auto b) { return refresh_on<decltype(b)>(s, token, lease); });
}

int server_status(const server_lock& s, bool json) {
  return with_backend(s.kind, [&](auto b) { return status_on<decltype(b)>(s, json); });
}

int server_break(const server_lock& s, const std::string& token, bool force) {
  return with_backend(s.kind, [&](auto b) { return break_on<decltype(b)>(s, token, force); });
}

int server_run(const server_lock& s, const std::vector<std::string>& command,
               std::chrono::milliseconds lease, std::chrono::milliseconds wait, int conflict,
               bool verbose) {
  return with_backend(s.kind, [&](auto b) {
    return run_under(b, s, command, lease, wait, conflict, verbose);
  });
}

update_result server_update_file(const server_lock& s, const std::string& file,
                                 const update_function& fn, const update_options& uo,
                                 std::chrono::milliseconds wait, std::error_code& ec) {
  update_result r;
  with_update_backend(s.kind, ec, [&](auto b) {
    using B = decltype(b);
    typename B::lock_type lock(s.url, s.name, options_with<B>(typename B::options_type{}.lease, wait));
    r = update_file(file, lock, fn, uo, ec);
  });
  return r;
}

std::uint64_t server_increment(const server_lock& s, const std::string& file, std::uint64_t by,
                               const update_options& uo, std::chrono::milliseconds wait,
                               std::error_code& ec) {
  std::uint64_t value = 0;
  with_update_backend(s.kind, ec, [&](auto b) {
    using B = decltype(b);
    typename B::lock_type lock(s.url, s.name, options_with<B>(typename B::options_type{}.lease, wait));
    value = increment_counter(file, lock, by, uo, ec);
  });
  return value;
}

}  // namespace tokenlock::cli
