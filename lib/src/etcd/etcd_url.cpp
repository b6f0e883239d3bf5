#include "etcd/etcd_url.hpp"

#include <cctype>

namespace tokenlock::detail {

namespace {

// Whether `port` is a port number's digits.
bool digits(const std::string& port) {
  return !port.empty() && port.find_first_not_of("0123456789") == std::string::npos;
}

// Whether every comma-separated "host[:port]" of `authority` reads as
// one: otherwise a password may be in it (a forgotten '@').
bool plain_members(const std::string& authority) {
  std::size_t start = 0;
  for (;;) {
    const auto comma = authority.find(',', start);
    const std::string m =
        authority.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto close = m[0] == '[' ? m.find(']') : std::string::npos;
    const auto colon = m.find(':', close == std::string::npos ? 0 : close);
    if (colon != std::string::npos && !digits(m.substr(colon + 1))) return false;
    if (comma == std::string::npos) return true;
    start = comma + 1;
  }
}

// `url` fit for a message, whatever is wrong with it: everything between
// the scheme and the last '@' is masked (a password may hold any
// character, '/', '?' and '@' included, when written unencoded), and when
// there is no '@' but the hosts do not read as host:port (a forgotten
// '@'), everything after the scheme is.
std::string masked(const std::string& url) {
  auto start = url.find("//");
  if (start != std::string::npos) start += 2;
  else start = url.find(':') == std::string::npos ? 0 : url.find(':') + 1;
  const auto at = url.rfind('@');
  if (at != std::string::npos && at >= start) return url.substr(0, start) + "***" + url.substr(at);
  const std::string authority = url.substr(start, url.find_first_of("/?#", start) - start);
  if (authority.empty() || plain_members(authority)) return url;
  return url.substr(0, start) + "***";
}

failure bad(const std::string& url, const std::string& what) {
  return make_failure(errc::bad_argument,
                      "tokenlock: etcd URL \"" + masked(url) + "\": " + what +
                          "; the form is etcd://[user:password@]host[:port][,host[:port]...]"
                          "[?cacert=PATH], or etcds://... for HTTPS (percent-encode '%', '@', "
                          "':', '/', '?', '#' and ',' in the user and password)");
}

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool percent_decode(const std::string& in, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const int h = hex(in[i + 1]), l = hex(in[i + 2]);
    if (h < 0 || l < 0) return false;
    out += static_cast<char>(h * 16 + l);
    i += 2;
  }
  return true;
}

// Whether `s` is well-formed UTF-8 (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF). The credentials travel in JSON,
// which takes UTF-8 only.
bool valid_utf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t len;
    unsigned min, cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2, min = 0x80, cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, min = 0x800, cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, min = 0x10000, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (std::size_t k = 1; k < len; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

// One "host[:port]" of the member list, as "scheme://host:port".
failure parse_member(const std::string& url, const std::string& m, const char* scheme, std::string& out) {
  if (m.empty()) return bad(url, "an empty member in the host list (two commas, or a trailing one)");
  std::string host, port = "2379";
  if (m[0] == '[') {
    const auto close = m.find(']');
    if (close == std::string::npos) return bad(url, "an IPv6 host without its closing ']'");
    host = m.substr(0, close + 1);
    if (close + 1 < m.size()) {
      if (m[close + 1] != ':') return bad(url, "something other than :port after an IPv6 host");
      port = m.substr(close + 2);
    }
  } else {
    const auto colon = m.find(':');
    host = m.substr(0, colon);
    if (colon != std::string::npos) port = m.substr(colon + 1);
  }
  if (host.empty() || host == "[]") return bad(url, "a member without a host");
  for (char c : host)
    if (c == '/' || c == '@' || c == '?' || std::isspace(static_cast<unsigned char>(c)))
      return bad(url, "a host holds '" + std::string(1, c) + "'");
  const char* not_port = "a member's port is not a number from 1 to 65535";
  if (port.empty() || port.size() > 5) return bad(url, not_port);
  for (char c : port)
    if (!std::isdigit(static_cast<unsigned char>(c))) return bad(url, not_port);
  const long p = std::stol(port);
  if (p < 1 || p > 65535) return bad(url, not_port);
  out = std::string(scheme) + "://" + host + ":" + port;
  return {};
}

failure parse_query(const std::string& url, const std::string& q, etcd_url& out) {
  std::size_t start = 0;
  while (start < q.size()) {
    const auto amp = q.find('&', start);
    const std::string kv = q.substr(start, amp == std::string::npos ? std::string::npos : amp - start);
    const auto eq = kv.find('=');
    const std::string key = kv.substr(0, eq);
    // The parameter is not quoted: it may be the end of a password that
    // holds an unencoded '?'.
    if (key != "cacert" || eq == std::string::npos)
      return bad(url, "an unknown query parameter (only cacert=PATH)");
    if (!percent_decode(kv.substr(eq + 1), out.cacert) || out.cacert.empty())
      return bad(url, "cacert must name a file (percent-encoded where needed)");
    if (amp == std::string::npos) break;
    start = amp + 1;
  }
  return {};
}

}  // namespace

std::string etcd_url::display() const {
  std::string s = tls ? "etcds://" : "etcd://";
  for (std::size_t i = 0; i < members.size(); ++i) {
    const auto at = members[i].find("://");
    s += (i ? "," : "") + members[i].substr(at + 3);
  }
  return s;
}

failure parse_etcd_url(const std::string& url, etcd_url& out) {
  out = etcd_url{};
  std::string rest;
  if (url.rfind("etcd://", 0) == 0) {
    rest = url.substr(7);
  } else if (url.rfind("etcds://", 0) == 0) {
    rest = url.substr(8);
    out.tls = true;
  } else {
    return bad(url, "it does not start with etcd:// or etcds://");
  }
  const auto q = rest.find('?');
  if (q != std::string::npos) {
    if (failure f = parse_query(url, rest.substr(q + 1), out)) return f;
    rest.resize(q);
  }
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  const auto at = rest.rfind('@');
  if (at != std::string::npos) {
    const std::string cred = rest.substr(0, at);
    const auto colon = cred.find(':');
    if (colon == std::string::npos) return bad(url, "credentials must be user:password");
    if (!percent_decode(cred.substr(0, colon), out.user) ||
        !percent_decode(cred.substr(colon + 1), out.password))
      return bad(url, "a bad percent-escape in the credentials");
    if (out.user.empty()) return bad(url, "the user name is empty");
    if (!valid_utf8(out.user) || !valid_utf8(out.password))
      return bad(url, "the user name or password is not valid UTF-8 once percent-decoded (etcd takes "
                 "UTF-8 only)");
    rest = rest.substr(at + 1);
  }
  if (rest.empty()) return bad(url, "no host");
  std::size_t start = 0;
  for (;;) {
    const auto comma = rest.find(',', start);
    std::string m;
    if (failure f = parse_member(url, rest.substr(start, comma == std::string::npos ? std::string::npos
                                                                                 : comma - start),
                                 out.tls ? "https" : "http", m))
      return f;
    out.members.push_back(m);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return {};
}

}  // namespace tokenlock::detail
