#include <gtest/gtest.h>

#include "lockdir/token_name.hpp"

using namespace tokenlock::detail;

namespace {

TEST(TokenName, FormatsAndParsesBack) {
  std::string name = make_token(1763712000123456, "web-01_a-0123abcd", 4242, 98765,
                                0xfedcba9876543210ULL);
  EXPECT_EQ(name, "lockfile.1763712000123456.web-01_a-0123abcd.4242.98765.fedcba9876543210");
  held_token t;
  ASSERT_EQ(classify_name(name, &t), name_kind::held);
  EXPECT_EQ(t.expiry_us, 1763712000123456);
  EXPECT_EQ(t.host_tag, "web-01_a-0123abcd");
  EXPECT_EQ(t.pid, 4242);
  EXPECT_EQ(t.start_time, 98765u);
  EXPECT_EQ(t.nonce, 0xfedcba9876543210ULL);
  EXPECT_LT(name.size(), 255u);
  EXPECT_EQ(owner_part(name), "web-01_a-0123abcd.4242.98765.fedcba9876543210");
  EXPECT_EQ(with_expiry(owner_part(name), 7), "lockfile.7.web-01_a-0123abcd.4242.98765.fedcba9876543210");
}

TEST(TokenName, TellsFreeHeldAndForeignNamesApart) {
  EXPECT_EQ(classify_name("lockfile"), name_kind::free);
  EXPECT_EQ(classify_name("README"), name_kind::other);
  EXPECT_EQ(classify_name(".nfs000123"), name_kind::other);
  EXPECT_EQ(classify_name("lockfile.1.h-0000abcd.1.0.0000000000000000"), name_kind::held);
}

TEST(TokenName, ReadsLegacyTokensAsTheTimeTheyWereTaken) {
  tokenlock::detail::held_token t;
  ASSERT_EQ(classify_name("lockfile1795425884", &t), name_kind::legacy);
  EXPECT_EQ(t.expiry_us, 1795425884LL * 1000000);
  EXPECT_EQ(t.pid, 0);
  EXPECT_TRUE(t.host_tag.empty());
  EXPECT_EQ(classify_name("lockfile2"), name_kind::legacy);
  // Not what those scripts write: left alone, never judged.
  EXPECT_EQ(classify_name("lockfile01795425884"), name_kind::other) << "leading zero";
  EXPECT_EQ(classify_name("lockfile1795425884000"), name_kind::other) << "13 digits";
  EXPECT_EQ(classify_name("lockfile1795425884.bak"), name_kind::other);
  EXPECT_EQ(classify_name("lockfile1795425884x"), name_kind::other);
  EXPECT_EQ(classify_name("lockfilex1"), name_kind::other);
}

TEST(TokenName, RejectsEveryBrokenField) {
  const char* bad[] = {
      "lockfile.",
      "lockfile..h-0000abcd.1.0.0000000000000000",              // empty expiry
      "lockfile.01.h-0000abcd.1.0.0000000000000000",            // leading zero
      "lockfile.-1.h-0000abcd.1.0.0000000000000000",            // sign
      "lockfile.99999999999999999999.h-0000abcd.1.0.0000000000000000",  // > INT64_MAX
      "lockfile.1.h-0000ABCD.1.0.0000000000000000",             // upper-case hash
      "lockfile.1.h0000abcd.1.0.0000000000000000",              // no dash before hash
      "lockfile.1.-0000abcd.1.0.0000000000000000",              // empty host
      "lockfile.1.h/x-0000abcd.1.0.0000000000000000",           // bad host char
      "lockfile.1.h-0000abcd.0.0.0000000000000000",             // pid 0
      "lockfile.1.h-0000abcd.2147483648.0.0000000000000000",    // pid > INT_MAX
      "lockfile.1.h-0000abcd.1.00.0000000000000000",            // leading zero start
      "lockfile.1.h-0000abcd.1.0.000000000000000",              // short nonce
      "lockfile.1.h-0000abcd.1.0.000000000000000g",             // non-hex nonce
      "lockfile.1.h-0000abcd.1.0.0000000000000000.",            // trailing dot
      "lockfile.1.h-0000abcd.1.0.0000000000000000.x",           // extra field
      "lockfile.1.h-0000abcd.1.0",                              // missing fields
  };
  for (const char* n : bad) EXPECT_EQ(classify_name(n), name_kind::malformed) << n;
  std::string long_host = "lockfile.1." + std::string(33, 'h') + "-0000abcd.1.0.0000000000000000";
  EXPECT_EQ(classify_name(long_host), name_kind::malformed);
}

}  // namespace
