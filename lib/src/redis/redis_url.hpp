// Parsing of the server URLs redis_lock accepts (tokenlock/redis_lock.hpp):
//   redis://[[user]:password@]host[:port][/db]
//   unix://[[user]:password@]/path/to.sock[?db=N]
// Strict: a URL either names one server exactly or is refused with the
// part that is wrong, so that a typo never locks against another server.
#pragma once

#include <string>
#include <string_view>

namespace tokenlock::detail {

struct redis_endpoint {
  bool unix_socket = false;
  std::string host;   // TCP: host name or address (IPv6 without brackets)
  int port = 6379;
  std::string path;   // unix socket path
  std::string user;   // empty: none (Redis < 6, or the default user)
  std::string password;
  bool has_password = false;
  int db = 0;

  // "redis://host:port/db" or "unix:///path?db=N", without credentials: for
  // messages.
  std::string display() const;
};

// Empty on success; otherwise what is wrong, for a bad_argument message.
std::string parse_redis_url(std::string_view url, redis_endpoint& out);

// `url` as written, with any user and password replaced by "***" whatever
// is malformed (when in doubt, all of it after the scheme): for the
// message about a URL that does not parse (it ends up in logs).
std::string redis_url_for_message(std::string_view url);

}  // namespace tokenlock::detail
