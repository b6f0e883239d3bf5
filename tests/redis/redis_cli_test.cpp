// The tokenlock command with --redis URL, against a real redis-server that
// each test starts and stops by its pid.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <boost/filesystem.hpp>

#include "child.hpp"
#include "temp_dir.hpp"
#include "redis_raw.hpp"
#include "redis_server.hpp"
#include "tokenlock/redis_lock.hpp"

using tokenlock::redis_handle;
using tokenlock::redis_lock;
using tokenlock::testing::command_result;
using tokenlock::testing::free_port;
using tokenlock::testing::raw;
using tokenlock::testing::redis_server;
using tokenlock::testing::run_command;
using tokenlock::testing::temp_dir;

namespace {

const std::string tool = TOKENLOCK_CLI_PATH;

class RedisCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = redis_server::unavailable();
    if (!why.empty()) GTEST_SKIP() << why;
    server = std::make_unique<redis_server>(std::vector<std::string>{"--requirepass", "pw"});
    url = server->url(":pw");
  }
  command_result tl(std::vector<std::string> args, const std::string& input = {}) {
    args.insert(args.begin(), tool);
    return run_command(args, input);
  }
  static std::string line(const std::string& out) { return out.substr(0, out.find('\n')); }
  std::unique_ptr<redis_server> server;
  std::string url;
};

TEST_F(RedisCliTest, AcquireStatusRefreshReleaseByName) {
  auto a = tl({"acquire", "--redis", url, "-n", "coupons"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const std::string token = line(a.out);
  ASSERT_NE(token.find('.'), std::string::npos) << token;
  const std::string fence = token.substr(0, token.find('.'));
  EXPECT_EQ(fence.find_first_not_of("0123456789"), std::string::npos) << token;

  auto s = tl({"status", "--redis", url, "coupons"});
  EXPECT_EQ(s.exit_code, 0) << s.err;
  EXPECT_NE(s.out.find("held by pid "), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("(fence " + fence + ")"), std::string::npos) << s.out;
  auto j = tl({"status", "--json", "--redis", url, "coupons"});
  EXPECT_EQ(j.exit_code, 0) << j.err;
  EXPECT_NE(j.out.find("\"state\":\"held\""), std::string::npos) << j.out;
  EXPECT_NE(j.out.find("\"fence\":" + fence), std::string::npos) << j.out;
  EXPECT_NE(j.out.find("\"owner\":\"" + token.substr(token.find('.') + 1) + "\""), std::string::npos)
      << j.out;
  EXPECT_NE(j.out.find("\"remaining_ms\":"), std::string::npos) << j.out;
  EXPECT_EQ(j.out.find(":pw@"), std::string::npos) << "the password leaked: " << j.out;
  EXPECT_NE(j.out.find("\"redis\":\"redis://127.0.0.1:" + std::to_string(server->port())),
            std::string::npos)
      << j.out;

  auto busy = tl({"acquire", "--redis", url, "-n", "coupons"});
  EXPECT_EQ(busy.exit_code, 1) << busy.err;
  EXPECT_EQ(tl({"acquire", "--redis", url, "-n", "-E", "7", "coupons"}).exit_code, 7);

  auto r = tl({"refresh", "--redis", url, "--lease", "100", "coupons", token});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line(r.out), token) << "the fence stays";
  EXPECT_GT(std::stol(server->cli({"-a", "pw", "--no-auth-warning", "PTTL", "tokenlock:coupons"})),
            90000);

  auto rel = tl({"release", "--redis", url, "coupons", token});
  EXPECT_EQ(rel.exit_code, 0) << rel.err;
  EXPECT_EQ(line(tl({"status", "--redis", url, "coupons"}).out), "free");
  auto again = tl({"release", "--redis", url, "coupons", token});
  EXPECT_EQ(again.exit_code, 3) << again.err;
  EXPECT_NE(again.err.find("not held by"), std::string::npos) << again.err;
}

// A shared grant has no fence: acquire -s prints its owner alone, and
// refresh and release take that token back.
TEST_F(RedisCliTest, ASharedGrantIsRefreshedAndReleasedByTheTokenAcquirePrinted) {
  auto a = tl({"acquire", "-s", "--redis", url, "-n", "coupons"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const std::string token = line(a.out);
  ASSERT_NE(token.substr(0, token.find('.')).find('-'), std::string::npos)
      << "an owner id, no fence in front: " << token;
  auto b = tl({"acquire", "-s", "--redis", url, "-n", "coupons"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  auto r = tl({"refresh", "--redis", url, "--lease", "100", "coupons", token});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line(r.out), token);
  auto rel = tl({"release", "--redis", url, "coupons", token});
  EXPECT_EQ(rel.exit_code, 0) << rel.err;
  auto j = tl({"status", "--json", "--redis", url, "coupons"});
  EXPECT_EQ(j.out.find(token), std::string::npos) << "released, still listed: " << j.out;
  EXPECT_NE(j.out.find(line(b.out)), std::string::npos) << "the other reader holds on: " << j.out;
  auto again = tl({"release", "--redis", url, "coupons", token});
  EXPECT_EQ(again.exit_code, 3) << again.err;
  EXPECT_EQ(tl({"release", "--redis", url, "coupons", line(b.out)}).exit_code, 0);
  EXPECT_EQ(line(tl({"status", "--redis", url, "coupons"}).out), "free");
  // Neither a fence alone nor an empty owner is a token.
  EXPECT_EQ(tl({"release", "--redis", url, "coupons", "12."}).exit_code, 64);
  EXPECT_EQ(tl({"release", "--redis", url, "coupons", ".x"}).exit_code, 64);
}

TEST_F(RedisCliTest, RunHoldsTheLockWhileTheCommandRuns) {
  auto r = tl({"run", "--redis", url, "-n", "coupons", "--", tool, "status", "--redis", url,
               "coupons"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("held by pid "), std::string::npos) << r.out;
  EXPECT_EQ(line(tl({"status", "--redis", url, "coupons"}).out), "free");
  EXPECT_EQ(tl({"run", "--redis", url, "coupons", "--", "sh", "-c", "exit 5"}).exit_code, 5);

  redis_handle held = redis_lock(url, "coupons").acquire();
  auto busy = tl({"run", "--redis", url, "-n", "coupons", "--", "true"});
  EXPECT_EQ(busy.exit_code, 1) << busy.err;
  auto said = tl({"run", "--redis", url, "-n", "-v", "coupons", "--", "true"});
  EXPECT_NE(said.err.find("held by pid " + std::to_string(::getpid())), std::string::npos)
      << said.err;
}

TEST_F(RedisCliTest, BreakRefusesALiveHolderUnlessForcedAndFreesADeadOne) {
  // The acquiring command has ended: its owner is provably dead here.
  const std::string dead = line(tl({"acquire", "--redis", url, "-n", "coupons"}).out);
  auto b = tl({"break", "--redis", url, "coupons", dead});
  EXPECT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(line(tl({"status", "--redis", url, "coupons"}).out), "free");

  redis_handle live = redis_lock(url, "coupons").acquire();
  const std::string token = std::to_string(live.fence()) + "." + live.owner();
  auto refused = tl({"break", "--redis", url, "coupons", token});
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_NE(refused.err.find("refusing to break"), std::string::npos) << refused.err;
  EXPECT_EQ(tl({"break", "--redis", url, "--force", "coupons", token}).exit_code, 0);
  EXPECT_EQ(line(tl({"status", "--redis", url, "coupons"}).out), "free");
  EXPECT_EQ(tl({"break", "--redis", url, "coupons", "12.not-a-holder"}).exit_code, 3);
  EXPECT_EQ(tl({"break", "--redis", url, "coupons", "not-a-token"}).exit_code, 64);
}

TEST_F(RedisCliTest, AcquireWarnsWhenTheServersClockIsBehindTheLastFence) {
  server->cli({"-a", "pw", "--no-auth-warning", "SET", "tokenlock:coupons:fence",
               "9000000000000000", "PX", "86400000"});
  auto a = tl({"acquire", "--redis", url, "-n", "coupons"});
  EXPECT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(line(a.out).substr(0, 17), "9000000000000001.") << a.out;
  EXPECT_NE(a.err.find("note: the clock of redis://127.0.0.1:" + std::to_string(server->port())),
            std::string::npos)
      << a.err;
  EXPECT_EQ(a.err.find(":pw@"), std::string::npos) << a.err;
}

TEST_F(RedisCliTest, ServerErrorsHaveTheirExitCodesAndNameTheServer) {
  auto wrong = tl({"acquire", "--redis", server->url(":nope"), "-n", "coupons"});
  EXPECT_EQ(wrong.exit_code, 69) << wrong.err;
  EXPECT_NE(wrong.err.find("check the user and password"), std::string::npos) << wrong.err;
  EXPECT_EQ(wrong.err.find("nope"), std::string::npos) << "the password leaked: " << wrong.err;

  const int port = free_port();
  auto refused = tl({"acquire", "--redis", "redis://127.0.0.1:" + std::to_string(port), "-n", "x"});
  EXPECT_EQ(refused.exit_code, 69) << refused.err;
  EXPECT_NE(refused.err.find("redis://127.0.0.1:" + std::to_string(port)), std::string::npos)
      << refused.err;

  for (const char* leaky : {"redis://:se%zzcret@127.0.0.1:6379", "redis://u:se/cret@h:99999",
                                   "unix://:se@cret@/tmp/r.sock?db=x"}) {
    auto b = tl({"status", "--redis", leaky, "coupons"});
    EXPECT_EQ(b.exit_code, 64) << b.err;
    EXPECT_NE(b.err.find("bad Redis URL"), std::string::npos) << b.err;
    EXPECT_EQ(b.err.find("cret"), std::string::npos) << "the password leaked: " << b.err;
    EXPECT_NE(b.err.find("***@"), std::string::npos) << b.err;
  }
  auto bad = tl({"status", "--redis", "http://x", "coupons"});
  EXPECT_EQ(bad.exit_code, 64) << bad.err;
  EXPECT_NE(bad.err.find("must start with redis://"), std::string::npos) << bad.err;
  EXPECT_EQ(tl({"acquire", "--redis", url, "--pid", "1", "coupons"}).exit_code, 64);
}

TEST_F(RedisCliTest, IncrAndWriteTakeTheLockByNameAndFenceTheirCommit) {
  temp_dir dir;
  const std::string file = (dir.path() / "hits").string();
  for (int i = 1; i <= 3; ++i) {
    auto r = tl({"incr", "--redis", url, "--lock", "hits", file});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(line(r.out), std::to_string(i));
  }
  EXPECT_TRUE(boost::filesystem::is_directory(file + ".fence")) << "the commit is fenced";
  EXPECT_FALSE(boost::filesystem::exists(file + ".lock")) << "no lock directory is used";
  EXPECT_EQ(raw(*server, {"EXISTS", "tokenlock:hits"}, "pw"), "0") << "the grant was released";

  redis_handle held = redis_lock(url, "hits").acquire();
  auto busy = tl({"write", "--redis", url, "--lock", "hits", "-n", file}, "9\n");
  EXPECT_EQ(busy.exit_code, 1) << busy.err;
  held.release();
  auto w = tl({"write", "--redis", url, "--lock", "hits", file}, "41\n");
  EXPECT_EQ(w.exit_code, 0) << w.err;
  EXPECT_EQ(line(tl({"incr", "--redis", url, "--lock", "hits", file}).out), "42");
  auto no_name = tl({"incr", "--redis", url, file});
  EXPECT_EQ(no_name.exit_code, 64) << no_name.err;
  EXPECT_NE(no_name.err.find("--redis needs --lock NAME"), std::string::npos) << no_name.err;
}

// ---- keys the lock never writes: exit 69, the key, what it holds, the fix -----

TEST_F(RedisCliTest, StatusAndAcquireReportAGrantOfAnotherFormWithTheKeyAndTheFix) {
  ASSERT_EQ(raw(*server, {"SET", "tokenlock:coupons", "garbage", "PX", "60000"}, "pw"), "OK");
  const std::string fix = "redis-cli -h 127.0.0.1 -p " + std::to_string(server->port()) +
                          " --askpass DEL tokenlock:coupons";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"status", "--redis", url, "coupons"},
        std::vector<std::string>{"status", "--json", "--redis", url, "coupons"},
        std::vector<std::string>{"acquire", "--redis", url, "-n", "coupons"},
        std::vector<std::string>{"run", "--redis", url, "-w", "1", "coupons", "--", "true"}}) {
    auto r = tl(args);
    EXPECT_EQ(r.exit_code, 69) << args[0] << ": " << r.err;
    EXPECT_NE(r.err.find("the key tokenlock:coupons holds \"garbage\", which is not a grant"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find(fix), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("pw"), std::string::npos) << "the password leaked: " << r.err;
    EXPECT_EQ(r.out.find("held by"), std::string::npos) << r.out;
  }
  EXPECT_EQ(raw(*server, {"GET", "tokenlock:coupons"}, "pw"), "garbage");
  EXPECT_EQ(raw(*server, {"DBSIZE"}, "pw"), "1") << "a refused command wrote a key";
}

TEST_F(RedisCliTest, StatusReportsAGrantWithoutAnExpiryInsteadOfAHolderForever) {
  auto a = tl({"acquire", "--redis", url, "-n", "coupons"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(raw(*server, {"PERSIST", "tokenlock:coupons"}, "pw"), "1");
  auto s = tl({"status", "--redis", url, "coupons"});
  EXPECT_EQ(s.exit_code, 69) << s.err;
  EXPECT_NE(s.err.find("a grant without an expiry (PTTL -1)"), std::string::npos) << s.err;
  EXPECT_NE(s.err.find("PEXPIRE tokenlock:coupons MILLISECONDS"), std::string::npos) << s.err;
  // The command's refresh and release find the grant through status too.
  const std::string token = line(a.out);
  EXPECT_EQ(tl({"refresh", "--redis", url, "coupons", token}).exit_code, 69);
  EXPECT_EQ(raw(*server, {"PTTL", "tokenlock:coupons"}, "pw"), "-1");
  // The fix the message gives: a lease again; then it is the holder's.
  ASSERT_EQ(raw(*server, {"PEXPIRE", "tokenlock:coupons", "60000"}, "pw"), "1");
  auto again = tl({"status", "--redis", url, "coupons"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("held by pid"), std::string::npos) << again.out;
  EXPECT_EQ(tl({"release", "--redis", url, "coupons", token}).exit_code, 0);
  EXPECT_EQ(raw(*server, {"EXISTS", "tokenlock:coupons"}, "pw"), "0");
}

TEST_F(RedisCliTest, AcquireReportsAFenceKeyThatIsNotAFenceAndGrantsNothing) {
  ASSERT_EQ(raw(*server, {"SET", "tokenlock:coupons:fence", "1e23"}, "pw"), "OK");
  auto a = tl({"acquire", "--redis", url, "-n", "coupons"});
  EXPECT_EQ(a.exit_code, 69) << a.err;
  EXPECT_EQ(a.out, "");
  EXPECT_NE(a.err.find("the key tokenlock:coupons:fence holds \"1e23\", which is not a fence"),
            std::string::npos)
      << a.err;
  EXPECT_NE(a.err.find("above every fence already handed out"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("--askpass SET tokenlock:coupons:fence FENCE"), std::string::npos) << a.err;
  EXPECT_EQ(raw(*server, {"EXISTS", "tokenlock:coupons"}, "pw"), "0");
  auto s = tl({"status", "--redis", url, "coupons"});
  EXPECT_EQ(s.exit_code, 0) << s.err;
  EXPECT_EQ(s.out, "free\n") << "status reads no fence";
}

// ---- names in the URL ------------------------------------------------------------

// Whether /etc/hosts names localhost as 127.0.0.1 (the address the test
// servers listen on); Debian's always does.
bool etc_hosts_has_localhost() {
  std::ifstream in("/etc/hosts");
  std::string l;
  while (std::getline(in, l)) {
    std::istringstream words(l.substr(0, l.find('#')));
    std::string address, name;
    words >> address;
    while (address == "127.0.0.1" && words >> name)
      if (name == "localhost") return true;
  }
  return false;
}

// With the static command (TOKENLOCK_CLI_IS_STATIC), this is its own
// resolver reading /etc/hosts; a dynamically linked command gets the same
// from the system's.
TEST_F(RedisCliTest, LocalhostInTheUrlReachesTheServer) {
  if (!etc_hosts_has_localhost()) GTEST_SKIP() << "/etc/hosts has no line \"127.0.0.1 localhost\"";
  const std::string local = "redis://:pw@localhost:" + std::to_string(server->port());
  auto a = tl({"acquire", "--redis", local, "-n", "coupons"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const std::string token = line(a.out);
  EXPECT_EQ(raw(*server, {"EXISTS", "tokenlock:coupons"}, "pw"), "1");
  auto s = tl({"status", "--redis", local, "coupons"});
  EXPECT_EQ(s.exit_code, 0) << s.err;
  EXPECT_NE(s.out.find("token " + token), std::string::npos) << s.out;
  EXPECT_EQ(tl({"release", "--redis", local, "coupons", token}).exit_code, 0);
  EXPECT_EQ(raw(*server, {"EXISTS", "tokenlock:coupons"}, "pw"), "0");
}

TEST_F(RedisCliTest, TheStaticCommandSaysItResolvesOnlyNamesInEtcHosts) {
  if (!TOKENLOCK_CLI_IS_STATIC)
    GTEST_SKIP() << "the tokenlock command is linked dynamically (TOKENLOCK_CLI_STATIC is OFF): "
                    "it resolves names through the system";
  // .invalid never resolves (RFC 2606), and is in no hosts file.
  const std::string elsewhere =
      "redis://:pw@tokenlock-test.invalid:" + std::to_string(server->port());
  auto a = tl({"acquire", "--redis", elsewhere, "-n", "coupons"});
  EXPECT_EQ(a.exit_code, 69) << a.err;
  EXPECT_NE(a.err.find("cannot resolve the host name \"tokenlock-test.invalid\""),
            std::string::npos)
      << a.err;
  EXPECT_NE(a.err.find("resolves only names in /etc/hosts and numeric addresses"),
            std::string::npos)
      << a.err;
  EXPECT_NE(a.err.find("use the dynamically linked tokenlock command"), std::string::npos)
      << a.err;
  EXPECT_EQ(raw(*server, {"DBSIZE"}, "pw"), "0");
}

}  // namespace
