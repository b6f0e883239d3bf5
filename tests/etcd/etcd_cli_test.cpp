// The tokenlock command with --etcd URL, against a real three-member etcd
// cluster with authentication on, started once for the suite on loopback
// ports and stopped by pid. Each test uses lock names of its own.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <boost/filesystem.hpp>

#include "child.hpp"
#include "etcd_cluster.hpp"
#include "temp_dir.hpp"
#include "tokenlock/etcd_lock.hpp"

using tokenlock::etcd_handle;
using tokenlock::etcd_lock;
using tokenlock::testing::command_result;
using tokenlock::testing::etcd_cluster;
using tokenlock::testing::run_command;
using tokenlock::testing::temp_dir;

namespace {

const std::string tool = TOKENLOCK_CLI_PATH;

class EtcdCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!etcd_cluster::unavailable().empty()) return;
    cluster = new etcd_cluster(3);
    const auto user = cluster->ctl({"user", "add", "root:rootpw"});
    const auto role = cluster->ctl({"user", "grant-role", "root", "root"});
    const auto on = cluster->ctl({"auth", "enable"});
    if (user.status != 0 || role.status != 0 || on.status != 0)
      auth_failed = "cannot turn etcd's authentication on: " + user.out + role.out + on.out;
  }
  static void TearDownTestSuite() {
    delete cluster;
    cluster = nullptr;
  }
  void SetUp() override {
    const std::string why = etcd_cluster::unavailable();
    if (!why.empty()) GTEST_SKIP() << why;
    ASSERT_TRUE(auth_failed.empty()) << auth_failed;
    url = cluster->url("root:rootpw");
    lock = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  command_result tl(std::vector<std::string> args, const std::string& input = {}) {
    args.insert(args.begin(), tool);
    return run_command(args, input);
  }
  static std::string line(const std::string& out) { return out.substr(0, out.find('\n')); }
  // How many keys the lock has in etcd now; -1 when etcdctl fails.
  int keys() const {
    const auto r = cluster->ctl({"get", "--prefix", "--keys-only", "tokenlock/" + lock + "/"},
                                "root:rootpw");
    if (r.status != 0) return -1;
    std::istringstream in(r.out);
    int n = 0;
    for (std::string l; std::getline(in, l);) n += !l.empty();
    return n;
  }

  static etcd_cluster* cluster;
  static std::string auth_failed;
  std::string url, lock;
};

etcd_cluster* EtcdCliTest::cluster = nullptr;
std::string EtcdCliTest::auth_failed;

TEST_F(EtcdCliTest, AcquireStatusRefreshReleaseByName) {
  auto a = tl({"acquire", "--etcd", url, "-n", lock});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const std::string token = line(a.out);
  const auto dot = token.find('.');
  ASSERT_NE(dot, std::string::npos) << token;
  const std::string fence = token.substr(0, dot), owner = token.substr(dot + 1);
  EXPECT_EQ(fence.find_first_not_of("0123456789"), std::string::npos) << token;
  EXPECT_EQ(keys(), 1) << "the grant outlives the command that acquired it";

  auto s = tl({"status", "--etcd", url, lock});
  EXPECT_EQ(s.exit_code, 0) << s.err;
  EXPECT_NE(s.out.find("held by owner " + owner + " (fence " + fence + ")"), std::string::npos)
      << s.out;
  auto j = tl({"status", "--json", "--etcd", url, lock});
  EXPECT_EQ(j.exit_code, 0) << j.err;
  EXPECT_NE(j.out.find("\"state\":\"held\""), std::string::npos) << j.out;
  EXPECT_NE(j.out.find("\"fence\":" + fence + ","), std::string::npos) << j.out;
  EXPECT_NE(j.out.find("\"owner\":\"" + owner + "\""), std::string::npos) << j.out;
  EXPECT_NE(j.out.find("\"lease_ms\":300000"), std::string::npos) << "default 300 s: " << j.out;
  EXPECT_NE(j.out.find("\"etcd\":\"" + cluster->url() + "\""), std::string::npos) << j.out;
  EXPECT_EQ(j.out.find("rootpw"), std::string::npos) << "the password leaked: " << j.out;

  auto busy = tl({"acquire", "--etcd", url, "-n", lock});
  EXPECT_EQ(busy.exit_code, 1) << busy.err;
  EXPECT_NE(busy.err.find(owner), std::string::npos) << "names the holder: " << busy.err;
  EXPECT_EQ(tl({"acquire", "--etcd", url, "-n", "-E", "7", lock}).exit_code, 7);
  EXPECT_EQ(keys(), 1) << "refused attempts leave no key";

  auto r = tl({"refresh", "--etcd", url, lock, token});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line(r.out), token) << "the fence stays";
  auto lease = tl({"refresh", "--etcd", url, "--lease", "100", lock, token});
  EXPECT_EQ(lease.exit_code, 64) << lease.err;
  EXPECT_NE(lease.err.find("keeps the TTL it was granted with"), std::string::npos) << lease.err;

  auto rel = tl({"release", "--etcd", url, lock, token});
  EXPECT_EQ(rel.exit_code, 0) << rel.err;
  EXPECT_EQ(line(tl({"status", "--etcd", url, lock}).out), "free");
  EXPECT_EQ(keys(), 0);
  auto again = tl({"release", "--etcd", url, lock, token});
  EXPECT_EQ(again.exit_code, 3) << again.err;
  auto refresh_lost = tl({"refresh", "--etcd", url, lock, token});
  EXPECT_EQ(refresh_lost.exit_code, 3) << refresh_lost.err;
  EXPECT_EQ(tl({"release", "--etcd", url, lock, "not-a-token"}).exit_code, 64);
}

TEST_F(EtcdCliTest, ALeaseEtcdRaisesIsSaidAndTheGrantIsTheRaisedOne) {
  auto a = tl({"acquire", "--etcd", url, "--lease", "0.5", "-n", lock});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.err.find("etcd granted a lease of"), std::string::npos) << a.err;
  auto j = tl({"status", "--json", "--etcd", url, lock});
  const auto at = j.out.find("\"lease_ms\":");
  ASSERT_NE(at, std::string::npos) << j.out;
  EXPECT_GE(std::stol(j.out.substr(at + 11)), 1000) << "raised to whole seconds at least: " << j.out;
  EXPECT_EQ(tl({"release", "--etcd", url, lock, line(a.out)}).exit_code, 0);
}

TEST_F(EtcdCliTest, RunHoldsTheLockWhileTheCommandRunsAndPassesItsStatusOn) {
  auto r = tl({"run", "--etcd", url, "-n", lock, "--", tool, "status", "--etcd", url, lock});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("held by owner "), std::string::npos) << r.out;
  EXPECT_EQ(line(tl({"status", "--etcd", url, lock}).out), "free");
  EXPECT_EQ(keys(), 0);
  EXPECT_EQ(tl({"run", "--etcd", url, lock, "--", "sh", "-c", "exit 5"}).exit_code, 5);

  etcd_handle held = etcd_lock(url, lock).acquire();
  auto busy = tl({"run", "--etcd", url, "-n", lock, "--", "touch", "/dev/null/never"});
  EXPECT_EQ(busy.exit_code, 1) << busy.err;
  auto said = tl({"run", "--etcd", url, "-n", "-v", lock, "--", "true"});
  EXPECT_NE(said.err.find(held.owner()), std::string::npos) << said.err;
  held.release();
}

TEST_F(EtcdCliTest, BreakRefusesALiveHolderUnlessForcedAndFreesADeadOne) {
  // The acquiring command has ended: its owner is provably dead here.
  const std::string dead = line(tl({"acquire", "--etcd", url, "-n", lock}).out);
  auto b = tl({"break", "--etcd", url, lock, dead});
  EXPECT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(line(tl({"status", "--etcd", url, lock}).out), "free");
  EXPECT_EQ(keys(), 0);

  etcd_handle live = etcd_lock(url, lock).acquire();
  const std::string token = std::to_string(live.fence()) + "." + live.owner();
  auto refused = tl({"break", "--etcd", url, lock, token});
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_NE(refused.err.find("refusing to break"), std::string::npos) << refused.err;
  EXPECT_EQ(keys(), 1) << "a refused break deleted the grant";
  EXPECT_EQ(tl({"break", "--etcd", url, lock, "12.not-a-holder"}).exit_code, 3);
  EXPECT_EQ(tl({"break", "--etcd", url, "--force", lock, token}).exit_code, 0);
  EXPECT_EQ(line(tl({"status", "--etcd", url, lock}).out), "free");
  std::error_code ec;
  live.release(ec);
  EXPECT_EQ(ec, tokenlock::errc::lock_lost) << "the broken holder finds out";
  EXPECT_EQ(tl({"break", "--etcd", url, lock, "not-a-token"}).exit_code, 64);
}

// Eight processes, five increments each, on one counter: every value from
// 1 to 40 printed exactly once, and the file holds 40.
TEST_F(EtcdCliTest, IncrFromManyProcessesCountsExactly) {
  temp_dir dir;
  const std::string file = (dir.path() / "hits").string();
  std::vector<pid_t> pids;
  std::vector<std::string> outs;
  for (int p = 0; p < 8; ++p) outs.push_back((dir.path() / ("out" + std::to_string(p))).string());
  for (int p = 0; p < 8; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const std::string script = "for i in 1 2 3 4 5; do \"$0\" incr --etcd \"$1\" --lock \"$2\" "
                                 "-w 60 \"$3\" || exit 1; done > \"$4\"";
      ::execl("/bin/sh", "sh", "-c", script.c_str(), tool.c_str(), url.c_str(), lock.c_str(),
              file.c_str(), outs[p].c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  std::multiset<long> seen;
  for (const auto& o : outs) {
    std::ifstream in(o);
    for (long v; in >> v;) seen.insert(v);
  }
  ASSERT_EQ(seen.size(), 40u);
  for (long v = 1; v <= 40; ++v) EXPECT_EQ(seen.count(v), 1u) << v;
  std::ifstream counter(file);
  std::string content((std::istreambuf_iterator<char>(counter)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "40\n");
  EXPECT_EQ(keys(), 0);
  for (const auto& e : boost::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST_F(EtcdCliTest, WriteReplacesTheFileUnderTheLockAndRefusesWhileHeld) {
  temp_dir dir;
  const std::string file = (dir.path() / "data").string();
  auto w = tl({"write", "--etcd", url, "--lock", lock, file}, "first\n");
  EXPECT_EQ(w.exit_code, 0) << w.err;
  EXPECT_TRUE(boost::filesystem::is_directory(file + ".fence")) << "the commit is fenced";

  etcd_handle held = etcd_lock(url, lock).acquire();
  auto busy = tl({"write", "--etcd", url, "--lock", lock, "-n", file}, "second\n");
  EXPECT_EQ(busy.exit_code, 1) << busy.err;
  auto incr = tl({"incr", "--etcd", url, "--lock", lock, "-n", file});
  EXPECT_EQ(incr.exit_code, 1) << incr.err;
  held.release();
  std::ifstream in(file);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "first\n") << "a refused write left the file as it was";
  auto bad = tl({"incr", "--etcd", url, "--lock", lock, file});
  EXPECT_EQ(bad.exit_code, 65) << "not a counter: " << bad.err;

  auto no_name = tl({"incr", "--etcd", url, file});
  EXPECT_EQ(no_name.exit_code, 64) << no_name.err;
  EXPECT_NE(no_name.err.find("--etcd needs --lock NAME"), std::string::npos) << no_name.err;
  EXPECT_EQ(keys(), 0);
}

TEST_F(EtcdCliTest, ServerErrorsHaveTheirExitCodesAndSayWhatToFix) {
  auto wrong = tl({"acquire", "--etcd", cluster->url("root:nope"), "-n", lock});
  EXPECT_EQ(wrong.exit_code, 69) << wrong.err;
  EXPECT_NE(wrong.err.find("wrong user or password"), std::string::npos) << wrong.err;
  EXPECT_EQ(wrong.err.find("nope"), std::string::npos) << "the password leaked: " << wrong.err;
  auto none = tl({"status", "--etcd", cluster->url(), lock});
  EXPECT_EQ(none.exit_code, 69) << none.err;
  EXPECT_NE(none.err.find("user:password@"), std::string::npos) << none.err;

  auto bad = tl({"status", "--etcd", "http://127.0.0.1:2379", lock});
  EXPECT_EQ(bad.exit_code, 64) << bad.err;
  EXPECT_NE(bad.err.find("etcd://"), std::string::npos) << bad.err;
  EXPECT_EQ(tl({"acquire", "--etcd", url, "--pid", "1", lock}).exit_code, 64);
  EXPECT_EQ(tl({"acquire", "--etcd", url, "--dir-mode", "0700", lock}).exit_code, 64);
  auto both = tl({"acquire", "--etcd", url, "--redis", "redis://127.0.0.1", lock});
  EXPECT_EQ(both.exit_code, 64) << both.err;
  EXPECT_NE(both.err.find("exclude each other"), std::string::npos) << both.err;

  auto json = tl({"--errors=json", "acquire", "--etcd", cluster->url("root:nope"), "-n", lock});
  EXPECT_NE(json.err.find("{\"error\": \"server_error\""), std::string::npos) << json.err;
  EXPECT_EQ(keys(), 0) << "a refused command wrote a key";
}

TEST_F(EtcdCliTest, AnUnreachableClusterExits69NamingTheMemberAndTheFix) {
  etcd_cluster gone(1);
  const std::string down = gone.url();
  gone.stop(0);
  auto r = tl({"acquire", "--etcd", down, "-n", lock});
  EXPECT_EQ(r.exit_code, 69) << r.err;
  EXPECT_NE(r.err.find(down.substr(std::string("etcd://").size())), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is etcd running there"), std::string::npos) << r.err;
  auto incr = tl({"incr", "--etcd", down, "--lock", lock, "/nonexistent-dir/counter"});
  EXPECT_EQ(incr.exit_code, 69) << incr.err;
}

}  // namespace
