#include "core/escaped.hpp"

#include <algorithm>
#include <cstdio>

namespace tokenlock::detail {

std::string escaped(std::string_view s, std::size_t limit) {
  std::string out;
  const std::size_t n = std::min(s.size(), limit);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7f || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string shown_bytes(std::string_view s, std::size_t limit) {
  std::string out = escaped(s, limit);
  if (s.size() > limit) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

}  // namespace tokenlock::detail
