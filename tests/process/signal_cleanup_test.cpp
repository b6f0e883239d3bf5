// install_signal_cleanup() with real processes and real signals: a worker
// holds a lock (refreshed once) and an unfinished atomic write, and is told
// to stop.
#include <gtest/gtest.h>

#include <csignal>
#include <string>
#include <vector>

#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.hpp"
#include "inspect.hpp"
#include "temp_dir.hpp"

using tokenlock::testing::child;
using tokenlock::testing::entries;
using tokenlock::testing::slurp;
using tokenlock::testing::spit;
using tokenlock::testing::temp_dir;
using tokenlock::testing::temp_files_below;

namespace {

struct worker_setup {
  temp_dir tmp;
  boost::filesystem::path lock = tmp / "lock";
  boost::filesystem::path target = tmp / "data";
  worker_setup() { spit(target, "old"); }

  child start(bool install, bool ignore_hup = false, bool fork = false,
              const std::string& fs_type = {}) {
    std::vector<std::string> args{LOCK_WORKER_PATH, "--lock", lock.string(), "signal-cleanup",
                                  target.string(), install ? "1" : "0", ignore_hup ? "1" : "0",
                                  fork ? "1" : "0"};
    if (!fs_type.empty()) args.push_back(fs_type);
    return child(args);
  }
};

std::string token_of(const std::string& ready_line) {
  EXPECT_EQ(ready_line.rfind("ready ", 0), 0u) << ready_line;
  return ready_line.substr(6);
}

// Blocks until process `pid` (not our child) has ended.
void wait_for_end(pid_t pid) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  ASSERT_GE(fd, 0) << "pidfd_open";
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 30000), 1) << "the process did not end";
  ::close(fd);
}

}  // namespace

class SignalCleanupTest : public ::testing::TestWithParam<int> {};

TEST_P(SignalCleanupTest, ReleasesTheLockAndRemovesTheTempFileThenDiesBySignal) {
  worker_setup s;
  child w = s.start(true);
  const std::string token = token_of(w.read_line());
  ASSERT_EQ(entries(s.lock), std::vector<std::string>{token});
  ASSERT_EQ(temp_files_below(s.tmp.path()).size(), 1u);

  w.signal(GetParam());
  const int status = w.wait();
  ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;
  EXPECT_EQ(WTERMSIG(status), GetParam());
  EXPECT_EQ(entries(s.lock), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(temp_files_below(s.tmp.path()).empty());
  EXPECT_EQ(slurp(s.target), "old");
}

INSTANTIATE_TEST_SUITE_P(StopSignals, SignalCleanupTest, ::testing::Values(SIGTERM, SIGINT, SIGHUP));

// A mark that cannot be removed must not go into "lockfile" with the token
// (the next holder would step back from it): the token stays, for a taker
// to judge our death.
TEST(SignalCleanup, LeavesTheTokenHeldWhenItsOwnerMarkCannotBeRemoved) {
  worker_setup s;
  child w = s.start(true, false, false, "fuse.glusterfs");
  const std::string token = token_of(w.read_line());
  const auto marks = entries(s.lock / token);
  ASSERT_EQ(marks.size(), 1u);
  spit(s.lock / token / marks[0] / "in-the-way", "x");  // rmdir: ENOTEMPTY

  w.signal(SIGTERM);
  const int status = w.wait();
  ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;
  EXPECT_EQ(entries(s.lock), std::vector<std::string>{token});
  EXPECT_TRUE(temp_files_below(s.tmp.path()).empty());
  EXPECT_EQ(slurp(s.target), "old");
}

// Where holders leave owner marks (GlusterFS), the mark goes too: one left in
// the free token would make the next holder step back until our lease ends.
TEST(SignalCleanup, RemovesTheOwnerMarkBeforeReleasing) {
  worker_setup s;
  child w = s.start(true, false, false, "fuse.glusterfs");
  const std::string token = token_of(w.read_line());
  ASSERT_EQ(entries(s.lock), std::vector<std::string>{token});
  ASSERT_EQ(entries(s.lock / token).size(), 1u);
  EXPECT_EQ(entries(s.lock / token)[0].rfind("h.", 0), 0u) << entries(s.lock / token)[0];

  w.signal(SIGTERM);
  const int status = w.wait();
  ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;
  EXPECT_EQ(entries(s.lock), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(entries(s.lock / "lockfile").empty()) << "the owner mark was left";
  EXPECT_TRUE(temp_files_below(s.tmp.path()).empty());
  EXPECT_EQ(slurp(s.target), "old");
}

// What the cleanup is for: without it the token stays, held by a dead
// process, until a taker finds that out; the temporary file stays too.
TEST(SignalCleanup, WithoutItTheTokenAndTheTempFileStay) {
  worker_setup s;
  child w = s.start(false);
  const std::string token = token_of(w.read_line());
  w.signal(SIGTERM);
  const int status = w.wait();
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(entries(s.lock), std::vector<std::string>{token});
  EXPECT_EQ(temp_files_below(s.tmp.path()).size(), 1u);
  EXPECT_EQ(slurp(s.target), "old");
}

TEST(SignalCleanup, LeavesAnIgnoredSighupIgnored) {
  worker_setup s;
  child w = s.start(true, /*ignore_hup=*/true);
  const std::string token = token_of(w.read_line());
  w.signal(SIGHUP);  // discarded when sent: the signal is ignored
  w.write_line("still there?");
  EXPECT_EQ(w.read_line(), "alive");
  EXPECT_EQ(entries(s.lock), std::vector<std::string>{token});

  w.signal(SIGTERM);
  const int status = w.wait();
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(entries(s.lock), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(temp_files_below(s.tmp.path()).empty());
}

TEST(SignalCleanup, AForkedChildNeverReleasesItsParentsLock) {
  worker_setup s;
  child w = s.start(true, false, /*fork=*/true);
  const std::string token = token_of(w.read_line());
  const std::string child_line = w.read_line();
  ASSERT_EQ(child_line.rfind("child ", 0), 0u) << child_line;
  const pid_t grandchild = static_cast<pid_t>(std::stol(child_line.substr(6)));

  ASSERT_EQ(::kill(grandchild, SIGTERM), 0);
  wait_for_end(grandchild);
  EXPECT_EQ(entries(s.lock), std::vector<std::string>{token});
  EXPECT_EQ(temp_files_below(s.tmp.path()).size(), 1u);

  w.signal(SIGTERM);
  const int status = w.wait();
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(entries(s.lock), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(temp_files_below(s.tmp.path()).empty());
}
