#include "lockdir/token_name.hpp"

#include "core/decimal.hpp"

#include <charconv>
#include <climits>

namespace tokenlock::detail {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_lower_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f'); }
bool is_host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_' || c == '-';
}

bool parse_host_tag(std::string_view s) {
  // "<host>-<hash8>": the host part may itself contain '-'.
  if (s.size() < 10 || s.size() > 32 + 9) return false;
  std::string_view hash = s.substr(s.size() - 8);
  if (s[s.size() - 9] != '-') return false;
  for (char c : hash)
    if (!is_lower_hex(c)) return false;
  for (char c : s.substr(0, s.size() - 9))
    if (!is_host_char(c)) return false;
  return true;
}

bool next_field(std::string_view& rest, std::string_view& field) {
  if (rest.empty()) return false;
  size_t dot = rest.find('.');
  field = rest.substr(0, dot);
  rest = dot == std::string_view::npos ? std::string_view() : rest.substr(dot + 1);
  return true;
}

void append_decimal(std::string& s, std::uint64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  s.append(buf, r.ptr);
}

}  // namespace

name_kind classify_name(std::string_view name, held_token* out) noexcept {
  if (name == free_token) return name_kind::free;
  if (name.size() > free_token.size() && name.substr(0, free_token.size()) == free_token &&
      is_digit(name[free_token.size()])) {
    // Anything else after "lockfile" and a digit is not ours to judge: a
    // name that merely looks like a legacy token is left alone as "other".
    std::uint64_t seconds = 0;
    if (!parse_decimal(name.substr(free_token.size()), 12, false, UINT64_MAX, seconds))
      return name_kind::other;
    if (out) {
      *out = held_token{};
      out->expiry_us = static_cast<std::int64_t>(seconds) * 1'000'000;
    }
    return name_kind::legacy;
  }
  if (name.substr(0, held_prefix.size()) != held_prefix) return name_kind::other;
  std::string_view rest = name.substr(held_prefix.size());
  // Exactly six fields: expiry, host tag, pid, start, nonce; a trailing or
  // doubled dot makes an empty field, which every field rejects.
  std::string_view f_expiry, f_host, f_pid, f_start, f_nonce, extra;
  bool dot_at_end = !name.empty() && name.back() == '.';
  if (dot_at_end || !next_field(rest, f_expiry) || !next_field(rest, f_host) ||
      !next_field(rest, f_pid) || !next_field(rest, f_start) || !next_field(rest, f_nonce) ||
      next_field(rest, extra))
    return name_kind::malformed;
  held_token t;
  std::uint64_t v = 0;
  if (!parse_decimal(f_expiry, 19, true, INT64_MAX, v)) return name_kind::malformed;
  t.expiry_us = static_cast<std::int64_t>(v);
  if (!parse_host_tag(f_host)) return name_kind::malformed;
  t.host_tag = f_host;
  if (!parse_decimal(f_pid, 10, false, INT_MAX, v)) return name_kind::malformed;
  t.pid = static_cast<int>(v);
  if (!parse_decimal(f_start, 20, true, UINT64_MAX, t.start_time)) return name_kind::malformed;
  if (f_nonce.size() != 16) return name_kind::malformed;
  for (char c : f_nonce)
    if (!is_lower_hex(c)) return name_kind::malformed;
  std::from_chars(f_nonce.data(), f_nonce.data() + 16, t.nonce, 16);
  if (out) *out = t;
  return name_kind::held;
}

std::string make_token(std::int64_t expiry_us, std::string_view host_tag, int pid,
                       std::uint64_t start_time, std::uint64_t nonce) {
  std::string s;
  s.reserve(held_prefix.size() + host_tag.size() + 20 + 1 + 10 + 1 + 20 + 1 + 16 + 1);
  s.append(held_prefix);
  append_decimal(s, static_cast<std::uint64_t>(expiry_us < 0 ? 0 : expiry_us));
  s.push_back('.');
  s.append(host_tag);
  s.push_back('.');
  append_decimal(s, static_cast<std::uint64_t>(pid));
  s.push_back('.');
  append_decimal(s, start_time);
  s.push_back('.');
  static const char hex[] = "0123456789abcdef";
  for (int shift = 60; shift >= 0; shift -= 4) s.push_back(hex[(nonce >> shift) & 0xf]);
  return s;
}

std::string_view owner_part(std::string_view name) noexcept {
  if (name.substr(0, held_prefix.size()) != held_prefix) return {};
  name.remove_prefix(held_prefix.size());
  auto dot = name.find('.');
  return dot == std::string_view::npos ? std::string_view() : name.substr(dot + 1);
}

std::string with_expiry(std::string_view owner, std::int64_t expiry_us) {
  std::string s;
  s.reserve(held_prefix.size() + 21 + owner.size());
  s.append(held_prefix);
  append_decimal(s, static_cast<std::uint64_t>(expiry_us < 0 ? 0 : expiry_us));
  s.push_back('.');
  s.append(owner);
  return s;
}

std::string owner_mark_name(std::string_view held_token_name) {
  std::string m(mark_prefix);
  m.append(held_token_name.substr(held_prefix.size()));
  return m;
}

std::string token_of_mark(std::string_view name) {
  if (name.substr(0, mark_prefix.size()) != mark_prefix) return {};
  std::string t(held_prefix);
  t.append(name.substr(mark_prefix.size()));
  if (classify_name(t) != name_kind::held) return {};
  return t;
}

}  // namespace tokenlock::detail
