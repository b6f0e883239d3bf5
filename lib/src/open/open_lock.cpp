// tokenlock::open_lock (tokenlock/open_lock.hpp): a spec to a lock of the
// backend it names, with the backends this build has.
#include "tokenlock/open_lock.hpp"

#include "core/failure.hpp"
#include "net/server_url.hpp"
#include "open/lock_spec.hpp"
#include "tokenlock/rename_lock.hpp"
#if TOKENLOCK_HAVE_REDIS
#include "tokenlock/redis_lock.hpp"
#endif
#if TOKENLOCK_HAVE_ETCD
#include "tokenlock/etcd_lock.hpp"
#endif

namespace tokenlock {
namespace {

using detail::failure;

// The backend's settings: its own part of open_options, then what all share.
template <class Options>
Options server_options(const open_options& o) {
  Options out;
  out.lease = o.lease;
  out.wait = o.wait;
  out.connect_timeout = o.connect_timeout;
  out.command_timeout = o.command_timeout;
  return out;
}

std::unique_ptr<lock> open_directory(const detail::lock_spec& s, const open_options& o) {
  lock_options options = o.directory;
  options.lease = o.lease;
  options.wait = o.wait;
  options.mode = o.mode;
  options.slots = o.slots;
  return std::make_unique<rename_lock>(s.location, options);
}

#if TOKENLOCK_HAVE_REDIS
std::unique_ptr<lock> open_redis(const detail::lock_spec& s, const open_options& o) {
  auto options = server_options<redis_lock_options>(o);
  options.replicas = o.redis.replicas;
  options.replica_timeout = o.redis.replica_timeout;
  options.key_prefix = o.redis.key_prefix;
  options.mode = o.mode;
  options.slots = o.slots;
  return std::make_unique<redis_lock>(s.location, s.name, options);
}
#endif

#if TOKENLOCK_HAVE_ETCD
std::unique_ptr<lock> open_etcd(const detail::lock_spec& s, const open_options& o) {
  auto options = server_options<etcd_lock_options>(o);
  options.key_prefix = o.etcd.key_prefix;
  options.mode = o.mode;
  options.slots = o.slots;
  return std::make_unique<etcd_lock>(s.location, s.name, options);
}
#endif

failure unavailable(std::string_view spec, lock_backend backend) {
  const bool redis = backend == lock_backend::redis;
  return detail::make_failure(
      errc::backend_unavailable,
      "tokenlock: open_lock " + detail::masked_spec(spec) + ": this build of tokenlock has no " +
          (redis ? "Redis" : "etcd") + " backend; build it with " +
          (redis ? "-DTOKENLOCK_REDIS=ON (needs hiredis: libhiredis-dev)"
                 : "-DTOKENLOCK_ETCD=ON (needs OpenSSL and nlohmann-json: libssl-dev, "
                   "nlohmann-json3-dev)") +
          " and link tokenlock::open");
}

failure open_any(std::string_view spec, const open_options& o, std::unique_ptr<lock>& out) {
  detail::lock_spec s;
  if (failure f = detail::parse_lock_spec(spec, s)) return f;
  switch (s.backend) {
    case lock_backend::directory: out = open_directory(s, o); return {};
    case lock_backend::redis:
#if TOKENLOCK_HAVE_REDIS
      out = open_redis(s, o);
      return {};
#else
      return unavailable(spec, s.backend);
#endif
    case lock_backend::etcd:
#if TOKENLOCK_HAVE_ETCD
      out = open_etcd(s, o);
      return {};
#else
      return unavailable(spec, s.backend);
#endif
  }
  return unavailable(spec, s.backend);
}

}  // namespace

std::unique_ptr<lock> open_lock(std::string_view spec, const open_options& options) {
  std::unique_ptr<lock> out;
  detail::run_throwing([&] { return open_any(spec, options, out); });
  return out;
}

std::unique_ptr<lock> open_lock(std::string_view spec, const open_options& options,
                                std::error_code& ec) noexcept {
  std::unique_ptr<lock> out;
  detail::run_noexcept(ec, [&] { return open_any(spec, options, out); });
  return out;
}

std::string server_lock_spec(std::string_view url, std::string_view name) {
  std::string spec;
  for (char c : url) spec += c == '#' ? std::string("%23") : std::string(1, c);
  return spec + "#" + detail::spec_fragment(name);
}

bool backend_available(lock_backend backend) noexcept {
  switch (backend) {
    case lock_backend::directory: return true;
    case lock_backend::redis: return TOKENLOCK_HAVE_REDIS != 0;
    case lock_backend::etcd: return TOKENLOCK_HAVE_ETCD != 0;
  }
  return false;
}

}  // namespace tokenlock
