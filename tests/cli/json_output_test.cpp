// The command's JSON (tools/json_output.hpp): strings that are not UTF-8
// still make valid JSON, and their bytes can be had back exactly.
#include <gtest/gtest.h>

#include <string>

#include "cli.hpp"
#include "json_output.hpp"

namespace tokenlock::cli {
namespace {

// Parsing with nlohmann's strict parser: what any JSON parser takes.
json parsed(const std::string& text) { return json::parse(text); }

std::string from_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

TEST(JsonOutputTest, TellsUtf8FromOtherBytes) {
  EXPECT_TRUE(is_utf8(""));
  EXPECT_TRUE(is_utf8("/srv/app/db.lock"));
  EXPECT_TRUE(is_utf8("/srv/caf\xc3\xa9/\xf0\x9f\x94\x92"));
  EXPECT_FALSE(is_utf8("/tmp/\xff/L"));
  EXPECT_FALSE(is_utf8("\xc0\xaf")) << "an overlong '/'";
  EXPECT_FALSE(is_utf8("\xed\xa0\x80")) << "a surrogate";
  EXPECT_FALSE(is_utf8("\xf4\x90\x80\x80")) << "above U+10FFFF";
  EXPECT_FALSE(is_utf8("caf\xc3")) << "cut short";
}

TEST(JsonOutputTest, ShowsEachStrayByteAsItsEscapeAndKeepsTheRest) {
  EXPECT_EQ(utf8_text("/tmp/\xff/caf\xc3\xa9"), "/tmp/\\xff/caf\xc3\xa9");
  EXPECT_EQ(utf8_text("\xc3"), "\\xc3");
  EXPECT_EQ(hex_of(std::string("a\xff\0/", 4)), "61ff002f");
}

TEST(JsonOutputTest, AUtf8StringIsItselfWithNoHexKey) {
  json j;
  put_text(j, "lock_dir", "/srv/caf\xc3\xa9/L \"q\" \\ \n");
  EXPECT_EQ(compact(j), "{\"lock_dir\":\"/srv/caf\xc3\xa9/L \\\"q\\\" \\\\ \\n\"}");
  EXPECT_EQ(parsed(compact(j))["lock_dir"], "/srv/caf\xc3\xa9/L \"q\" \\ \n");
  EXPECT_FALSE(j.contains("lock_dir_hex"));
}

TEST(JsonOutputTest, OtherBytesParseAndComeBackExactlyFromTheHexKey) {
  const std::string path("/tmp/\xff\xfe/\x01x\\xff/L\0", 17);
  json j;
  put_text(j, "lock_dir", path);
  j["state"] = "free";
  const json back = parsed(compact(j));
  EXPECT_EQ(back["lock_dir"], "/tmp/\\xff\\xfe/\x01x\\xff/L" + std::string(1, '\0'));
  EXPECT_EQ(from_hex(back["lock_dir_hex"].get<std::string>()), path);
  std::string keys;
  for (const auto& item : back.items()) keys += item.key() + " ";
  EXPECT_EQ(keys, "lock_dir lock_dir_hex state ") << "the hex key follows its string";
}

TEST(JsonOutputTest, TheErrorLineKeepsItsSpacedForm) {
  EXPECT_EQ(error_json("timed_out", 0, "tokenlock: acquire /x: timed out"),
            "{\"error\": \"timed_out\", \"errno\": 0, \"message\": \"tokenlock: acquire /x: "
            "timed out\"}");
  const std::string line = error_json("system", 2, "tokenlock: open /tmp/\xff: \"gone\"");
  const json back = parsed(line);
  EXPECT_EQ(back["errno"], 2);
  EXPECT_EQ(back["message"], "tokenlock: open /tmp/\\xff: \"gone\"");
  EXPECT_EQ(from_hex(back["message_hex"].get<std::string>()), "tokenlock: open /tmp/\xff: \"gone\"");
}

TEST(JsonOutputTest, ASpacedLineOfNothingIsAnEmptyObject) {
  EXPECT_EQ(spaced_line(json::object()), "{}");
}

TEST(JsonOutputTest, TheClockVerdictsHaveTheirDocumentedNames) {
  EXPECT_STREQ(clock_verdict_name(clock_verdict::within), "within");
  EXPECT_STREQ(clock_verdict_name(clock_verdict::beyond), "beyond");
  EXPECT_STREQ(clock_verdict_name(clock_verdict::unclear), "unclear");
}

TEST(ParseUnsignedTest, TakesDigitsUpTo2To64Minus1AndNothingElse) {
  EXPECT_EQ(parse_unsigned("0"), 0u);
  EXPECT_EQ(parse_unsigned("007"), 7u) << "a person may pad";
  EXPECT_EQ(parse_unsigned("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(parse_unsigned("000018446744073709551615"), UINT64_MAX);
  EXPECT_EQ(parse_unsigned("18446744073709551616"), std::nullopt);
  for (const char* bad : {"", "+1", "-1", " 1", "1 ", "1x", "0x10", "1e3"})
    EXPECT_EQ(parse_unsigned(bad), std::nullopt) << bad;
}

}  // namespace
}  // namespace tokenlock::cli
