#include "tokenlock/redis_inspect.hpp"

#include "core/failure.hpp"
#include "lockdir/owner_id.hpp"
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
  return detail::process_liveness(holder.host_tag, holder.pid);
}

}  // namespace tokenlock
