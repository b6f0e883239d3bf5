// The tokenlock command, driven as users drive it: the real binary, real
// shells, real signals.
#include <gtest/gtest.h>

#include <csignal>
#include <random>
#include <set>
#include <thread>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/filesystem.hpp>

#include "child.hpp"
#include "cli.hpp"
#include "tokenlock/clock_judgement.hpp"
#include "inspect.hpp"
#include "temp_dir.hpp"
#include "lockdir/token_name.hpp"
#include "tokenlock/tokenlock.hpp"

namespace fs = boost::filesystem;
using namespace std::chrono_literals;
using tokenlock::testing::child;
using tokenlock::testing::command_result;
using tokenlock::testing::entries;
using tokenlock::testing::holder_pid;
using tokenlock::testing::lines_of;
using tokenlock::testing::monotonic_ns;
using tokenlock::testing::run_command;
using tokenlock::testing::slurp;
using tokenlock::testing::snapshot;
using tokenlock::testing::spit;
using tokenlock::testing::strip;
using tokenlock::testing::temp_dir;
namespace code = tokenlock::cli::exit_code;

namespace {

const std::string tool = TOKENLOCK_CLI_PATH;

class CliTest : public ::testing::Test {
 protected:
  temp_dir tmp;
  std::string lock = (tmp / "job.lock").string();

  command_result tl(std::vector<std::string> args, const std::string& input = {}, int uid = -1) {
    args.insert(args.begin(), tool);
    return run_command(args, input, uid);
  }
  // A shell snippet with $T set to the tokenlock binary.
  command_result sh(const std::string& script) {
    return run_command({"/bin/sh", "-c", "T='" + tool + "'; " + script});
  }
};

TEST_F(CliTest, EveryCommandHasHelpAndTheToolAVersion) {
  for (const char* cmd :
       {"run", "acquire", "release", "refresh", "status", "break", "write", "commit", "incr", "doctor"}) {
    auto r = tl({cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_NE(r.out.find(std::string("Usage: tokenlock ") + cmd), std::string::npos) << cmd << r.out;
  }
  auto v = tl({"--version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.out.rfind("tokenlock ", 0), 0u);
  EXPECT_EQ(tl({"--help"}).exit_code, 0);
  EXPECT_EQ(tl({}).exit_code, code::usage);
  EXPECT_EQ(tl({"frobnicate"}).exit_code, code::usage);
}

TEST_F(CliTest, BadCommandLinesAreUsageErrorsThatChangeNothing) {
  auto before = snapshot(tmp.path());
  const std::vector<std::vector<std::string>> bad = {
      {"run"},
      {"run", lock},
      {"run", "-w", "1", "-n", lock, "true"},
      {"run", "-w", "-3", lock, "true"},
      {"run", "-E", "300", lock, "true"},
      {"run", "--lease", "0", lock, "true"},
      {"acquire"},
      {"acquire", "--pid", "0", lock},
      {"release", lock},
      {"refresh", lock},
      {"status"},
      {"break", lock},
      {"write"},
      {"write", "--sync", "always", "f"},
      {"write", "--mode", "999", "f"},
      {"incr"},
      {"incr", "--by", "-1", "c"},
      {"incr", "--by", "x", "c"},
      {"status", "--no-such-option", lock},
      {"doctor"},
      {"doctor", "--peer-wait", "5", tmp.path().string()},
      {"doctor", "--peer", tmp.path().string(), "--peer-wait", "-1", tmp.path().string()},
      {"doctor", "--peer", "", tmp.path().string()},
  };
  for (const auto& args : bad) {
    auto r = tl(args);
    std::string line;
    for (auto& a : args) line += a + " ";
    EXPECT_EQ(r.exit_code, code::usage) << line << r.err;
    EXPECT_NE(r.err.find("--help"), std::string::npos) << line << r.err;
  }
  EXPECT_EQ(snapshot(tmp.path()), before);
}

TEST_F(CliTest, MapsEveryFailureToItsDocumentedExitCode) {
  using tokenlock::errc;
  using tokenlock::cli::exit_code_for;
  // The codes the other tests reach for real, and those that need a broken
  // disk or an internal error to happen.
  EXPECT_EQ(exit_code_for(errc::busy, 9), 9);
  EXPECT_EQ(exit_code_for(errc::timed_out), code::busy);
  EXPECT_EQ(exit_code_for(errc::lock_lost), code::lost);
  EXPECT_EQ(exit_code_for(errc::lock_corrupt), code::unavailable);
  EXPECT_EQ(exit_code_for(errc::token_missing), code::unavailable);
  EXPECT_EQ(exit_code_for(errc::corrupt_data), code::data);
  EXPECT_EQ(exit_code_for(errc::bad_argument), code::usage);
  EXPECT_EQ(exit_code_for(errc::not_owner), code::software);
  EXPECT_EQ(exit_code_for(errc::dir_sync_failed), code::io_error);
  EXPECT_EQ(exit_code_for(std::make_error_code(std::errc::io_error)), code::io_error);
  EXPECT_EQ(exit_code_for(std::make_error_code(std::errc::permission_denied)), code::no_perm);
  EXPECT_EQ(exit_code_for(std::make_error_code(std::errc::no_space_on_device)), code::cant_create);
  EXPECT_EQ(exit_code_for(std::make_error_code(std::errc::too_many_files_open)), code::os_error);
}

TEST_F(CliTest, RunPassesTheCommandsStatusAndSignalThrough) {
  EXPECT_EQ(tl({"run", lock, "--", "/bin/sh", "-c", "exit 7"}).exit_code, 7);
  EXPECT_EQ(tl({"run", lock, "/bin/sh", "-c", "kill -TERM $$"}).exit_code, 128 + SIGTERM);
  auto r = tl({"run", lock, "--", "/bin/echo", "-n", "--", "-w", "5"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "-- -w 5") << "the command's arguments are untouched";
  EXPECT_EQ(tl({"run", lock, "--", "/nonexistent/cmd"}).exit_code, code::not_found);
  spit(tmp / "not-executable", "#!/bin/sh\n");
  EXPECT_EQ(tl({"run", lock, "--", (tmp / "not-executable").string()}).exit_code, code::cannot_execute);
  EXPECT_EQ(entries(lock), std::vector<std::string>{"lockfile"}) << "released every time";
}

// flock(1)'s habits: -c COMMAND (before LOCKDIR or after it) runs by
// /bin/sh -c; -x and -o are accepted; --timeout is -w; -u, which needs a
// lock held by a descriptor, is refused saying why.
TEST_F(CliTest, RunTakesFlocksHabits) {
  auto r = tl({"run", "-c", "echo one $((1+1))", lock});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "one 2\n");
  r = tl({"run", "-x", "-o", lock, "-c", "echo two; exit 5"});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_EQ(r.out, "two\n");
  EXPECT_EQ(tl({"run", "--timeout", "2", lock, "true"}).exit_code, 0);
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"run", "-u", lock, "true"},
        std::vector<std::string>{"run", "-c", "true", lock, "echo", "no"},
        std::vector<std::string>{"run", lock, "-c", "true", "extra"},
        std::vector<std::string>{"run", "-w", "1", "--timeout", "1", lock, "true"}}) {
    r = tl(bad);
    EXPECT_EQ(r.exit_code, code::usage) << bad[1] << " " << r.err;
  }
  EXPECT_NE(tl({"run", "-u", lock, "true"}).err.find("tokenlock release"), std::string::npos);
  EXPECT_EQ(entries(lock), std::vector<std::string>{"lockfile"}) << "released every time";
  // --timeout waits for a busy lock as -w does, then gives up.
  const std::string token = strip(tl({"acquire", "--pid", std::to_string(::getpid()), lock}).out);
  const std::int64_t start = monotonic_ns();
  EXPECT_EQ(tl({"run", "--timeout", "0.3", lock, "true"}).exit_code, code::busy);
  EXPECT_GE(monotonic_ns() - start, 300'000'000) << "gave up before its timeout";
  EXPECT_EQ(tl({"release", lock, token}).exit_code, 0);
}

// flock(1)'s -s: shared holders hold together, status lists each, a writer
// waits for them; --slots N admits N.
TEST_F(CliTest, SharedHoldersHoldTogetherAndStatusListsEveryOne) {
  const std::string pid = std::to_string(::getpid());
  const std::string a = strip(tl({"acquire", "-s", "--pid", pid, lock}).out);
  const std::string b = strip(tl({"acquire", "--shared", "--pid", pid, lock}).out);
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  auto r = tl({"status", lock});
  EXPECT_NE(r.out.find("2 holders:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  shared: held by pid " + pid), std::string::npos) << r.out;
  r = tl({"status", "--json", lock});
  EXPECT_NE(r.out.find("\"mode\":\"shared\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"holders\":[{"), std::string::npos) << r.out;
  EXPECT_EQ(tl({"run", "-s", "-n", lock, "-c", "exit 4"}).exit_code, 4) << "a third reader";
  EXPECT_EQ(tl({"run", "-n", lock, "true"}).exit_code, code::busy) << "a writer beside readers";
  // The second holder is broken alone, by its id, with --force (it lives).
  EXPECT_EQ(tl({"break", lock, b}).exit_code, code::busy) << "broke a live share without --force";
  r = tl({"break", "--force", lock, b});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(tl({"release", lock, b}).exit_code, code::lost) << "a broken share released";
  EXPECT_EQ(tl({"release", lock, a}).exit_code, 0);
  EXPECT_EQ(entries(lock), std::vector<std::string>{"lockfile"});
  const std::string one = strip(tl({"acquire", "--slots", "1", "--pid", pid, lock}).out);
  EXPECT_EQ(tl({"run", "--slots", "1", "-n", lock, "true"}).exit_code, code::busy);
  r = tl({"run", "--slots", "2", "-n", "-v", lock, "true"});
  EXPECT_EQ(r.exit_code, code::busy);
  EXPECT_NE(r.err.find("a semaphore of 1"), std::string::npos) << r.err;
  EXPECT_EQ(tl({"release", lock, one}).exit_code, 0);
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"run", "-x", "-s", lock, "true"},
        std::vector<std::string>{"run", "--slots", "0", lock, "true"},
        std::vector<std::string>{"acquire", "--slots", "1000000", lock}}) {
    r = tl(bad);
    EXPECT_EQ(r.exit_code, code::usage) << bad[1] << " " << r.err;
  }
  EXPECT_EQ(entries(lock), std::vector<std::string>{"lockfile"});
}

// run's CMD owns the token: once it has ended, a reader may take its share
// (its owner is dead) before run releases. That is no loss, also with a
// lease of 1 s, the skew allowance: before, such a share was reported lost
// about once in seven runs of three loops.
TEST_F(CliTest, ASharePassedOnAfterCmdEndedIsNoLossWithAShortLease) {
  auto r = sh("for i in 1 2 3; do (for j in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do "
              "$T run -s --lease 1 '" + lock + "' -- true || echo \"lost $?\"; done) & done; wait");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "") << r.err;
  EXPECT_EQ(entries(lock), std::vector<std::string>{"lockfile"});
}

// A regular file at the lock's path (flock(1)'s lock file) is said to be
// one, with what to do, and left as it is.
TEST_F(CliTest, ARegularFileAtTheLockPathIsNamedAndLeftAlone) {
  const fs::path file = tmp / "flocked";
  spit(file, "flock(1) was here\n");
  auto r = tl({"run", file.string(), "true"});
  EXPECT_EQ(r.exit_code, code::cant_create) << r.err;
  EXPECT_NE(r.err.find("it is a regular file"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(file.string() + ".lock"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(file), "flock(1) was here\n");
}

TEST_F(CliTest, RunForwardsTerminationSignalsToTheCommand) {
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    child run({tool, "run", lock, "--", "/bin/sh", "-c",
               "trap 'exit 42' TERM INT HUP; echo ready; while :; do sleep 0.01; done"});
    ASSERT_EQ(run.read_line(), "ready");
    run.signal(sig);
    int status = run.wait();
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 42) << "signal " << sig << " reached the command's trap";
    EXPECT_EQ(entries(lock), std::vector<std::string>{"lockfile"});
  }
}

TEST_F(CliTest, RunKeepsTheLeaseAliveWhileTheCommandOutlastsIt) {
  const std::string fifo = (tmp / "go").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  child run({tool, "run", "--lease", "0.3", lock, "--", "/bin/sh", "-c",
             "echo started; read x < '" + fifo + "'"});
  ASSERT_EQ(run.read_line(), "started");
  // Watch for four leases and at least six looks, however slowly a loaded
  // machine runs them: the lock must stay held and never look stale.
  const std::int64_t end = monotonic_ns() + 1'200'000'000;
  int looks = 0;
  while (monotonic_ns() < end || looks < 6) {
    auto s = tl({"status", "--json", lock});
    ASSERT_NE(s.out.find("\"state\":\"held\""), std::string::npos) << s.out;
    ++looks;
    std::this_thread::sleep_for(50ms);  // pacing the observations
  }
  EXPECT_EQ(tl({"run", "-n", lock, "true"}).exit_code, code::busy);
  spit(fifo, "go\n");
  int status = run.wait();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST_F(CliTest, ConcurrentNonBlockingRunsRunExactlyOnce) {
  const std::string fifo = (tmp / "go").string();
  const std::string log = (tmp / "ran").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::vector<child> runs;
  for (int i = 0; i < 8; ++i)
    runs.emplace_back(std::vector<std::string>{
        tool, "run", "-n", lock, "--", "/bin/sh", "-c",
        "echo ran >> '" + log + "'; read x < '" + fifo + "'"});
  // Seven give up at once; the one that runs waits for the go.
  int busy = 0;
  std::vector<child*> still;
  for (auto& r : runs) still.push_back(&r);
  while (busy < 7) {
    for (auto it = still.begin(); it != still.end();) {
      int st = 0;
      if (::waitpid((*it)->pid(), &st, WNOHANG) == (*it)->pid()) {
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == code::busy);
        ++busy;
        (*it)->wait();  // already reaped: marks it finished
        it = still.erase(it);
      } else {
        ++it;
      }
    }
    std::this_thread::sleep_for(5ms);  // polling the exits
  }
  ASSERT_EQ(still.size(), 1u);
  spit(fifo, "go\n");
  EXPECT_EQ(WEXITSTATUS(still.front()->wait()), 0);
  EXPECT_EQ(lines_of(slurp(log)).size(), 1u);
}

TEST_F(CliTest, ARunWhoseLockIsStolenSaysSoAndFailsAfterTheCommand) {
  const std::string fifo = (tmp / "go").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  child run({tool, "run", "--lease", "0.3", lock, "--", "/bin/sh", "-c",
             "echo started; read x < '" + fifo + "'"});
  ASSERT_EQ(run.read_line(), "started");
  // Stop tokenlock itself (not the command) past its lease: another process
  // takes the lock over, and the stopped run cannot refresh in time.
  run.signal(SIGSTOP);
  auto thief = tl({"acquire", "-w", "5", lock});
  ASSERT_EQ(thief.exit_code, 0) << thief.err;
  run.signal(SIGCONT);
  // Let the command finish; the run must then report the loss.
  spit(fifo, "go\n");
  int status = 0;
  while (::waitpid(run.pid(), &status, 0) < 0 && errno == EINTR) {
  }
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), code::lost);
  EXPECT_EQ(entries(lock), std::vector<std::string>{strip(thief.out)}) << "the thief keeps it";
  EXPECT_EQ(tl({"release", lock, strip(thief.out)}).exit_code, 0);
}

TEST_F(CliTest, AcquireInAScriptOutlivesTheToolAndIsReleasedByRelease) {
  auto r = sh("TOKEN=$($T acquire '" + lock + "') || exit 9; echo \"$TOKEN\"; echo $$; "
              "$T status '" + lock + "'; $T release '" + lock + "' \"$TOKEN\"; echo released=$?; "
              "$T status '" + lock + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = lines_of(r.out);
  // token, pid; status: holder, token, clock; released=0; status: free, clock.
  ASSERT_GE(lines.size(), 8u) << r.out;
  const std::string token = lines[0], shell_pid = lines[1];
  tokenlock::detail::held_token t;
  ASSERT_EQ(tokenlock::detail::classify_name(token, &t), tokenlock::detail::name_kind::held);
  EXPECT_EQ(std::to_string(t.pid), shell_pid) << "the script's shell owns the lock";
  EXPECT_NE(lines[2].find("held by pid " + shell_pid), std::string::npos) << r.out;
  EXPECT_EQ(lines[5], "released=0");
  EXPECT_EQ(lines[6], "free");
}

TEST_F(CliTest, AScriptKilledWhileHoldingTheLockLosesItAtOnce) {
  child script({"/bin/sh", "-c",
                "T='" + tool + "'; TOKEN=$($T acquire '" + lock + "'); echo held; read x"});
  ASSERT_EQ(script.read_line(), "held");
  EXPECT_EQ(tl({"run", "-n", lock, "true"}).exit_code, code::busy);
  script.signal(SIGKILL);
  script.wait();
  // A wait of 5 s against a one-hour lease: only detecting the holder's
  // death can free the lock in time (a loaded machine still has seconds).
  const std::int64_t t0 = monotonic_ns();
  auto r = tl({"run", "-w", "5", lock, "--", "true"});
  const double ms = static_cast<double>(monotonic_ns() - t0) / 1e6;
  EXPECT_EQ(r.exit_code, 0) << r.err << " (after " << ms << " ms)";
}

TEST_F(CliTest, RefreshPrintsTheNewTokenAndReportsALostOne) {
  auto a = tl({"acquire", "--pid", std::to_string(::getpid()), lock});
  const std::string token = strip(a.out);
  auto r = tl({"refresh", "--lease", "120", lock, token});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string fresh = strip(r.out);
  EXPECT_NE(fresh, token);
  EXPECT_EQ(entries(lock), std::vector<std::string>{fresh});
  EXPECT_EQ(tl({"refresh", lock, token}).exit_code, code::lost) << "the old name is gone";
  EXPECT_EQ(tl({"release", lock, token}).exit_code, code::lost);
  EXPECT_EQ(entries(lock), std::vector<std::string>{fresh}) << "nothing changed";
  EXPECT_EQ(tl({"release", lock, fresh}).exit_code, 0);
}

TEST_F(CliTest, RejectsTokensThatAreNotTokensOrBelongToAnotherLock) {
  const std::string other = (tmp / "other.lock").string();
  const std::string foreign = strip(tl({"acquire", "--pid", std::to_string(::getpid()), other}).out);
  const std::string mine = strip(tl({"acquire", "--pid", std::to_string(::getpid()), lock}).out);
  auto before = snapshot(tmp.path());
  auto r = tl({"release", lock, foreign});
  EXPECT_EQ(r.exit_code, code::lost);
  EXPECT_NE(r.err.find("belongs to another lock"), std::string::npos) << r.err;
  for (const char* junk : {"lockfile", "../../etc/passwd", "lockfile.1.x.y.z", ""}) {
    r = tl({"release", lock, junk});
    EXPECT_EQ(r.exit_code, code::usage) << junk;
    EXPECT_NE(r.err.find("is not a held token"), std::string::npos) << r.err;
  }
  EXPECT_EQ(tl({"break", lock, "nonsense"}).exit_code, code::usage);
  EXPECT_EQ(snapshot(tmp.path()), before);
  (void)mine;
}

TEST_F(CliTest, StatusSaysWhoHoldsTheLockInWordsAndJson) {
  EXPECT_EQ(lines_of(tl({"status", lock}).out).at(0), "free");
  EXPECT_EQ(tl({"status", "--json", lock}).out.rfind(
                "{\"lock_dir\":\"" + lock + "\",\"state\":\"free\",\"clock\":{", 0),
            0u);
  child owner({"/bin/sh", "-c", "echo up; read x"});
  ASSERT_EQ(owner.read_line(), "up");
  const std::string token = strip(tl({"acquire", "--pid", std::to_string(owner.pid()), lock}).out);
  auto words = tl({"status", lock});
  EXPECT_NE(words.out.find("held by pid " + std::to_string(owner.pid()) + " on this host until"),
            std::string::npos)
      << words.out;
  auto json = tl({"status", "--json", lock}).out;
  for (const std::string& field : std::vector<std::string>{
           "\"state\":\"held\"", "\"token\":\"" + token + "\"", "\"pid\":" + std::to_string(owner.pid()),
        "\"same_host\":true", "\"owner\":\"alive\"", "\"expires\":\"", "\"expires_us\":",
        "\"stale\":false", "\"reason\":\"held by pid"})
    EXPECT_NE(json.find(field), std::string::npos) << field << " in " << json;
  const int owner_pid = owner.pid();
  owner.signal(SIGKILL);
  owner.wait();
  words = tl({"status", lock});
  EXPECT_EQ(words.out.rfind("stale: owner pid " + std::to_string(owner_pid), 0), 0u) << words.out;
  json = tl({"status", "--json", lock}).out;
  EXPECT_NE(json.find("\"state\":\"stale\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"owner\":\"dead\""), std::string::npos) << json;
}

TEST_F(CliTest, StatusSaysHowThisHostsClockComparesWithTheFileServers) {
  // Before the lock directory exists, the clock is measured in its parent.
  auto r = tl({"status", lock});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(lines[1].rfind("clock: this host's clock ", 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find("inside the skew allowance of 1 s"), std::string::npos)
      << "one kernel stamps and reads this filesystem: " << lines[1];
  auto json = tl({"status", "--json", lock}).out;
  for (const std::string& field :
       {"\"clock\":{\"measured_in\":\"" + tmp.path().string() + "\"", std::string("\"offset_us\":"),
        std::string("\"uncertainty_us\":"), std::string("\"skew_allowance_us\":1000000"),
        std::string("\"verdict\":\"within\"}}")})
    EXPECT_NE(json.find(field), std::string::npos) << field << " in " << json;
  // Once it exists, in the lock directory itself, and nothing is left there.
  ASSERT_EQ(tl({"run", lock, "true"}).exit_code, 0);
  json = tl({"status", "--json", lock}).out;
  EXPECT_NE(json.find("\"measured_in\":\"" + lock + "\""), std::string::npos) << json;
  EXPECT_EQ(entries(lock), std::vector<std::string>{"lockfile"});
  EXPECT_EQ(entries(tmp.path()), std::vector<std::string>{"job.lock"});
  // A parent that does not exist: the lock is free, the clock not measured.
  r = tl({"status", (tmp / "missing" / "x.lock").string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(lines[1].rfind("clock: not measured: estimate clock offset in " +
                               (tmp / "missing").string(),
                           0),
            0u)
      << lines[1];
  json = tl({"status", "--json", (tmp / "missing" / "x.lock").string()}).out;
  EXPECT_NE(json.find("\"error\":\"estimate clock offset in"), std::string::npos) << json;
}

TEST_F(CliTest, ClockJudgementsSayPlainlyWhatAnOffsetMeansForLeases) {
  using tokenlock::clock_offset;
  using tokenlock::clock_verdict;
  auto judge_clock = [](const clock_offset& c, std::chrono::microseconds allowance) {
    return tokenlock::judge_clock_offset(c, allowance);
  };
  auto j = judge_clock(clock_offset{2ms, 5ms, 100us, 10ms}, 1s);
  EXPECT_EQ(j.verdict, clock_verdict::within);
  EXPECT_EQ(j.text,
            "this host's clock agrees with the file server's within +/- 0.005 s, inside the skew "
            "allowance of 1 s");
  EXPECT_TRUE(j.fix.empty());
  // The server 3.2 s ahead: this host is behind, beyond any doubt.
  j = judge_clock(clock_offset{3200ms, 5ms, 100us, 10ms}, 1s);
  EXPECT_EQ(j.verdict, clock_verdict::beyond);
  EXPECT_EQ(j.text,
            "this host's clock is 3.2 s behind the file server's (+/- 0.005 s), more than the "
            "skew allowance of 1 s: leases written by other hosts cannot be judged safely");
  EXPECT_NE(j.fix.find("chrony"), std::string::npos) << j.fix;
  j = judge_clock(clock_offset{-1500ms, 5ms, 100us, 10ms}, 1s);
  EXPECT_EQ(j.verdict, clock_verdict::beyond);
  EXPECT_NE(j.text.find("1.5 s ahead of the file server's"), std::string::npos) << j.text;
  // Whole-second stamps (sshfs): 1.2 s +/- 0.5 s may or may not be beyond 1 s.
  j = judge_clock(clock_offset{1200ms, 500ms, 100us, 1s}, 1s);
  EXPECT_EQ(j.verdict, clock_verdict::unclear);
  EXPECT_NE(j.text.find("too coarse to tell"), std::string::npos) << j.text;
  EXPECT_NE(j.text.find("stamps whole seconds"), std::string::npos) << j.text;
  EXPECT_FALSE(j.fix.empty());
}

TEST_F(CliTest, BreakFreesOnlyTheNamedStaleToken) {
  child owner({"/bin/sh", "-c", "echo up; read x"});
  ASSERT_EQ(owner.read_line(), "up");
  const std::string token = strip(tl({"acquire", "--pid", std::to_string(owner.pid()), lock}).out);
  auto before = snapshot(tmp.path());
  auto r = tl({"break", lock, token});
  EXPECT_EQ(r.exit_code, code::busy) << "a live owner's token is refused";
  EXPECT_NE(r.err.find("not stale"), std::string::npos) << r.err;
  EXPECT_EQ(snapshot(tmp.path()), before);
  owner.signal(SIGKILL);
  owner.wait();
  const std::string elsewhere =
      tokenlock::detail::make_token(1, "testhost-0000abcd", 1234, 1, 99);
  EXPECT_EQ(tl({"break", lock, elsewhere}).exit_code, code::lost) << "a token the lock does not hold";
  EXPECT_EQ(entries(lock), std::vector<std::string>{token}) << "any other token is untouched";
  r = tl({"break", lock, token});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(entries(lock), std::vector<std::string>{"lockfile"});
  // --force takes a live one.
  const std::string live = strip(tl({"acquire", "--pid", std::to_string(::getpid()), lock}).out);
  EXPECT_EQ(tl({"break", "--force", lock, live}).exit_code, 0);
  EXPECT_EQ(entries(lock), std::vector<std::string>{"lockfile"});
}

// A legacy script's token ("lockfile<seconds>", --legacy-timeout) is
// broken as a token is: an old one at once, a fresh one with --force only.
TEST_F(CliTest, BreakFreesALegacyScriptsToken) {
  const auto secs = [](std::chrono::seconds ago) {
    return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch() - ago)
                              .count());
  };
  const std::string old_token = "lockfile" + secs(std::chrono::hours(2));
  fs::create_directories(fs::path(lock) / old_token);
  auto r = tl({"break", lock, old_token});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(entries(lock), std::vector<std::string>{"lockfile"});
  fs::remove(fs::path(lock) / "lockfile");
  const std::string fresh = "lockfile" + secs(std::chrono::seconds(0));
  fs::create_directories(fs::path(lock) / fresh);
  const auto before = snapshot(tmp.path());
  r = tl({"break", lock, fresh});
  EXPECT_EQ(r.exit_code, code::busy) << r.err;
  EXPECT_EQ(snapshot(tmp.path()), before) << "a fresh legacy token is refused untouched";
  r = tl({"break", "--force", lock, fresh});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(entries(lock), std::vector<std::string>{"lockfile"});
}

TEST_F(CliTest, IncrAndWriteWaitAsToldForABusyLock) {
  const fs::path f = tmp / "c";
  const std::string lock = (tmp / "c.lock").string();
  const std::string token = strip(tl({"acquire", "--pid", std::to_string(::getpid()), lock}).out);
  auto r = tl({"incr", "-n", f.string()});
  EXPECT_EQ(r.exit_code, code::busy) << r.err;
  const auto start = std::chrono::steady_clock::now();
  r = tl({"write", "--lock", lock, "-w", "0.3", f.string()}, "x\n");
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.exit_code, code::busy) << r.err;
  EXPECT_NE(r.err.find("timed out"), std::string::npos) << r.err;
  EXPECT_GE(waited, std::chrono::milliseconds(300));
  EXPECT_LT(waited, std::chrono::seconds(5)) << "not the 10 s default";
  EXPECT_FALSE(fs::exists(f)) << "nothing written while busy";
  EXPECT_EQ(tl({"incr", "-w", "1", "-n", f.string()}).exit_code, code::usage);
  EXPECT_EQ(tl({"release", lock, token}).exit_code, 0);
  r = tl({"incr", "-n", f.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(strip(r.out), "1");
}

TEST_F(CliTest, WriteReplacesAFileWithStandardInput) {
  const fs::path f = tmp / "config";
  EXPECT_EQ(tl({"write", f.string()}, "first\n").exit_code, 0);
  EXPECT_EQ(slurp(f), "first\n");
  EXPECT_EQ(tl({"write", "--lock", lock, "--sync", "none", f.string()}, "second\n").exit_code, 0);
  EXPECT_EQ(slurp(f), "second\n");
  EXPECT_EQ(entries(lock), std::vector<std::string>{"lockfile"});
  auto r = tl({"write", f.string()}, "");
  EXPECT_EQ(r.exit_code, code::data);
  EXPECT_EQ(slurp(f), "second\n") << "empty input is refused";
  EXPECT_EQ(tl({"write", "--allow-empty", f.string()}, "").exit_code, 0);
  EXPECT_EQ(slurp(f), "");
  EXPECT_EQ(tl({"write", "--mode", "0600", (tmp / "new").string()}, "x").exit_code, 0);
  struct stat st {};
  ::stat((tmp / "new").c_str(), &st);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_TRUE(tokenlock::testing::temp_files_below(tmp.path()).empty());
}

// A script that holds the lock (acquire) commits through its token: the
// commit lands while the token is held, and nothing lands once it is gone.
TEST_F(CliTest, CommitWritesThroughAHeldTokenAndNothingOnceItIsGone) {
  const fs::path f = tmp / "notes";
  spit(f, "old\n");
  const std::string token = strip(tl({"acquire", "--pid", std::to_string(::getpid()), lock}).out);
  auto r = tl({"commit", lock, token, f.string()}, "new\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(slurp(f), "new\n");
  EXPECT_EQ(entries(lock), std::vector<std::string>{token}) << "the lock stays held";
  r = tl({"commit", lock, token, f.string()}, "");
  EXPECT_EQ(r.exit_code, code::data) << "empty input is refused";
  EXPECT_NE(r.err.find("tokenlock commit: standard input was empty"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(f), "new\n");
  const std::string fresh = strip(tl({"refresh", lock, token}).out);
  r = tl({"--errors=json", "commit", lock, token, f.string()}, "late\n");
  EXPECT_EQ(r.exit_code, code::lost) << "the old name is gone";
  EXPECT_NE(r.err.find("{\"error\": \"lock_lost\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("commit " + f.string() + ": nothing was written"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(f), "new\n");
  EXPECT_EQ(tl({"commit", "--sync", "none", lock, fresh, f.string()}, "third\n").exit_code, 0);
  EXPECT_EQ(slurp(f), "third\n");
  EXPECT_EQ(tl({"release", lock, fresh}).exit_code, 0);
  EXPECT_EQ(tl({"commit", lock, fresh, f.string()}, "after\n").exit_code, code::lost);
  EXPECT_EQ(slurp(f), "third\n");
  EXPECT_TRUE(tokenlock::testing::temp_files_below(tmp.path()).empty());
}

// A legacy setup's file token has no room for the fenced temporary file:
// the commit refuses (73) rather than write unfenced.
TEST_F(CliTest, CommitRefusesWhatItCannotFence) {
  fs::create_directories(lock);
  spit(fs::path(lock) / "lockfile", "");
  const fs::path f = tmp / "notes";
  spit(f, "old\n");
  const std::string token = strip(tl({"acquire", "--pid", std::to_string(::getpid()), lock}).out);
  auto r = tl({"--errors=json", "commit", lock, token, f.string()}, "new\n");
  EXPECT_EQ(r.exit_code, code::cant_create) << r.err;
  EXPECT_NE(r.err.find("\"not_fenced\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is a file, not a directory"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(f), "old\n");
  EXPECT_EQ(entries(lock), std::vector<std::string>{token}) << "the lock stays held";
  EXPECT_EQ(tl({"commit", lock, "lockfile", f.string()}, "x").exit_code, code::usage);
  EXPECT_EQ(slurp(f), "old\n");
  EXPECT_EQ(tl({"release", lock, token}).exit_code, 0);
  EXPECT_TRUE(tokenlock::testing::temp_files_below(tmp.path()).empty());
}

TEST_F(CliTest, AnInterruptedOrKilledWriteLeavesTheFileAsItWas) {
  const fs::path f = tmp / "data";
  spit(f, "the old contents\n");
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGKILL}) {
    tokenlock::sweep_temp_files(tmp.path(), 0s);  // what an earlier SIGKILL left
    child w({tool, "write", f.string()});
    w.write_line(std::string(100000, 'x'));  // part of the input, then no end
    // The data reaching the temporary file shows the write is mid-stream.
    const std::int64_t give_up = monotonic_ns() + 10'000'000'000LL;
    while (tokenlock::testing::temp_files_below(tmp.path()).empty() && monotonic_ns() < give_up)
      std::this_thread::sleep_for(1ms);  // polling a condition
    w.signal(sig);
    int status = w.wait();
    EXPECT_EQ(slurp(f), "the old contents\n") << "signal " << sig;
    if (sig != SIGKILL) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + sig);
      EXPECT_TRUE(tokenlock::testing::temp_files_below(tmp.path()).empty()) << "rolled back";
    }
  }
  tokenlock::sweep_temp_files(tmp.path(), 0s);
  EXPECT_TRUE(tokenlock::testing::temp_files_below(tmp.path()).empty());
}

TEST_F(CliTest, WriteAndIncrGiveClearErrorsForBadFiles) {
  fs::create_directories(tmp / "dir");
  auto before = snapshot(tmp.path());
  auto r = tl({"write", (tmp / "dir").string()}, "x");
  EXPECT_EQ(r.exit_code, code::cant_create);
  EXPECT_NE(r.err.find("is a directory"), std::string::npos) << r.err;
  r = tl({"write", (tmp / "missing" / "f").string()}, "x");
  EXPECT_EQ(r.exit_code, code::no_input);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  EXPECT_EQ(snapshot(tmp.path()), before);
  spit(tmp / "c", "12 apples\n");
  r = tl({"incr", (tmp / "c").string()});
  EXPECT_EQ(r.exit_code, code::data);
  EXPECT_EQ(slurp(tmp / "c"), "12 apples\n");
  // Two tokens in the lock directory: a state that needs a human.
  fs::create_directories(tmp / "bad.lock" / tokenlock::detail::make_token(4102444800000000, "h-0000abcd", 1, 1, 1));
  fs::create_directories(tmp / "bad.lock" / tokenlock::detail::make_token(4102444800000000, "h-0000abcd", 1, 1, 2));
  r = tl({"incr", "--lock", (tmp / "bad.lock").string(), (tmp / "d").string()});
  EXPECT_EQ(r.exit_code, code::unavailable) << r.err;
  EXPECT_FALSE(fs::exists(tmp / "d"));
}

TEST_F(CliTest, AnUnwritableLockDirectoryIsAPermissionError) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as another user";
  fs::permissions(tmp.path(), fs::perms(0755));
  tl({"run", lock, "true"});  // root creates the lock directory
  auto before = snapshot(tmp.path());
  auto r = tl({"run", lock, "true"}, {}, 65534);
  EXPECT_EQ(r.exit_code, code::no_perm) << r.err;
  EXPECT_NE(r.err.find("needs write and search permission"), std::string::npos) << r.err;
  r = tl({"incr", (tmp / "c").string()}, {}, 65534);
  EXPECT_EQ(r.exit_code, code::no_perm) << r.err;
  EXPECT_EQ(snapshot(tmp.path()), before);
}

TEST_F(CliTest, IncrPrintsTheNewValue) {
  const std::string c = (tmp / "hits").string();
  EXPECT_EQ(strip(tl({"incr", c}).out), "1");
  EXPECT_EQ(strip(tl({"incr", "--by", "41", c}).out), "42");
  EXPECT_EQ(strip(tl({"incr", "--by", "0", c}).out), "42");
  EXPECT_TRUE(fs::is_directory(c + ".lock")) << "the default lock is FILE.lock";
  EXPECT_EQ(slurp(c), "42\n");
}

// A directory its user can write but not read (mode 0333, as upload drop
// directories are) cannot be opened, so it cannot be flushed: a real
// dir_sync_failed. The count is made then, so incr must print it, or a
// caller would either lose the value or count the hit twice.
TEST_F(CliTest, AnUnflushableDirectoryStillGivesTheCountAndSaysHowToFixIt) {
  const bool root = ::geteuid() == 0;
  const int uid = root ? 65534 : -1;  // root opens any directory
  fs::permissions(tmp.path(), fs::perms(0755));
  const fs::path drop = tmp / "drop";
  fs::create_directories(drop);
  fs::permissions(drop, fs::perms(0333));
  const std::string c = (drop / "hits").string();
  for (const char* want : {"1", "2"}) {
    auto r = tl({"incr", c}, {}, uid);
    EXPECT_EQ(r.exit_code, code::io_error) << r.err;
    EXPECT_EQ(strip(r.out), want);
    EXPECT_NE(r.err.find("sync " + c + ": the update is committed, but flushing the directory " +
                         drop.string() + " failed (Permission denied)"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("do not repeat the update; give this user read permission on " +
                         drop.string()),
              std::string::npos)
        << r.err;
  }
  auto w = tl({"write", (drop / "page").string()}, "new\n", uid);
  EXPECT_EQ(w.exit_code, code::io_error) << w.err;
  EXPECT_NE(w.err.find("the new contents are in place, but flushing"), std::string::npos) << w.err;
  // The fix the message offers works.
  auto f = tl({"incr", "--sync", "file", c}, {}, uid);
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(strip(f.out), "3");
  fs::permissions(drop, fs::perms(0755));
  EXPECT_EQ(slurp(c), "3\n");
  EXPECT_EQ(slurp(drop / "page"), "new\n");
  EXPECT_EQ(entries(drop), (std::vector<std::string>{"hits", "hits.lock", "page"}))
      << "a temporary file was left";
  EXPECT_EQ(entries(drop / "hits.lock"), std::vector<std::string>{"lockfile"});
}

TEST_F(CliTest, SixteenShellLoopsOfIncrWithRandomKillsLoseNothing) {
  const std::string c = (tmp / "hits").string();
  const int loops = 16, per_loop = 25, kills = 8;
  std::vector<child> shells;
  for (int i = 0; i < loops; ++i)
    shells.emplace_back(std::vector<std::string>{
        "/bin/sh", "-c",
        "i=0; while [ $i -lt " + std::to_string(per_loop) + " ]; do '" + tool + "' incr '" + c +
            "' >> '" + (tmp / ("log." + std::to_string(i))).string() + "'; i=$((i+1)); done"});
  std::mt19937 rng(std::random_device{}());
  int killed = 0;
  for (int k = 0; k < kills; ++k) {
    // A random moment, then whoever holds the lock (a tokenlock process).
    const std::int64_t give_up = monotonic_ns() + 10'000'000'000LL;
    const auto start_value = tokenlock::read_counter(c).value_or(0);
    while (tokenlock::read_counter(c).value_or(0) < start_value + 1 + rng() % 10 &&
           monotonic_ns() < give_up)
      std::this_thread::sleep_for(1ms);  // polling a condition
    const int pid = holder_pid(c + ".lock");
    if (pid > 0 && ::kill(pid, SIGKILL) == 0) ++killed;
  }
  for (auto& s : shells) s.wait();
  std::size_t successes = 0;
  std::set<std::string> values;
  for (int i = 0; i < loops; ++i)
    for (const auto& line : lines_of(slurp(tmp / ("log." + std::to_string(i))))) {
      ++successes;
      values.insert(line);
    }
  EXPECT_EQ(values.size(), successes) << "two increments printed the same value";
  const auto final_value = tokenlock::read_counter(c).value_or(0);
  EXPECT_GE(final_value, successes);
  EXPECT_LE(final_value - successes, static_cast<std::uint64_t>(killed));
  EXPECT_GT(killed, 0);
  RecordProperty("killed", killed);
}

}  // namespace
