#include "json_output.hpp"

#include <cstdio>

namespace tokenlock::cli {

namespace {

// The length of the UTF-8 sequence at s[i], or 0 when the bytes there are
// not one.
std::size_t utf8_length(const std::string& s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  const std::size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
  if (c > 0xf4 || n == 0 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
  const unsigned char second = byte(i + 1);
  if ((c == 0xe0 && second < 0xa0) || (c == 0xed && second > 0x9f) ||
      (c == 0xf0 && second < 0x90) || (c == 0xf4 && second > 0x8f))
    return 0;
  return n;
}

// Strings reaching the serializer are UTF-8 already (utf8_text); should
// one not be, it is shown with U+FFFD rather than aborting the output.
std::string dumped(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

bool is_utf8(const std::string& bytes) {
  for (std::size_t i = 0; i < bytes.size();) {
    const std::size_t n = utf8_length(bytes, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string utf8_text(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    if (const std::size_t n = utf8_length(bytes, i)) {
      out.append(bytes, i, n);
      i += n;
      continue;
    }
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(bytes[i]));
    out += buf;
    ++i;
  }
  return out;
}

std::string hex_of(const std::string& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 0xf];
  }
  return out;
}

void put_text(json& obj, const std::string& key, const std::string& bytes) {
  if (is_utf8(bytes)) {
    obj[key] = bytes;
    return;
  }
  obj[key] = utf8_text(bytes);
  obj[key + "_hex"] = hex_of(bytes);
}

std::string compact(const json& doc) { return dumped(doc); }

std::string spaced_line(const json& object) {
  std::string out = "{";
  for (const auto& [key, value] : object.items()) {
    if (out.size() > 1) out += ", ";
    out += dumped(json(key)) + ": " + dumped(value);
  }
  return out + "}";
}

}  // namespace tokenlock::cli
