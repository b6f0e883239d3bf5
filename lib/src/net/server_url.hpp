// The pieces of a server URL that the Redis and etcd backends read alike
// (redis/redis_url.*, etcd/etcd_url.*):
//   scheme://[user:password@]host[:port][...]
// RFC 3986's authority with percent-encoded user information, and an IPv6
// address in brackets. Each backend puts them together with its own
// scheme, path and query rules and words what went wrong in its own
// messages, so the results here are codes, not text.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tokenlock::detail {

// Percent-decoding of a user name, password or query value (they may hold
// ':', '@' or ',' only so). False for a '%' without two hex digits.
bool percent_decode(std::string_view in, std::string& out);

// Whether `s` is well-formed UTF-8 (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF).
bool valid_utf8(std::string_view s);

// 1 to `max_digits` decimal digits, no sign, whose value is in [lo, hi].
bool parse_number(std::string_view s, std::size_t max_digits, long lo, long hi, int& out);

// "user:password" before the '@', split at its first ':' and decoded.
enum class userinfo_error { none, no_password, bad_user_escape, bad_password_escape };
userinfo_error split_userinfo(std::string_view userinfo, std::string& user, std::string& password);

// "host[:port]" or "[v6][:port]". `host` keeps the brackets of an IPv6
// address; `port` is empty when no ':' follows the host (and when one
// follows with nothing after it: then `colon` is true).
struct host_port {
  std::string_view host;
  std::string_view port;
  bool colon = false;
};
enum class host_port_error { none, unclosed_bracket, junk_after_bracket };
host_port_error split_host_port(std::string_view text, host_port& out);

// The host of split_host_port without an IPv6 address's brackets.
std::string_view unbracketed(std::string_view host);

// `url` fit for a message, whatever is wrong with it, so that a password
// never reaches a log: everything between the scheme and the last '@' is
// "***" (a password may hold any character, '/', '?' and '@' included,
// when written unencoded); with no '@', everything after the scheme is
// when the authority does not read as host[:port] (a forgotten '@'), or,
// with `host_list`, as comma-separated host[:port]s.
std::string masked_url(std::string_view url, bool host_list);

// A lock's name as a spec's fragment writes it (tokenlock/open_lock.hpp,
// Specs): '%', '#' and '@' percent-encoded, the rest as it is.
std::string spec_fragment(std::string_view name);

// A server lock's spec for messages: its URL with the password masked,
// '#', and its name as spec_fragment writes it (tokenlock::lock::spec()).
std::string server_spec_text(std::string_view url, bool host_list, std::string_view name);

}  // namespace tokenlock::detail
