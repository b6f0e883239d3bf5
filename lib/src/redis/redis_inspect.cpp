#include "tokenlock/redis_inspect.hpp"

#include "failure.hpp"
#include "posix/os.hpp"
#include "redis/redis_url.hpp"

namespace tokenlock {
namespace {

detail::failure server_of(const std::string& url, std::string& out) {
  detail::redis_endpoint server;
  const std::string wrong = detail::parse_redis_url(url, server);
  // The URL itself stays out of the message: it may hold a password.
  if (!wrong.empty())
    return detail::make_failure(errc::bad_argument, "tokenlock: name the server of a Redis URL: "
                                                    "bad Redis URL: " + wrong);
  out = server.display();
  return {};
}

}  // namespace

std::string redis_server_of(const std::string& url) {
  std::string out;
  detail::run_throwing([&] { return server_of(url, out); });
  return out;
}

std::string redis_server_of(const std::string& url, std::error_code& ec) noexcept {
  std::string out;
  detail::run_noexcept(ec, [&] { return server_of(url, out); });
  return out;
}

owner_liveness redis_holder_liveness(const redis_holder_info& holder) noexcept {
  try {
    auto sys = detail::system_os();
    if (holder.pid <= 0 || holder.host_tag != sys->self().host_tag) return owner_liveness::unknown;
    return sys->signal_probe(holder.pid) == std::errc::no_such_process ? owner_liveness::dead
                                                                       : owner_liveness::alive;
  } catch (...) {
    return owner_liveness::unknown;  // out of memory for the host tag: not known to be gone
  }
}

}  // namespace tokenlock
