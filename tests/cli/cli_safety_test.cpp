// The tokenlock command against what a careless or hostile environment can
// do to it: leases that would let a second holder in, lock directories
// shared with a group, `kill -9` of run, a release that fails, the file
// size limit, and file names full of control bytes. Real processes, real
// signals, real limits.
#include <gtest/gtest.h>

#include <csignal>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/filesystem.hpp>

#include "child.hpp"
#include "cli.hpp"
#include "inspect.hpp"
#include "temp_dir.hpp"
#include "lockdir/token_name.hpp"

namespace fs = boost::filesystem;
using tokenlock::testing::child;
using tokenlock::testing::command_result;
using tokenlock::testing::entries;
using tokenlock::testing::lines_of;
using tokenlock::testing::run_command;
using tokenlock::testing::slurp;
using tokenlock::testing::snapshot;
using tokenlock::testing::spit;
using tokenlock::testing::strip;
using tokenlock::testing::temp_dir;
using tokenlock::testing::temp_files_below;
namespace code = tokenlock::cli::exit_code;

namespace {

const std::string tool = TOKENLOCK_CLI_PATH;

unsigned mode_of(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

class CliSafetyTest : public ::testing::Test {
 protected:
  temp_dir tmp;
  std::string lock = (tmp / "job.lock").string();

  command_result tl(std::vector<std::string> args, const std::string& input = {}, int uid = -1) {
    args.insert(args.begin(), tool);
    return run_command(args, input, uid);
  }
  // A shell snippet with $T set to the tokenlock binary, run in tmp.
  command_result sh(const std::string& script, const std::string& input = {}, int uid = -1) {
    return run_command({"/bin/sh", "-c", "cd '" + tmp.path().string() + "' && T='" + tool + "'; " + script},
                       input, uid);
  }
  // The lock is free: a non-blocking acquire by this process gets it.
  void expect_free(const std::string& lock_dir) {
    auto r = tl({"acquire", "-n", "--pid", std::to_string(::getpid()), lock_dir});
    ASSERT_EQ(r.exit_code, 0) << lock_dir << " is not free: " << r.err;
    EXPECT_EQ(tl({"release", lock_dir, strip(r.out)}).exit_code, 0);
  }
};

// ---- 1. The lease bound ------------------------------------------------

TEST_F(CliSafetyTest, EveryLeaseOutsideTheProtocolsBoundIsAUsageErrorInEveryForm) {
  const std::string token = tokenlock::detail::make_token(4102444800000000, "h-0000abcd", 1, 1, 1);
  // A Redis server that is never contacted: the value is refused first.
  const std::string redis = "redis://127.0.0.1:1";
  const auto before = snapshot(tmp.path());
  for (const std::string value : {"0", "-1", "-0.5", "abc", "", "nan", "inf", "-inf", "1e-9",
                                  "0.0004", "86400.5", "90000", "31536000", "1e300"}) {
    const std::string lease = "--lease=" + value;
    const std::vector<std::vector<std::string>> forms = {
        {"run", lease, lock, "--", "true"},
        {"acquire", lease, "--pid", std::to_string(::getpid()), lock},
        {"refresh", lease, lock, token},
        {"run", "--redis", redis, lease, "name", "--", "true"},
        {"acquire", "--redis", redis, lease, "name"},
        {"refresh", "--redis", redis, lease, "name", "7.owner"},
    };
    for (const auto& form : forms) {
      auto r = tl(form);
      EXPECT_EQ(r.exit_code, code::usage) << form[0] << " " << lease << ": " << r.err;
      EXPECT_NE(r.err.find("--lease"), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("--help"), std::string::npos) << r.err;
    }
  }
  // The value as a separate argument.
  EXPECT_EQ(tl({"run", "--lease", "-1", lock, "true"}).exit_code, code::usage);
  EXPECT_EQ(tl({"run", "--lease", "86401", lock, "true"}).exit_code, code::usage);
  auto r = tl({"run", "--lease=1e-9", lock, "true"});
  EXPECT_NE(r.err.find("from 0.001 to 86400"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("24 hours, the protocol's bound"), std::string::npos) << r.err;
  EXPECT_EQ(snapshot(tmp.path()), before) << "a refused lease changes nothing";
  // The bounds themselves are leases.
  EXPECT_EQ(tl({"run", "--lease=0.001", lock, "true"}).exit_code, 0);
  EXPECT_EQ(tl({"run", "--lease=86400", lock, "true"}).exit_code, 0);
}

TEST_F(CliSafetyTest, ARunWithTheLongestLeaseKeepsASecondRunOut) {
  const std::string go = (tmp / "go").string();
  ASSERT_EQ(::mkfifo(go.c_str(), 0600), 0);
  child holder({tool, "run", "--lease", "86400", lock, "--", "/bin/sh", "-c",
                "echo held; read x < '" + go + "'"});
  ASSERT_EQ(holder.read_line(), "held");  // the command runs: the lock is held
  auto second = tl({"run", "-n", lock, "echo", "SECOND"});
  EXPECT_EQ(second.exit_code, code::busy) << second.err;
  EXPECT_EQ(second.out.find("SECOND"), std::string::npos) << "a second holder got in";
  // Its token says 24 hours, and every process finds that plausible.
  auto status = tl({"status", "--json", lock});
  EXPECT_NE(status.out.find("\"state\":\"held\""), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("\"stale\":false"), std::string::npos) << status.out;
  EXPECT_EQ(tl({"acquire", "-n", "--pid", std::to_string(::getpid()), lock}).exit_code, code::busy);
  spit(go, "go\n");
  int st = holder.wait();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  EXPECT_EQ(entries(lock), std::vector<std::string>{"lockfile"});
}

// ---- 2. Group sharing: --dir-mode and TOKENLOCK_DIR_MODE ---------------

TEST_F(CliSafetyTest, DirModeIsTheModeOfTheLockDirectoryEveryCommandCreates) {
  const std::string me = std::to_string(::getpid());
  EXPECT_EQ(tl({"run", "--dir-mode", "0770", (tmp / "run.lock").string(), "true"}).exit_code, 0);
  EXPECT_EQ(mode_of(tmp / "run.lock"), 0770u);
  auto a = tl({"acquire", "--dir-mode", "0750", "--pid", me, (tmp / "acq.lock").string()});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(mode_of(tmp / "acq.lock"), 0750u);
  auto f = tl({"refresh", "--dir-mode", "0750", (tmp / "acq.lock").string(), strip(a.out)});
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(tl({"status", "--dir-mode", "0750", (tmp / "acq.lock").string()}).exit_code, 0);
  EXPECT_EQ(tl({"break", "--force", "--dir-mode", "0750", (tmp / "acq.lock").string(), strip(f.out)})
                .exit_code,
            0);
  a = tl({"acquire", "--pid", me, (tmp / "acq.lock").string()});
  EXPECT_EQ(tl({"release", "--dir-mode", "0750", (tmp / "acq.lock").string(), strip(a.out)}).exit_code, 0);
  EXPECT_EQ(tl({"incr", "--dir-mode", "02775", (tmp / "hits").string()}).exit_code, 0);
  EXPECT_EQ(mode_of(tmp / "hits.lock"), 02775u);
  EXPECT_EQ(tl({"write", "--lock", (tmp / "w.lock").string(), "--dir-mode", "0700",
                (tmp / "page").string()},
               "x\n")
                .exit_code,
            0);
  EXPECT_EQ(mode_of(tmp / "w.lock"), 0700u);
  // The environment is the default; the option wins over it.
  auto r = sh("TOKENLOCK_DIR_MODE=0770 $T run env.lock true && "
              "TOKENLOCK_DIR_MODE=0770 $T run --dir-mode 0750 opt.lock true && "
              "TOKENLOCK_DIR_MODE=0770 $T incr c && TOKENLOCK_DIR_MODE= $T run empty.lock true");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(mode_of(tmp / "env.lock"), 0770u);
  EXPECT_EQ(mode_of(tmp / "opt.lock"), 0750u);
  EXPECT_EQ(mode_of(tmp / "c.lock"), 0770u);
  EXPECT_EQ(mode_of(tmp / "empty.lock"), 0755u) << "empty means the default";
  EXPECT_TRUE(temp_files_below(tmp.path()).empty());
}

TEST_F(CliSafetyTest, ABadDirModeIsAUsageErrorForEveryCommandThatTakesALockDirectory) {
  const std::string token = tokenlock::detail::make_token(4102444800000000, "h-0000abcd", 1, 1, 1);
  const std::string file = (tmp / "f").string();
  const auto before = snapshot(tmp.path());
  for (const std::string mode : {"abc", "", "0800", "9", "017777", "0777", "0757", "0666", "0555",
                                 "0400", "01775", "-0755"}) {
    const std::string opt = "--dir-mode=" + mode;
    const std::vector<std::vector<std::string>> forms = {
        {"run", opt, lock, "true"},        {"acquire", opt, lock},
        {"release", opt, lock, token},     {"refresh", opt, lock, token},
        {"status", opt, lock},             {"break", opt, lock, token},
        {"incr", opt, file},               {"incr", "--lock", lock, opt, file},
        {"write", "--lock", lock, opt, file},
    };
    for (const auto& form : forms) {
      auto r = tl(form, "x\n");
      EXPECT_EQ(r.exit_code, code::usage) << form[0] << " " << opt << ": " << r.err;
      EXPECT_NE(r.err.find("--dir-mode"), std::string::npos) << r.err;
    }
    // The same values from the environment (where empty means unset).
    if (mode.empty()) continue;
    auto r = sh("TOKENLOCK_DIR_MODE='" + mode + "' $T run job.lock true");
    EXPECT_EQ(r.exit_code, code::usage) << mode << ": " << r.err;
    EXPECT_NE(r.err.find("TOKENLOCK_DIR_MODE"), std::string::npos) << r.err;
  }
  auto r = tl({"run", "--dir-mode", "0777", lock, "true"});
  EXPECT_NE(r.err.find("writable by others"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("0775"), std::string::npos) << "the message says how to share: " << r.err;
  // No meaning without a lock directory.
  EXPECT_EQ(tl({"write", "--dir-mode", "0775", file}, "x\n").exit_code, code::usage);
  EXPECT_EQ(tl({"run", "--redis", "redis://127.0.0.1:1", "--dir-mode", "0775", "n", "true"}).exit_code,
            code::usage);
  EXPECT_EQ(snapshot(tmp.path()), before) << "nothing was created";
  // A bad TOKENLOCK_DIR_MODE does not concern a write without a lock.
  r = sh("TOKENLOCK_DIR_MODE=0777 $T write f", "x\n");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(slurp(file), "x\n");
}

// ---- 3. kill -9 of run -------------------------------------------------

// The state letter of /proc/PID/stat ("gone" when there is no such
// process), read by the second command while it holds the lock.
const char* probe_script =
    "p=$(cat \"$1\"); s=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -c1); "
    "[ -n \"$s\" ] || s=gone; echo \"$s\" > \"$2\"";

TEST_F(CliSafetyTest, KillingRunKillsItsCommandBeforeAnyoneElseGetsTheLock) {
  const std::string pid_file = (tmp / "pid").string(), state = (tmp / "state").string();
  const std::string never = (tmp / "never").string();
  ASSERT_EQ(::mkfifo(never.c_str(), 0600), 0);  // nobody ever writes it
  for (int round = 0; round < 5; ++round) {
    child run({tool, "run", lock, "--", "/bin/sh", "-c",
               "echo $$ > '" + pid_file + "'; echo started; read x < '" + never + "'"});
    ASSERT_EQ(run.read_line(), "started");
    const std::string command_pid = strip(slurp(pid_file));
    auto status = tl({"status", lock});
    EXPECT_NE(status.out.find("held by pid " + command_pid + " "), std::string::npos)
        << "the token names the command's process: " << status.out;
    run.signal(SIGKILL);
    run.wait();
    // Bounded: -w 10 against a lease of 60 s; only the command's death
    // frees the lock in time.
    auto second = tl({"run", "-w", "10", lock, "--", "/bin/sh", "-c", probe_script, "probe",
                      pid_file, state});
    ASSERT_EQ(second.exit_code, 0) << "round " << round << ": " << second.err;
    const std::string seen = strip(slurp(state));
    EXPECT_TRUE(seen == "gone" || seen == "Z" || seen == "X")
        << "round " << round << ": the first command (pid " << command_pid
        << ") was still running, state " << seen << ", when the second got the lock";
    EXPECT_EQ(entries(lock), std::vector<std::string>{"lockfile"});
  }
}

TEST_F(CliSafetyTest, ARunKilledWhileWaitingNeverStartsItsCommand) {
  const std::string go = (tmp / "go").string(), ran = (tmp / "ran").string();
  ASSERT_EQ(::mkfifo(go.c_str(), 0600), 0);
  child holder({tool, "run", lock, "--", "/bin/sh", "-c", "echo held; read x < '" + go + "'"});
  ASSERT_EQ(holder.read_line(), "held");
  // The waiting run's command process exists from the start (it is
  // forked before the lock is taken): kill run once it is there.
  child waiter({tool, "run", "-w", "60", "-v", lock, "--", "/bin/sh", "-c", "echo ran > '" + ran + "'"});
  const std::string children = "/proc/" + std::to_string(waiter.pid()) + "/task/" +
                               std::to_string(waiter.pid()) + "/children";
  const std::int64_t give_up = tokenlock::testing::monotonic_ns() + 10'000'000'000LL;
  std::string kids;
  while ((kids = strip(slurp(children))).empty() && tokenlock::testing::monotonic_ns() < give_up) {
    ::usleep(1000);  // polling a condition
  }
  ASSERT_FALSE(kids.empty()) << "run forks its command's process before it waits";
  const std::string kid = kids.substr(0, kids.find(' '));
  waiter.signal(SIGKILL);
  waiter.wait();
  // The command's process learns of run's death from the kernel, a moment
  // after run is reaped: wait (bounded) for it to end, then look at what
  // it did.
  const std::int64_t end_by = tokenlock::testing::monotonic_ns() + 10'000'000'000LL;
  std::string stat;
  while (!(stat = slurp("/proc/" + kid + "/stat")).empty() && stat.find(") Z") == std::string::npos &&
         tokenlock::testing::monotonic_ns() < end_by) {
    ::usleep(1000);  // polling a condition
  }
  EXPECT_TRUE(stat.empty() || stat.find(") Z") != std::string::npos)
      << "the command's process outlived its run by 10 s: " << stat;
  spit(go, "go\n");
  EXPECT_EQ(WEXITSTATUS(holder.wait()), 0);
  expect_free(lock);  // the waiting process died without the lock
  EXPECT_FALSE(fs::exists(ran)) << "the command ran although its run never got the lock";
}

// The token names the command's process, so a waiter may take the lock
// over in the moment between the command's end and run's release. That is
// no loss: run must not report one.
TEST_F(CliSafetyTest, ContendedRunsReportNoLossWhenTheNextHolderComesAfterTheCommandEnded) {
  const int shells = 6, per_shell = 40;
  std::vector<child> loops;
  for (int i = 0; i < shells; ++i)
    loops.emplace_back(std::vector<std::string>{
        "/bin/sh", "-c",
        "i=0; while [ $i -lt " + std::to_string(per_shell) + " ]; do '" + tool + "' run -w 30 '" +
            lock + "' -- sh -c 'echo in >> \"$0\"' '" + (tmp / ("log." + std::to_string(i))).string() +
            "' 2>> '" + (tmp / ("err." + std::to_string(i))).string() + "' || echo \"exit $?\"; " +
            "i=$((i+1)); done; echo done"});
  for (int i = 0; i < shells; ++i) {
    EXPECT_EQ(loops[static_cast<std::size_t>(i)].read_line(std::chrono::seconds(120)), "done");
    EXPECT_EQ(lines_of(slurp(tmp / ("log." + std::to_string(i)))).size(),
              static_cast<std::size_t>(per_shell));
    EXPECT_EQ(slurp(tmp / ("err." + std::to_string(i))), "") << "shell " << i;
  }
  for (auto& l : loops) l.wait();
  EXPECT_EQ(entries(lock), std::vector<std::string>{"lockfile"});
}

// ---- 4. A release that fails -------------------------------------------

// As a user whom permissions bind (nobody when the tests run as root):
// the command makes the lock directory read-only, so run's release fails
// with EACCES.
TEST_F(CliSafetyTest, ARunWhoseReleaseFailsSaysSoAndNeverExitsZero) {
  const bool root = ::geteuid() == 0;
  const int uid = root ? 65534 : -1;
  fs::permissions(tmp.path(), fs::perms(0755));
  const fs::path own = tmp / "own";
  fs::create_directories(own);
  if (root) {
    ASSERT_EQ(::chown(own.c_str(), 65534, 65534), 0);
  }
  const std::string l = (own / "job.lock").string();
  for (int status : {0, 5}) {
    auto r = tl({"run", l, "--", "/bin/sh", "-c",
                 "chmod 0555 '" + l + "'; exit " + std::to_string(status)},
                {}, uid);
    EXPECT_EQ(r.exit_code, status == 0 ? code::no_perm : status) << r.err;
    EXPECT_NE(r.err.find("Permission denied"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("could not be released"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(l), std::string::npos) << "the message names the lock: " << r.err;
    EXPECT_EQ(r.err.find("was lost"), std::string::npos) << r.err;
    // Permissions back: the token names a dead process, so the lock is
    // free for the next process, and it is one token.
    fs::permissions(l, fs::perms(0755));
    auto next = tl({"run", "-n", l, "true"}, {}, uid);
    EXPECT_EQ(next.exit_code, 0) << next.err;
    EXPECT_EQ(entries(l), std::vector<std::string>{"lockfile"});
  }
  EXPECT_TRUE(temp_files_below(tmp.path()).empty());
}

// A lost lock is said on stderr, and the status is the command's when it
// failed, 3 when it succeeded (as before).
TEST_F(CliSafetyTest, ARunWhoseLockIsLostKeepsTheCommandsFailureOrExitsThree) {
  for (int status : {0, 5}) {
    const std::string go = (tmp / ("go" + std::to_string(status))).string();
    ASSERT_EQ(::mkfifo(go.c_str(), 0600), 0);
    child run({tool, "run", "--lease", "0.3", lock, "--", "/bin/sh", "-c",
               "echo started; read x < '" + go + "'; exit " + std::to_string(status)});
    ASSERT_EQ(run.read_line(), "started");
    run.signal(SIGSTOP);  // run itself: it cannot refresh, and the lease ends
    auto thief = tl({"acquire", "-w", "5", "--pid", std::to_string(::getpid()), lock});
    ASSERT_EQ(thief.exit_code, 0) << thief.err;
    run.signal(SIGCONT);
    spit(go, "go\n");
    int st = run.wait();
    ASSERT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), status == 0 ? code::lost : status);
    EXPECT_EQ(entries(lock), std::vector<std::string>{strip(thief.out)}) << "the thief keeps it";
    EXPECT_EQ(tl({"release", lock, strip(thief.out)}).exit_code, 0);
  }
}

// ---- 5. The file size limit --------------------------------------------

TEST_F(CliSafetyTest, AWritePastTheFileSizeLimitFailsCleanlyAndReleasesTheLock) {
  const fs::path f = tmp / "data", c = tmp / "hits";
  spit(f, "the old contents\n");
  spit(c, "41\n");
  const std::string big(100000, 'x');
  struct attempt {
    std::string script, target, lock;
  };
  for (const attempt& a : std::vector<attempt>{
           {"exec $T write data", f.string(), ""},
           {"exec $T write --lock data.lock data", f.string(), (tmp / "data.lock").string()},
           {"exec $T incr hits", c.string(), (tmp / "hits.lock").string()},
       }) {
    const std::string before = slurp(a.target);
    auto r = sh("ulimit -f 0; " + a.script, big);
    EXPECT_EQ(r.exit_code, code::cant_create) << a.script << ": " << r.err;
    EXPECT_NE(r.err.find("file too large"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("ulimit -f"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("RLIMIT_FSIZE"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(fs::path(a.target).filename().string() + ": file too large"),
              std::string::npos)
        << "names the file: " << r.err;
    EXPECT_EQ(slurp(a.target), before) << a.script;
    EXPECT_TRUE(temp_files_below(tmp.path()).empty()) << a.script;
    if (!a.lock.empty()) {
      EXPECT_EQ(entries(a.lock), std::vector<std::string>{"lockfile"}) << a.script;
      EXPECT_TRUE(entries(fs::path(a.lock) / "lockfile").empty()) << "workspace emptied";
      expect_free(a.lock);
    }
  }
  // Without the limit the same commands work.
  EXPECT_EQ(strip(tl({"incr", c.string()}).out), "42");
}

TEST_F(CliSafetyTest, RunGivesItsCommandTheDefaultFileSizeSignal) {
  // tokenlock ignores SIGXFSZ; the command gets it back, so it is killed
  // by it as it would be without run.
  auto r = sh("ulimit -f 0; $T run job.lock -- /bin/sh -c 'echo x > out'");
  EXPECT_EQ(r.exit_code, 128 + SIGXFSZ) << r.err;
  EXPECT_EQ(entries(lock), std::vector<std::string>{"lockfile"});
}

// ---- 6. Control bytes in names -----------------------------------------

TEST_F(CliSafetyTest, ControlBytesInNamesAreEscapedInEveryMessage) {
  const fs::path bad = tmp / "bad.lock";
  fs::create_directories(bad / "evil\x1b[2Jname\nforged line\xff");
  const auto before = snapshot(tmp.path());
  const std::vector<std::vector<std::string>> forms = {
      {"run", "-n", bad.string(), "true"},
      {"acquire", "-n", bad.string()},
      {"incr", "--lock", bad.string(), (tmp / "c").string()},
      {"write", "--lock", bad.string(), (tmp / "w").string()},
  };
  for (const auto& form : forms) {
    auto r = tl(form, "x\n");
    EXPECT_EQ(r.exit_code, code::unavailable) << form[0] << ": " << r.err;
    EXPECT_NE(r.err.find("evil\\x1b[2Jname\\x0aforged line\\xff"), std::string::npos) << r.err;
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.back(), '\n');
    const std::string body = r.err.substr(0, r.err.size() - 1);
    for (unsigned char ch : body)
      EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << form[0] << ": raw byte " << int(ch) << " in " << r.err;
  }
  // A path and a value from the command line too.
  auto r = tl({"write", (tmp / "a\x1b" "b" / "f").string()}, "x\n");
  EXPECT_EQ(r.exit_code, code::no_input) << r.err;
  EXPECT_NE(r.err.find("a\\x1bb"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  r = tl({"run", "--lease", "zz\x1b", lock, "true"});
  EXPECT_EQ(r.exit_code, code::usage);
  EXPECT_NE(r.err.find("zz\\x1b"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_EQ(snapshot(tmp.path()), before);
  EXPECT_EQ(tokenlock::cli::escaped("a\tb\x7f\xc3\xa9 ok"), "a\\x09b\\x7f\\xc3\\xa9 ok");
}

// ---- Secrets off the command line ------------------------------------------

TEST_F(CliSafetyTest, AServerUrlFromTheEnvironmentIsUsedAndItsPasswordNeverShown) {
  // Nothing listens on port 1: the command reaches the server named by the
  // variable, and its message names the server without the password.
  auto r = sh("TL_URL='redis://:pw-s3cret@127.0.0.1:1' $T run --redis env:TL_URL -n n true");
  EXPECT_EQ(r.exit_code, code::unavailable) << r.err;
  EXPECT_NE(r.err.find("127.0.0.1:1"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("pw-s3cret"), std::string::npos) << r.err;
  r = tl({"run", "--redis", "env:TL_NOT_SET_ANYWHERE", "-n", "n", "true"});
  EXPECT_EQ(r.exit_code, code::usage) << r.err;
  EXPECT_NE(r.err.find("TL_NOT_SET_ANYWHERE is not set"), std::string::npos) << r.err;
}

TEST_F(CliSafetyTest, AServerUrlFileMustBeTheCallersAndPrivate) {
  const fs::path url = tmp / "redis.url";
  spit(url, "redis://:pw-s3cret@127.0.0.1:1\nsecond line ignored\n");
  ASSERT_EQ(::chmod(url.c_str(), 0644), 0);
  auto r = tl({"acquire", "-n", "--redis", "file:" + url.string(), "n"});
  EXPECT_EQ(r.exit_code, code::usage) << r.err;
  EXPECT_NE(r.err.find("chmod 600"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("pw-s3cret"), std::string::npos) << r.err;
  ASSERT_EQ(::chmod(url.c_str(), 0600), 0);
  r = tl({"acquire", "-n", "--redis", "file:" + url.string(), "n"});
  EXPECT_EQ(r.exit_code, code::unavailable) << "the file's first line was used: " << r.err;
  EXPECT_EQ(r.err.find("pw-s3cret"), std::string::npos) << r.err;
  // A link is not followed, and a FIFO is refused without waiting for a
  // writer.
  fs::create_symlink(url, tmp / "link.url");
  r = tl({"acquire", "-n", "--redis", "file:" + (tmp / "link.url").string(), "n"});
  EXPECT_EQ(r.exit_code, code::usage) << r.err;
  EXPECT_NE(r.err.find("symbolic link"), std::string::npos) << r.err;
  ASSERT_EQ(::mkfifo((tmp / "fifo.url").c_str(), 0600), 0);
  r = tl({"acquire", "-n", "--etcd", "file:" + (tmp / "fifo.url").string(), "n"});
  EXPECT_EQ(r.exit_code, code::usage) << r.err;
  EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
}

// ---- One group, named --------------------------------------------------------

TEST_F(CliSafetyTest, AGroupIsTrustedOnlyWhenNamedAndOnlyByAMember) {
  auto r = tl({"acquire", "-n", "--group", "no-such-group-of-tokenlock", lock});
  EXPECT_EQ(r.exit_code, code::usage) << r.err;
  EXPECT_FALSE(fs::exists(lock));
  r = sh("TOKENLOCK_GROUP=" + std::to_string(::getegid()) + " $T acquire -n --pid $$ job.lock");
  ASSERT_EQ(r.exit_code, code::ok) << r.err;
  struct stat st {};
  ASSERT_EQ(::stat(lock.c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, ::getegid());
  EXPECT_EQ(mode_of(lock), 0775u);
  // That group-writable directory, without the group named: refused.
  r = tl({"status", lock});
  EXPECT_EQ(r.exit_code, code::no_perm) << r.err;
  EXPECT_NE(r.err.find("TOKENLOCK_GROUP=G"), std::string::npos) << r.err;
  EXPECT_EQ(tl({"run", "--redis", "redis://127.0.0.1:1", "--group", "0", "n", "true"}).exit_code,
            code::usage);
}

TEST_F(CliSafetyTest, StatusJsonIsValidJsonForAPathThatIsNotUtf8) {
  const fs::path odd = tmp / "\xff\xfe";
  fs::create_directory(odd);
  auto r = tl({"status", "--json", (odd / "L").string()});
  ASSERT_EQ(r.exit_code, code::ok) << r.err;
  EXPECT_NE(r.out.find("\\\\xff\\\\xfe/L\""), std::string::npos) << r.out;
  for (unsigned char c : r.out) EXPECT_LT(c, 0x80) << "only ASCII here: " << r.out;
  r = tl({"status", "--json", (tmp / "caf\xc3\xa9" / "L").string()});
  EXPECT_NE(r.out.find("caf\xc3\xa9/L\""), std::string::npos) << "UTF-8 as it is: " << r.out;
}

}  // namespace
