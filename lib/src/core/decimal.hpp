// The one parser of unsigned decimals for the names and files tokenlock
// reads (token fields, counters): what is accepted is exactly what was
// meant, and nothing else is.
//     std::uint64_t n = 0;
//     if (!parse_decimal(text, 20, true, UINT64_MAX, n)) refuse(text);
// False for anything that is not 1 to `max_digits` digits without sign,
// without a leading zero (a lone "0" only with `allow_zero`), and at most
// `max`; `out` is unspecified then.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tokenlock::detail {

inline bool parse_decimal(std::string_view s, std::size_t max_digits, bool allow_zero,
                          std::uint64_t max, std::uint64_t& out) noexcept {
  if (s.empty() || s.size() > max_digits) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  if (s[0] == '0' && (s.size() > 1 || !allow_zero)) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && out <= max;
}

}  // namespace tokenlock::detail
