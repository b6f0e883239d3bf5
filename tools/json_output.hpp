// The JSON the command prints (status --json, doctor --json, the
// --errors=json line), built and escaped by nlohmann-json.
//
// JSON strings are Unicode, but a path, a token or a host tag is bytes and
// need not be UTF-8. put_text() writes such bytes so that every parser
// reads the document and the bytes can still be had exactly:
//   - bytes that are UTF-8 are the string itself;
//   - otherwise the string shows each byte that is not part of a UTF-8
//     sequence as the four characters \xNN (as the command's messages do),
//     and a second key, the first one's name and "_hex", holds every byte
//     of the original as two lowercase hex digits.
// So {"lock_dir": "/tmp/\\xff/L", "lock_dir_hex": "2f746d702fff2f4c"}.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tokenlock::cli {

// Keys stay in the order they are set: the order the command always had.
using json = nlohmann::ordered_json;

// Whether `bytes` is UTF-8 (RFC 3629: no overlong forms, no surrogates,
// nothing above U+10FFFF).
bool is_utf8(const std::string& bytes);

// `bytes` as UTF-8 text: itself when it is UTF-8, else with \xNN for each
// byte that is not part of a UTF-8 sequence.
std::string utf8_text(const std::string& bytes);

// `bytes` as lowercase hex, two digits a byte.
std::string hex_of(const std::string& bytes);

// obj[key] = utf8_text(bytes), and obj[key + "_hex"] = hex_of(bytes) when
// `bytes` is not UTF-8.
void put_text(json& obj, const std::string& key, const std::string& bytes);

// The document on one line without spaces: {"a":1,"b":"x"}.
std::string compact(const json& doc);

// The members of an object on one line, a space after each ':' and ',':
// {"a": 1, "b": "x"} (the --errors=json line, which programs match so).
std::string spaced_line(const json& object);

}  // namespace tokenlock::cli
