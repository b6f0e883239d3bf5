// The Lua scripts embedded at build time (lib/src/redis/scripts/*.lua,
// cmake/tokenlock_redis_scripts.cmake): the digest the client sends with
// EVALSHA is the one a real redis-server computes for the script's text,
// so a server that has the script never gets it again.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <system_error>

#include "redis/redis_scripts.hpp"
#include "redis_raw.hpp"
#include "redis_server.hpp"
#include "tokenlock/redis_lock.hpp"

using tokenlock::redis_lock;
using tokenlock::detail::redis_script;
using tokenlock::testing::raw;
using tokenlock::testing::redis_server;

namespace {

struct named_script {
  const char* name;
  const redis_script& script;
};

const named_script every_script[] = {
    {"acquire", tokenlock::detail::acquire_script},
    {"acquire_shared", tokenlock::detail::acquire_shared_script},
    {"settle", tokenlock::detail::settle_script},
    {"settle_shared", tokenlock::detail::settle_shared_script},
    {"holder", tokenlock::detail::holder_script},
    {"holders", tokenlock::detail::holders_script},
    {"break", tokenlock::detail::break_script},
};

class RedisScriptsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = redis_server::unavailable();
    if (!why.empty()) GTEST_SKIP() << why;
    server = std::make_unique<redis_server>();
  }
  std::string exists(const redis_script& s) const {
    return raw(*server, {"SCRIPT", "EXISTS", std::string(s.sha1)});
  }
  std::unique_ptr<redis_server> server;
};

TEST_F(RedisScriptsTest, EachDigestIsTheOneScriptLoadReturns) {
  for (const auto& s : every_script) {
    SCOPED_TRACE(s.name);
    EXPECT_EQ(s.script.sha1.size(), 40u);
    EXPECT_EQ(s.script.sha1.find_first_not_of("0123456789abcdef"), std::string::npos) << s.script.sha1;
    EXPECT_EQ(raw(*server, {"SCRIPT", "LOAD", std::string(s.script.body)}), s.script.sha1);
  }
}

// The text sent is the files without their header comments: the header of
// the first part (common.lua) never reaches the server.
TEST_F(RedisScriptsTest, TheHeaderCommentsAreNotSent) {
  for (const auto& s : every_script) {
    SCOPED_TRACE(s.name);
    EXPECT_EQ(s.script.body.rfind("local function corrupt(k, v, why)\n", 0), 0u)
        << s.script.body.substr(0, 80);
    EXPECT_EQ(s.script.body.find(".lua:"), std::string::npos);
  }
}

// A lock's acquire, status, break and release, exclusive and shared,
// leave the server with every script under the client's digest: each was
// run by that name (after one NOSCRIPT) and never under another.
TEST_F(RedisScriptsTest, TheServerCachesEveryScriptTheClientRunsUnderItsDigest) {
  for (const auto& s : every_script) EXPECT_EQ(exists(s.script), "0") << s.name;
  redis_lock lock(server->url(), "scripts");
  auto h = lock.acquire();
  const auto who = lock.holder();
  ASSERT_TRUE(who.has_value());
  std::error_code ec;
  lock.break_owner("someone-00000000.1.1.0000000000000000", ec);
  EXPECT_TRUE(ec) << "a break named an owner that does not hold the lock";
  EXPECT_EQ(lock.holder()->owner, who->owner) << "a break of another owner removed ours";
  h.release();
  EXPECT_FALSE(lock.holder().has_value());
  tokenlock::redis_lock_options o;
  o.mode = tokenlock::lock_mode::shared;
  auto reader = redis_lock(server->url(), "scripts", o).acquire();
  EXPECT_EQ(lock.holders().size(), 1u);
  reader.release();
  EXPECT_FALSE(lock.holder().has_value());
  for (const auto& s : every_script) EXPECT_EQ(exists(s.script), "1") << s.name;
  EXPECT_EQ(raw(*server, {"EVALSHA", std::string(tokenlock::detail::holders_script.sha1), "7",
                          "tokenlock:scripts", "a", "b", "c", "d", "tokenlock:scripts:shared",
                          "tokenlock:scripts:writer"}),
            "0\n0\n0\n\n0\n0\n0");
}

}  // namespace
