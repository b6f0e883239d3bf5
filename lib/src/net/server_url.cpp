#include "net/server_url.hpp"

#include <algorithm>
#include <charconv>

namespace tokenlock::detail {

namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
}

// Whether `authority` reads as host[:port], or with `host_list` as
// comma-separated host[:port]s: otherwise a password may be in it.
bool plain_authority(std::string_view authority, bool host_list) {
  for (;;) {
    const auto comma = host_list ? authority.find(',') : std::string_view::npos;
    std::string_view member = authority.substr(0, comma);
    if (!member.empty() && member[0] == '[') {
      // An unclosed '[': a single host is taken as suspect; in a list the
      // member is still looked at whole (a "user:password" there has its
      // ':' followed by more than digits).
      const auto close = member.find(']');
      if (close != std::string_view::npos)
        member.remove_prefix(close + 1);
      else if (!host_list)
        return false;
    }
    const auto colon = member.find(':');
    if (colon != std::string_view::npos && !all_digits(member.substr(colon + 1))) return false;
    if (comma == std::string_view::npos) return true;
    authority.remove_prefix(comma + 1);
  }
}

}  // namespace

bool percent_decode(std::string_view in, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    if (i + 2 >= in.size()) return false;
    // Two hex digits exactly: from_chars takes no sign or "0x" either.
    unsigned byte = 0;
    const char* digits = in.data() + i + 1;
    const auto [end, ec] = std::from_chars(digits, digits + 2, byte, 16);
    if (ec != std::errc() || end != digits + 2) return false;
    out += static_cast<char>(byte);
    i += 2;
  }
  return true;
}

bool valid_utf8(std::string_view s) {
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

bool parse_number(std::string_view s, std::size_t max_digits, long lo, long hi, int& out) {
  if (!all_digits(s) || s.size() > max_digits) return false;
  long v = 0;
  for (char c : s) v = v * 10 + (c - '0');
  if (v < lo || v > hi) return false;
  out = static_cast<int>(v);
  return true;
}

userinfo_error split_userinfo(std::string_view userinfo, std::string& user, std::string& password) {
  const std::size_t colon = userinfo.find(':');
  if (colon == std::string_view::npos) return userinfo_error::no_password;
  if (!percent_decode(userinfo.substr(0, colon), user)) return userinfo_error::bad_user_escape;
  if (!percent_decode(userinfo.substr(colon + 1), password))
    return userinfo_error::bad_password_escape;
  return userinfo_error::none;
}

host_port_error split_host_port(std::string_view text, host_port& out) {
  out = host_port{};
  std::size_t host_end;
  if (!text.empty() && text[0] == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos) return host_port_error::unclosed_bracket;
    host_end = close + 1;
    if (host_end < text.size() && text[host_end] != ':') return host_port_error::junk_after_bracket;
  } else {
    host_end = std::min(text.find(':'), text.size());
  }
  out.host = text.substr(0, host_end);
  if (host_end < text.size()) {
    out.colon = true;
    out.port = text.substr(host_end + 1);
  }
  return host_port_error::none;
}

std::string_view unbracketed(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') return host.substr(1, host.size() - 2);
  return host;
}

std::string masked_url(std::string_view url, bool host_list) {
  auto start = url.find("//");
  if (start != std::string_view::npos)
    start += 2;
  else
    start = url.find(':') == std::string_view::npos ? 0 : url.find(':') + 1;
  const auto at = url.rfind('@');
  if (at != std::string_view::npos && at >= start)
    return std::string(url.substr(0, start)) + "***" + std::string(url.substr(at));
  const std::string_view authority = url.substr(start, url.find_first_of("/?#", start) - start);
  if (authority.empty() || plain_authority(authority, host_list)) return std::string(url);
  return std::string(url.substr(0, start)) + "***";
}

std::string spec_fragment(std::string_view name) {
  std::string text;
  for (char c : name) {
    if (c == '%')
      text += "%25";
    else if (c == '#')
      text += "%23";
    else if (c == '@')
      text += "%40";
    else
      text += c;
  }
  return text;
}

std::string server_spec_text(std::string_view url, bool host_list, std::string_view name) {
  return masked_url(url, host_list) + "#" + spec_fragment(name);
}

}  // namespace tokenlock::detail
