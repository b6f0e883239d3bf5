// libFuzzer target for the token name parser, which decides what in a lock
// directory may ever be renamed. A held token that parses must be exactly
// the name make_token builds from its fields (one canonical spelling), so
// no foreign name can pass for a token; "lockfile" alone is free.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "lockdir/token_name.hpp"

using namespace tokenlock::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string name(reinterpret_cast<const char*>(data), size);
  held_token t;
  const name_kind kind = classify_name(name, &t);
  auto fail = [&](const char* what) {
    std::fprintf(stderr, "token_fuzz: %s for \"%s\"\n", what, name.c_str());
    std::abort();
  };
  if (kind == name_kind::free && name != "lockfile") fail("free but not \"lockfile\"");
  if (kind == name_kind::other && name.rfind("lockfile.", 0) == 0) fail("\"lockfile.*\" classified other");
  if (kind == name_kind::held) {
    if (t.pid <= 0) fail("held token with a pid that kill() would treat as a group");
    if (make_token(t.expiry_us, t.host_tag, t.pid, t.start_time, t.nonce) != name)
      fail("held token is not canonical");
    if (with_expiry(owner_part(name), t.expiry_us) != name) fail("owner part does not round-trip");
  }
  return 0;
}
