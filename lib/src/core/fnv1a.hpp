// FNV-1a, 64 bits: a cheap, stable hash for names (the host tag) and for
// recognising contents again (the updater's version mark). Not for secrets.
#pragma once

#include <cstdint>
#include <string_view>

namespace tokenlock::detail {

inline std::uint64_t fnv1a(std::string_view s, std::uint64_t h = 0xcbf29ce484222325ULL) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace tokenlock::detail
