// The one parser of unsigned decimals for the names and files tokenlock
// reads and the numbers the command takes (token fields, counters, --by):
// strict, so that what is accepted is exactly what was meant.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tokenlock::detail {

// 1 to `max_digits` digits, no sign, no leading zero (a lone "0" only with
// `allow_zero`), at most `max`.
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
