// counter.cgi run as a web server runs it, a process per request, under
// limits and settings the server gives it: the file size limit, and the
// mode of the lock directories it creates.
#include <gtest/gtest.h>

#include <algorithm>

#include <sys/stat.h>
#include <unistd.h>

#include <boost/filesystem.hpp>

#include "child.hpp"
#include "inspect.hpp"
#include "temp_dir.hpp"

namespace fs = boost::filesystem;
using tokenlock::testing::command_result;
using tokenlock::testing::entries;
using tokenlock::testing::run_command;
using tokenlock::testing::slurp;
using tokenlock::testing::snapshot;
using tokenlock::testing::spit;
using tokenlock::testing::temp_dir;
using tokenlock::testing::temp_files_below;

namespace {

const std::string cgi = COUNTER_CGI_PATH;

class CounterCgiProcessTest : public ::testing::Test {
 protected:
  temp_dir tmp;

  // One GET of ?id=hits with `settings` (shell assignments) and `limits`
  // (shell commands such as ulimit) applied first.
  command_result get(const std::string& settings, const std::string& limits = "") {
    return run_command({"/bin/sh", "-c",
                        limits + " export TOKENLOCK_COUNTER_DIR='" + tmp.path().string() +
                            "' REQUEST_METHOD=GET QUERY_STRING=id=hits " + settings + "; exec '" +
                            cgi + "'"});
  }
  static std::string body_of(const std::string& response) {
    const auto end = response.find("\r\n\r\n");
    return end == std::string::npos ? "" : response.substr(end + 4);
  }
};

TEST_F(CounterCgiProcessTest, AWritePastTheFileSizeLimitAnswers500AndLeavesTheCounterAsItWas) {
  spit(tmp / "hits.count", "41\n");
  auto r = get("", "ulimit -f 0;");
  EXPECT_EQ(r.exit_code, 0) << "not killed by SIGXFSZ: " << r.err;
  EXPECT_EQ(r.out.rfind("Status: 500 ", 0), 0u) << r.out;
  EXPECT_EQ(body_of(r.out), "internal error; see the server's error log\n");
  EXPECT_NE(r.err.find("file too large"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ulimit -f, RLIMIT_FSIZE"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find((tmp / "hits.count").string()), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find(tmp.path().string()), std::string::npos) << "no path in the response";
  EXPECT_EQ(slurp(tmp / "hits.count"), "41\n");
  EXPECT_TRUE(temp_files_below(tmp.path()).empty());
  EXPECT_EQ(entries(tmp / "hits.count.lock"), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(entries(tmp / "hits.count.lock" / "lockfile").empty()) << "workspace emptied";
  // The lock was released: the next hit, without the limit, counts.
  r = get("");
  EXPECT_EQ(body_of(r.out), "42\n") << r.out << r.err;
}

TEST_F(CounterCgiProcessTest, DirModeIsTheModeOfTheLockDirectoriesItCreates) {
  auto r = get("TOKENLOCK_COUNTER_DIR_MODE=0770");
  EXPECT_EQ(body_of(r.out), "1\n") << r.out << r.err;
  struct stat st {};
  ASSERT_EQ(::stat((tmp / "hits.count.lock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0770u);
  // Without the choice, that group-writable lock directory is refused...
  r = get("");
  EXPECT_EQ(r.out.rfind("Status: 500 ", 0), 0u) << r.out;
  EXPECT_NE(r.err.find("which is not the group chosen for sharing"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(tmp / "hits.count"), "1\n");
  // ...and an empty setting is no setting: the directory it creates is 0755.
  boost::filesystem::remove_all(tmp / "hits.count.lock");
  r = get("TOKENLOCK_COUNTER_DIR_MODE=");
  EXPECT_EQ(body_of(r.out), "2\n") << "empty is unset: " << r.out << r.err;
  ASSERT_EQ(::stat((tmp / "hits.count.lock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
}

TEST_F(CounterCgiProcessTest, ABadDirModeIsAMisconfigurationThatChangesNothing) {
  const auto before = snapshot(tmp.path());
  for (const std::string mode : {"abc", "0777", "0757", "0800", "017777", "0555", "01775", "-1"}) {
    auto r = get("TOKENLOCK_COUNTER_DIR_MODE='" + mode + "'");
    EXPECT_EQ(r.out.rfind("Status: 500 ", 0), 0u) << mode << ": " << r.out;
    EXPECT_EQ(body_of(r.out), "the counter is misconfigured; see the server's error log\n");
    EXPECT_NE(r.err.find("misconfigured: TOKENLOCK_COUNTER_DIR_MODE must be"), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find(mode), std::string::npos) << "the log quotes the value: " << r.err;
  }
  EXPECT_EQ(snapshot(tmp.path()), before);
}

// Where the locks are (TOKENLOCK_COUNTER_LOCK) set so that it cannot be
// used: 500, the reason in the log with the variables' names and without
// the password, and nothing created.
TEST_F(CounterCgiProcessTest, AnUnusableLockSpecIsAMisconfigurationThatNeverShowsItsPassword) {
  const auto before = snapshot(tmp.path());
  const std::pair<std::string, std::string> settings[] = {
      {"TOKENLOCK_COUNTER_LOCK='ftp://user:secret@127.0.0.1/x'", "no lock backend is called ftp://"},
      {"TOKENLOCK_COUNTER_LOCK='redis://:secret@127.0.0.1:1' "
       "TOKENLOCK_COUNTER_REDIS='redis://:secret@127.0.0.1:1'",
       "TOKENLOCK_COUNTER_LOCK and TOKENLOCK_COUNTER_REDIS are both set"},
      {"TOKENLOCK_COUNTER_ETCD='/srv/locks'", "TOKENLOCK_COUNTER_ETCD must be the URL of an etcd"}};
  for (const auto& [setting, reason] : settings) {
    auto r = get(setting);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("Status: 500 ", 0), 0u) << setting << ": " << r.out;
    EXPECT_EQ(body_of(r.out), "the counter is misconfigured; see the server's error log\n");
    EXPECT_NE(r.err.find("counter.cgi: misconfigured: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(reason), std::string::npos) << setting << ": " << r.err;
    EXPECT_EQ(r.err.find("secret"), std::string::npos) << r.err;
  }
  EXPECT_EQ(snapshot(tmp.path()), before);
}

// TOKENLOCK_COUNTER_LOCK naming a directory: the lock directories are made
// there, the counters stay in TOKENLOCK_COUNTER_DIR.
TEST_F(CounterCgiProcessTest, ADirectorySpecHoldsTheLockDirectories) {
  temp_dir locks;
  auto r = get("TOKENLOCK_COUNTER_LOCK='" + locks.path().string() + "'");
  EXPECT_EQ(body_of(r.out), "1\n") << r.out << r.err;
  EXPECT_EQ(entries(tmp.path()), std::vector<std::string>{"hits.count"});
  EXPECT_EQ(entries(locks.path()), std::vector<std::string>{"hits.count.lock"});
  EXPECT_EQ(entries(locks / "hits.count.lock"), std::vector<std::string>{"lockfile"}) << "released";
}

TEST_F(CounterCgiProcessTest, AGroupNamedForSharingIsGivenToTheLockDirectoriesItCreates) {
  auto r = get("TOKENLOCK_COUNTER_GROUP=" + std::to_string(::getegid()));
  EXPECT_EQ(body_of(r.out), "1\n") << r.out << r.err;
  struct stat st {};
  ASSERT_EQ(::stat((tmp / "hits.count.lock").c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, ::getegid());
  EXPECT_EQ(st.st_mode & 07777, 0775u) << "group rwx for the group's other users";
  // The same group named again: that group-writable directory is trusted.
  r = get("TOKENLOCK_COUNTER_GROUP=" + std::to_string(::getegid()));
  EXPECT_EQ(body_of(r.out), "2\n") << r.out << r.err;
}

TEST_F(CounterCgiProcessTest, AGroupThisUserIsNotInAnswers500AndCreatesNothing) {
  if (::geteuid() != 0) GTEST_SKIP() << "a user's groups vary; root is in none but its own here";
  const auto before = snapshot(tmp.path());
  auto r = get("TOKENLOCK_COUNTER_GROUP=65534");
  EXPECT_EQ(r.out.rfind("Status: 500 ", 0), 0u) << r.out;
  EXPECT_NE(r.err.find("not a member"), std::string::npos) << r.err;
  EXPECT_EQ(snapshot(tmp.path()), before);
}

TEST_F(CounterCgiProcessTest, AnUnknownParameterIsEchoedEscapedAndNeverSniffed) {
  auto r = run_command({"/bin/sh", "-c",
                        "export TOKENLOCK_COUNTER_DIR='" + tmp.path().string() +
                            "' REQUEST_METHOD=GET QUERY_STRING='%3Cscript%3E%0D%0AX-Evil:%201%1B[2J=1'; "
                            "exec '" + cgi + "'"});
  EXPECT_EQ(r.out.rfind("Status: 400 ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("X-Content-Type-Options: nosniff\r\n"), std::string::npos) << r.out;
  const std::string body = body_of(r.out);
  EXPECT_EQ(body.find('<'), std::string::npos) << body;
  EXPECT_EQ(body.find('\r'), std::string::npos) << body;
  EXPECT_EQ(body.find('\x1b'), std::string::npos) << body;
  EXPECT_NE(body.find("\\x3cscript\\x3e\\x0d\\x0aX-Evil:"), std::string::npos) << body;
  EXPECT_TRUE(entries(tmp.path()).empty()) << "nothing counted";
}

TEST_F(CounterCgiProcessTest, EnvironmentValuesReachTheLogOnlyEscaped) {
  auto r = get("TOKENLOCK_COUNTER_SYNC=\"$(printf 'x\\033[2J\\nforged: line')\"");
  EXPECT_EQ(r.out.rfind("Status: 500 ", 0), 0u) << r.out;
  EXPECT_NE(r.err.find("x\\x1b\\x5b2J\\x0aforged: line"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one log line: " << r.err;
}

}  // namespace
