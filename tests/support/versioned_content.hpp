// Distinct, self-checking file versions for crash tests: version n is a
// header line, n-dependent pseudo-random bytes, and a trailer line, so a
// reader can tell from the contents alone whether a file is exactly one
// complete version, and which.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tokenlock::testing {

inline std::string versioned_content(std::uint64_t n, std::size_t size) {
  std::string header = "version " + std::to_string(n) + "\n";
  std::string trailer = "end " + std::to_string(n) + "\n";
  std::string s = header;
  std::uint64_t x = n * 0x9e3779b97f4a7c15ULL + 1;
  while (s.size() + trailer.size() < size) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s.push_back(static_cast<char>('a' + x % 26));
  }
  return s + trailer;
}

// The version `contents` is exactly (complete and intact), or nothing.
inline std::optional<std::uint64_t> complete_version(const std::string& contents,
                                                     std::size_t size) {
  if (contents.rfind("version ", 0) != 0) return std::nullopt;
  auto nl = contents.find('\n');
  if (nl == std::string::npos) return std::nullopt;
  std::uint64_t n = 0;
  try {
    n = std::stoull(contents.substr(8, nl - 8));
  } catch (...) {
    return std::nullopt;
  }
  if (contents != versioned_content(n, size)) return std::nullopt;
  return n;
}

}  // namespace tokenlock::testing
