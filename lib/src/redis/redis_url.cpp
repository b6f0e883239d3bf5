#include "redis/redis_url.hpp"

#include <cctype>

#include "net/server_url.hpp"

namespace tokenlock::detail {

namespace {

// "[user]:password@" (or "user@", which Redis has no use for) at the start
// of `rest`: consumed and stored.
std::string take_credentials(std::string_view& rest, redis_endpoint& out) {
  // The last '@' before the path: a password may hold '@' only encoded,
  // but a unix path may hold '@' after the first '/'.
  const std::size_t slash = rest.find('/');
  const std::size_t at = rest.substr(0, slash).rfind('@');
  if (at == std::string_view::npos) return {};
  const std::string_view cred = rest.substr(0, at);
  rest.remove_prefix(at + 1);
  switch (split_userinfo(cred, out.user, out.password)) {
    case userinfo_error::none: break;
    case userinfo_error::no_password:
      return "credentials must be [user]:password@ (a user without a password is not accepted)";
    case userinfo_error::bad_user_escape: return "the user name has a bad %-escape";
    case userinfo_error::bad_password_escape: return "the password has a bad %-escape";
  }
  out.has_password = true;
  return {};
}

// "/path[?db=N]" of a unix:// URL, after the credentials.
std::string take_unix_socket(std::string_view rest, redis_endpoint& out) {
  const std::size_t q = rest.find('?');
  std::string_view path = rest.substr(0, q);
  if (path.empty() || path[0] != '/') return "a unix:// URL needs an absolute socket path";
  // Percent-decoded, as a URL's path is (RFC 3986): a '#' in the path is
  // written %23 in a lock spec, a '%' %25.
  if (!percent_decode(path, out.path)) return "the socket path has a bad %-escape (a '%' is %25)";
  if (q != std::string_view::npos) {
    std::string_view query = rest.substr(q + 1);
    if (query.substr(0, 3) != "db=" || !parse_number(query.substr(3), 10, 0, 1000000, out.db))
      return "the only query a unix:// URL takes is ?db=N";
  }
  return {};
}

// "host[:port][/db]" of a redis:// URL, after the credentials.
std::string take_tcp_server(std::string_view rest, redis_endpoint& out) {
  const std::size_t slash = rest.find('/');
  if (slash != std::string_view::npos) {
    std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && !parse_number(db, 10, 0, 1000000, out.db))
      return "the database after the '/' must be a number";
  }
  host_port hp;
  switch (split_host_port(rest.substr(0, slash), hp)) {
    case host_port_error::none: break;
    case host_port_error::unclosed_bracket: return "an IPv6 address needs its closing ']'";
    case host_port_error::junk_after_bracket: return "only :port may follow an IPv6 address";
  }
  if (hp.colon && hp.port.empty()) return "the port after ':' is missing";
  const std::string_view host = unbracketed(hp.host);
  if (host.empty()) return "the host is missing";
  for (char c : host)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' || c == '_'))
      return "the host has a character that no host name or address has";
  if (hp.colon && !parse_number(hp.port, 10, 1, 65535, out.port))
    return "the port must be a number from 1 to 65535";
  out.host = std::string(host);
  return {};
}

}  // namespace

std::string redis_url_for_message(std::string_view url) { return masked_url(url, false); }

std::string redis_endpoint::display() const {
  if (unix_socket) return "unix://" + path + (db ? "?db=" + std::to_string(db) : std::string());
  const bool v6 = host.find(':') != std::string::npos;
  return "redis://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) +
         (db ? "/" + std::to_string(db) : std::string());
}

std::string parse_redis_url(std::string_view url, redis_endpoint& out) {
  out = redis_endpoint{};
  constexpr std::string_view tcp = "redis://", unix_scheme = "unix://";
  std::string_view rest;
  if (url.substr(0, tcp.size()) == tcp) {
    rest = url.substr(tcp.size());
  } else if (url.substr(0, unix_scheme.size()) == unix_scheme) {
    rest = url.substr(unix_scheme.size());
    out.unix_socket = true;
  } else {
    return "the URL must start with redis:// or unix:// (rediss:// TLS is not supported)";
  }
  if (std::string e = take_credentials(rest, out); !e.empty()) return e;
  return out.unix_socket ? take_unix_socket(rest, out) : take_tcp_server(rest, out);
}

}  // namespace tokenlock::detail
