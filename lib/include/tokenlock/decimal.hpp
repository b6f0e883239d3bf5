// tokenlock/decimal.hpp — the strict parser of unsigned decimals that the
// library reads its token fields and counters with.
//
// Purpose
//   A program that reads the numbers tokenlock writes (a counter file, a
//   field of a token name), or takes numbers that must mean exactly what
//   was typed, parses them as the library does: what is accepted is
//   exactly what was meant, and nothing else is.
//
// Calling sequence
//     std::uint64_t n = 0;
//     if (!tokenlock::parse_decimal(text, 20, true, UINT64_MAX, n)) refuse(text);
//
// Errors
//   None: false for anything that is not 1 to `max_digits` digits without
//   sign, without a leading zero (a lone "0" only with `allow_zero`), and
//   at most `max`. `out` is unspecified then.
//
// Thread safety
//   Safe from any thread.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tokenlock {

inline bool parse_decimal(std::string_view s, std::size_t max_digits, bool allow_zero,
                          std::uint64_t max, std::uint64_t& out) noexcept {
  if (s.empty() || s.size() > max_digits) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  if (s[0] == '0' && (s.size() > 1 || !allow_zero)) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && out <= max;
}

}  // namespace tokenlock
