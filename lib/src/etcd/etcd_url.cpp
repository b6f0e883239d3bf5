#include "etcd/etcd_url.hpp"

#include <cctype>

#include "net/server_url.hpp"

namespace tokenlock::detail {

namespace {

failure bad(const std::string& url, const std::string& what) {
  return make_failure(errc::bad_argument,
                      "tokenlock: etcd URL \"" + masked_url(url, true) + "\": " + what +
                          "; the form is etcd://[user:password@]host[:port][,host[:port]...]"
                          "[?cacert=PATH], or etcds://... for HTTPS (percent-encode '%', '@', "
                          "':', '/', '?', '#' and ',' in the user and password)");
}

// One "host[:port]" of the member list, as "scheme://host:port".
failure parse_member(const std::string& url, const std::string& m, const char* scheme, std::string& out) {
  if (m.empty()) return bad(url, "an empty member in the host list (two commas, or a trailing one)");
  host_port hp;
  switch (split_host_port(m, hp)) {
    case host_port_error::none: break;
    case host_port_error::unclosed_bracket: return bad(url, "an IPv6 host without its closing ']'");
    case host_port_error::junk_after_bracket:
      return bad(url, "something other than :port after an IPv6 host");
  }
  if (unbracketed(hp.host).empty()) return bad(url, "a member without a host");
  for (char c : hp.host)
    if (c == '/' || c == '@' || c == '?' || std::isspace(static_cast<unsigned char>(c)))
      return bad(url, "a host holds '" + std::string(1, c) + "'");
  const std::string_view port = hp.colon ? hp.port : std::string_view("2379");
  int number = 0;
  if (!parse_number(port, 5, 1, 65535, number))
    return bad(url, "a member's port is not a number from 1 to 65535");
  out = std::string(scheme) + "://" + std::string(hp.host) + ":" + std::string(port);
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
    switch (split_userinfo(cred, out.user, out.password)) {
      case userinfo_error::none: break;
      case userinfo_error::no_password: return bad(url, "credentials must be user:password");
      case userinfo_error::bad_user_escape:
      case userinfo_error::bad_password_escape:
        return bad(url, "a bad percent-escape in the credentials");
    }
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
