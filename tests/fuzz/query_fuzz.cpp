// libFuzzer target for cgi::parse_query, the parser that stands between a
// URL and a file name. Beyond not crashing (under ASan and UBSan), it
// checks what the parser promises: accepted results respect the limits,
// and re-encoding an accepted result parses back to the same map.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "cgi.hpp"

namespace {

std::string encode(const std::string& s) {
  static const char hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "query_fuzz: property violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string query(reinterpret_cast<const char*>(data), size);
  cgi::query_limits limits;
  limits.max_length = 1 << 20;  // let long inputs reach the other checks
  std::map<std::string, std::string> out;
  std::string reason;
  if (!cgi::parse_query(query, out, reason, limits)) {
    check(!reason.empty(), "a refusal has a reason");
    return 0;
  }
  check(out.size() <= limits.max_parameters, "parameter count");
  std::string again;
  for (const auto& [name, value] : out) {
    check(!name.empty(), "names are not empty");
    check(name.size() <= limits.max_name && value.size() <= limits.max_value, "lengths");
    check(name.find('\0') == std::string::npos && value.find('\0') == std::string::npos, "no NUL");
    if (!again.empty()) again += '&';
    again += encode(name) + "=" + encode(value);
  }
  std::map<std::string, std::string> round_trip;
  check(cgi::parse_query(again, round_trip, reason, limits), "re-encoded result parses");
  check(round_trip == out, "re-encoded result parses to the same map");
  return 0;
}
