#include "redis/redis_url.hpp"

#include <algorithm>
#include <cctype>

namespace tokenlock::detail {

namespace {

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// A decimal in [lo, hi], without sign or leading garbage.
bool parse_int(std::string_view s, long lo, long hi, int& out) {
  if (!all_digits(s) || s.size() > 10) return false;
  long v = 0;
  for (char c : s) v = v * 10 + (c - '0');
  if (v < lo || v > hi) return false;
  out = static_cast<int>(v);
  return true;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decoding of a user name or password (they may hold ':' or '@').
bool decode(std::string_view s, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return false;
    const int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

// "[user]:password@" (or "user@", which Redis has no use for) at the start
// of `rest`: consumed and stored.
std::string take_credentials(std::string_view& rest, redis_endpoint& out) {
  // The last '@' before the path: a password may hold '@' only encoded,
  // but a unix path may hold '@' after the first '/'.
  const std::size_t slash = rest.find('/');
  const std::size_t at = rest.substr(0, slash).rfind('@');
  if (at == std::string_view::npos) return {};
  std::string_view cred = rest.substr(0, at);
  rest.remove_prefix(at + 1);
  const std::size_t colon = cred.find(':');
  if (colon == std::string_view::npos)
    return "credentials must be [user]:password@ (a user without a password is not accepted)";
  if (!decode(cred.substr(0, colon), out.user)) return "the user name has a bad %-escape";
  if (!decode(cred.substr(colon + 1), out.password)) return "the password has a bad %-escape";
  out.has_password = true;
  return {};
}

// "/path[?db=N]" of a unix:// URL, after the credentials.
std::string take_unix_socket(std::string_view rest, redis_endpoint& out) {
  const std::size_t q = rest.find('?');
  std::string_view path = rest.substr(0, q);
  if (path.empty() || path[0] != '/') return "a unix:// URL needs an absolute socket path";
  out.path = std::string(path);
  if (q != std::string_view::npos) {
    std::string_view query = rest.substr(q + 1);
    if (query.substr(0, 3) != "db=" || !parse_int(query.substr(3), 0, 1000000, out.db))
      return "the only query a unix:// URL takes is ?db=N";
  }
  return {};
}

// "host[:port]" or "[v6][:port]": the host and the port's text (empty
// when there is none).
std::string split_host_port(std::string_view hostport, std::string_view& host,
                            std::string_view& port) {
  if (!hostport.empty() && hostport[0] == '[') {
    const std::size_t close = hostport.find(']');
    if (close == std::string_view::npos) return "an IPv6 address needs its closing ']'";
    host = hostport.substr(1, close - 1);
    std::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return "only :port may follow an IPv6 address";
      port = after.substr(1);
      if (port.empty()) return "the port after ':' is missing";
    }
    return {};
  }
  const std::size_t colon = hostport.find(':');
  host = hostport.substr(0, colon);
  if (colon != std::string_view::npos) {
    port = hostport.substr(colon + 1);
    if (port.empty()) return "the port after ':' is missing";
  }
  return {};
}

// "host[:port][/db]" of a redis:// URL, after the credentials.
std::string take_tcp_server(std::string_view rest, redis_endpoint& out) {
  const std::size_t slash = rest.find('/');
  std::string_view hostport = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && !parse_int(db, 0, 1000000, out.db))
      return "the database after the '/' must be a number";
  }
  std::string_view host, port;
  if (std::string e = split_host_port(hostport, host, port); !e.empty()) return e;
  if (host.empty()) return "the host is missing";
  for (char c : host)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' || c == '_'))
      return "the host has a character that no host name or address has";
  if (!port.empty() && !parse_int(port, 1, 65535, out.port))
    return "the port must be a number from 1 to 65535";
  out.host = std::string(host);
  return {};
}

}  // namespace

std::string redis_url_for_message(std::string_view url) {
  // Everything between the scheme and the last '@' (a password may hold
  // any character, '/', '?' and '@' included, when written unencoded);
  // with no '@', everything after the scheme when what follows it does not
  // read as host[:port] (a forgotten '@'). The scheme itself may be the
  // thing that is wrong: "redis:/", "redis//", none at all.
  auto start = url.find("//");
  if (start != std::string_view::npos) start += 2;
  else start = url.find(':') == std::string_view::npos ? 0 : url.find(':') + 1;
  const auto at = url.rfind('@');
  if (at != std::string_view::npos && at >= start)
    return std::string(url.substr(0, start)) + "***" + std::string(url.substr(at));
  std::string_view authority = url.substr(start, url.find_first_of("/?#", start) - start);
  if (!authority.empty() && authority[0] == '[') {
    const auto close = authority.find(']');
    authority = close == std::string_view::npos ? std::string_view(":x") : authority.substr(close + 1);
  }
  const auto colon = authority.find(':');
  if (colon == std::string_view::npos || all_digits(authority.substr(colon + 1))) return std::string(url);
  return std::string(url.substr(0, start)) + "***";
}

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
