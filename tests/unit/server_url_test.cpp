// The URL pieces the Redis and etcd backends share (net/server_url.hpp).
// Each backend's own tests hold the forms it accepts and refuses, with its
// messages (redis/redis_lock_test.cpp, etcd/etcd_lock_test.cpp,
// etcd/etcd_http_test.cpp); these hold what the pieces do on their own.
#include <gtest/gtest.h>

#include <string>

#include "net/server_url.hpp"

namespace tokenlock::detail {
namespace {

TEST(ServerUrl, MasksEverythingBeforeTheLastAtSign) {
  EXPECT_EQ(masked_url("redis://alice:s3cret@host:6379/2", false), "redis://***@host:6379/2");
  EXPECT_EQ(masked_url("etcd://u:p@ss/w?rd@h1:2379,h2", true), "etcd://***@h1:2379,h2");
  EXPECT_EQ(masked_url("redis:alice:pw@host", false), "redis:***@host") << "a scheme missing its //";
  EXPECT_EQ(masked_url("alice:pw@host", false), "alice:***@host") << "read as scheme:***";
}

TEST(ServerUrl, MasksAnAuthorityThatDoesNotReadAsHostAndPort) {
  EXPECT_EQ(masked_url("redis://host:6379/0", false), "redis://host:6379/0");
  EXPECT_EQ(masked_url("redis://[::1]:6379", false), "redis://[::1]:6379");
  EXPECT_EQ(masked_url("redis://alice:s3cret", false), "redis://***") << "a forgotten '@host'";
  EXPECT_EQ(masked_url("redis://[::1", false), "redis://***");
  EXPECT_EQ(masked_url("etcd://h1:2379,h2:2380", true), "etcd://h1:2379,h2:2380");
  EXPECT_EQ(masked_url("etcd://h1:2379,u:pw", true), "etcd://***");
  // A comma separates hosts only where a list of them is taken: in a Redis
  // URL, "12,34" may be a password.
  EXPECT_EQ(masked_url("redis://u:12,34", false), "redis://***");
  EXPECT_EQ(masked_url("etcd://h:12,34", true), "etcd://h:12,34");
}

TEST(ServerUrl, DecodesPercentEscapesAndRefusesBrokenOnes) {
  std::string out;
  EXPECT_TRUE(percent_decode("s%40cr%3At%2c", out));
  EXPECT_EQ(out, "s@cr:t,");
  EXPECT_FALSE(percent_decode("50%", out));
  EXPECT_FALSE(percent_decode("%4", out));
  EXPECT_FALSE(percent_decode("%zz", out));
  EXPECT_FALSE(percent_decode("%-1", out));
  EXPECT_FALSE(percent_decode("%+1", out));
  EXPECT_FALSE(percent_decode("%4g", out));
}

TEST(ServerUrl, SplitsUserInformationAtItsFirstColon) {
  std::string user, password;
  EXPECT_EQ(split_userinfo("alice:pa:ss", user, password), userinfo_error::none);
  EXPECT_EQ(user, "alice");
  EXPECT_EQ(password, "pa:ss");
  EXPECT_EQ(split_userinfo(":pw", user, password), userinfo_error::none);
  EXPECT_EQ(user, "");
  EXPECT_EQ(split_userinfo("alice", user, password), userinfo_error::no_password);
  EXPECT_EQ(split_userinfo("a%zz:pw", user, password), userinfo_error::bad_user_escape);
  EXPECT_EQ(split_userinfo("a:p%", user, password), userinfo_error::bad_password_escape);
}

TEST(ServerUrl, SplitsHostAndPortWithIpv6InBrackets) {
  host_port hp;
  ASSERT_EQ(split_host_port("cache-1:6380", hp), host_port_error::none);
  EXPECT_EQ(hp.host, "cache-1");
  EXPECT_EQ(hp.port, "6380");
  ASSERT_EQ(split_host_port("[fe80::1]:7000", hp), host_port_error::none);
  EXPECT_EQ(hp.host, "[fe80::1]");
  EXPECT_EQ(unbracketed(hp.host), "fe80::1");
  EXPECT_EQ(hp.port, "7000");
  ASSERT_EQ(split_host_port("host:", hp), host_port_error::none);
  EXPECT_TRUE(hp.colon);
  EXPECT_TRUE(hp.port.empty());
  ASSERT_EQ(split_host_port("host", hp), host_port_error::none);
  EXPECT_FALSE(hp.colon);
  EXPECT_EQ(split_host_port("[::1", hp), host_port_error::unclosed_bracket);
  EXPECT_EQ(split_host_port("[::1]x", hp), host_port_error::junk_after_bracket);
}

TEST(ServerUrl, ReadsNumbersWithinTheirDigitsAndBounds) {
  int n = 0;
  EXPECT_TRUE(parse_number("00080", 5, 1, 65535, n));
  EXPECT_EQ(n, 80);
  EXPECT_FALSE(parse_number("000080", 5, 1, 65535, n));
  EXPECT_FALSE(parse_number("65536", 5, 1, 65535, n));
  EXPECT_FALSE(parse_number("0", 5, 1, 65535, n));
  EXPECT_FALSE(parse_number("+1", 5, 1, 65535, n));
  EXPECT_FALSE(parse_number("", 5, 0, 65535, n));
  EXPECT_TRUE(parse_number("1000000", 10, 0, 1000000, n));
}

TEST(ServerUrl, TellsUtf8FromOtherBytes) {
  EXPECT_TRUE(valid_utf8("j\xc3\xbcrgen"));
  EXPECT_FALSE(valid_utf8("j\xfcrgen"));
  EXPECT_FALSE(valid_utf8("\xc0\xaf"));
  EXPECT_FALSE(valid_utf8("\xed\xa0\x80"));
}

}  // namespace
}  // namespace tokenlock::detail
