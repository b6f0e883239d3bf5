// libFuzzer target for the counter file parser: whatever it accepts is
// exactly the canonical text of the value ("42\n"), and it never accepts a
// file it would then rewrite differently (a counter is never reset).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "files/update_impl.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::optional<std::uint64_t> value;
  tokenlock::detail::failure f = tokenlock::detail::parse_counter("fuzz", text, value);
  if (f) {
    if (f.code != tokenlock::errc::corrupt_data || value) std::abort();
    return 0;
  }
  if (!value || std::to_string(*value) + "\n" != text) {
    std::fprintf(stderr, "counter_fuzz: accepted a non-canonical counter\n");
    std::abort();
  }
  return 0;
}
