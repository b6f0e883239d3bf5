// Atomic writes and the updater with real processes: SIGKILL during
// writes, a holder stopped between its temporary file and its commit,
// random stops of many updaters, a file-size limit, and counters
// incremented by sixteen processes while some are killed. What every
// backend promises with real processes is the contract's (tests/contract,
// ProcessContract).
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/filesystem.hpp>
#include <boost/filesystem/fstream.hpp>

#include "child.hpp"
#include "files/file_writer.hpp"
#include "inspect.hpp"
#include "temp_dir.hpp"
#include "tokenlock/tokenlock.hpp"
#include "versioned_content.hpp"

namespace fs = boost::filesystem;
using namespace std::chrono_literals;
using tokenlock::testing::child;
using tokenlock::testing::entries;
using tokenlock::testing::holder_pid;
using tokenlock::testing::lines_of;
using tokenlock::testing::temp_files_below;
using tokenlock::testing::monotonic_ns;
using tokenlock::testing::slurp;
using tokenlock::testing::temp_dir;

namespace {

const std::string worker = LOCK_WORKER_PATH;

class UpdateProcessTest : public ::testing::Test {
 protected:
  temp_dir tmp;
  fs::path target = tmp / "data.txt";
  fs::path lock_dir = tmp / "data.txt.lock";
};

// How many writers AWriterKilledAtRandomMomentsNeverLeavesATornFile kills:
// 100 in every run (nearly every kill lands mid-write, so each is a real
// try), 300 in the weekly run's update_process_kills_long, which sets
// TOKENLOCK_TEST_KILLS.
int kills_to_make() {
  const char* n = std::getenv("TOKENLOCK_TEST_KILLS");
  return n && *n ? std::stoi(n) : 100;
}

TEST_F(UpdateProcessTest, AWriterKilledAtRandomMomentsNeverLeavesATornFile) {
  const std::size_t size = (1u << 20) + 17;
  const int kills = kills_to_make();
  ASSERT_GT(kills, 1) << "TOKENLOCK_TEST_KILLS must be a count above 1";
  std::mt19937 rng(std::random_device{}());
  int leftovers_seen = 0;
  std::set<std::uint64_t> versions;
  for (int k = 0; k < kills; ++k) {
    child writer({worker, "rewrite", target.string(), std::to_string(size),
                  k % 2 ? "file" : "none"});
    ASSERT_EQ(writer.read_line(), "R");
    // The kill lands anywhere in the following writes: the delay is the
    // experimental variable, not a wait for something.
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 15000));
    writer.signal(SIGKILL);
    writer.wait();
    auto v = tokenlock::testing::complete_version(slurp(target), size);
    ASSERT_TRUE(v.has_value()) << "after kill " << k << " the target is not one complete version";
    versions.insert(*v);
    leftovers_seen += !temp_files_below(tmp.path()).empty();
  }
  EXPECT_GT(versions.size(), static_cast<size_t>(kills / 2)) << "the writers made progress";
  RecordProperty("kills_with_leftover_temp_files", leftovers_seen);
  EXPECT_GT(leftovers_seen, 0) << "some kills must land mid-write for the test to mean much";
  tokenlock::sweep_temp_files(tmp.path(), 0s);
  EXPECT_TRUE(temp_files_below(tmp.path()).empty());
  EXPECT_TRUE(tokenlock::testing::complete_version(slurp(target), size).has_value());
}

TEST_F(UpdateProcessTest, AHolderStoppedBeforeItsCommitCannotOverwriteTheNewOwner) {
  tokenlock::atomic_write(target, "original\n");
  child a({worker, "--lock", lock_dir.string(), "stall-update", target.string(), "300", "A"});
  ASSERT_EQ(a.read_line(), "T") << "A wrote its temporary file and is about to commit";
  ASSERT_TRUE(a.wait_stopped());
  // B waits out A's lease (A is alive, only stopped), takes over, commits.
  child b({worker, "--lock", lock_dir.string(), "update", target.string(), "B"});
  EXPECT_EQ(b.read_line(10s), "committed");
  EXPECT_EQ(slurp(target), "B\n");
  a.signal(SIGCONT);
  const std::string said = a.read_line();
  EXPECT_EQ(said.rfind("lock_lost ", 0), 0u) << said;
  EXPECT_EQ(slurp(target), "B\n") << "the late commit was fenced off";
  EXPECT_TRUE(temp_files_below(tmp.path()).empty());
  EXPECT_EQ(entries(lock_dir), std::vector<std::string>{"lockfile"});
  a.wait();
  b.wait();
}

TEST_F(UpdateProcessTest, StopsAtRandomMomentsNeverLoseACommittedUpdate) {
  const int writers = 3, stops = 12;
  std::mt19937 rng(std::random_device{}());
  std::vector<child> w;
  for (int i = 0; i < writers; ++i)
    w.emplace_back(std::vector<std::string>{worker, "--lock", lock_dir.string(), "append",
                                            target.string(), "150", "w" + std::to_string(i), "1000000",
                                            (tmp / ("log." + std::to_string(i))).string()});
  for (int s = 0; s < stops; ++s) {
    // Random moments; every other stop hits the process holding the lock
    // (read from its token), the others a random one. Each stop outlasts
    // the 150 ms lease, so the others take over.
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % 40));
    child* victim = &w[rng() % w.size()];
    if (s % 2 == 0) {
      const int pid = holder_pid(lock_dir);
      for (auto& c : w)
        if (c.pid() == pid) victim = &c;
    }
    victim->signal(SIGSTOP);
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + rng() % 200));
    victim->signal(SIGCONT);
  }
  fs::ofstream(target.string() + ".stop") << "";
  int lost = 0;
  for (auto& c : w) {
    std::string line = c.read_line(120s);
    ASSERT_EQ(line.rfind("lost ", 0), 0u) << line;
    lost += std::stoi(line.substr(5));
    int status = c.wait();
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  auto file_lines = lines_of(slurp(target));
  std::set<std::string> in_file(file_lines.begin(), file_lines.end());
  EXPECT_EQ(in_file.size(), file_lines.size()) << "no update applied twice";
  size_t committed = 0;
  for (int i = 0; i < writers; ++i)
    for (const auto& line : lines_of(slurp(tmp / ("log." + std::to_string(i))))) {
      ++committed;
      EXPECT_TRUE(in_file.count(line)) << line << " was committed, then overwritten";
    }
  EXPECT_EQ(committed, file_lines.size());
  EXPECT_GT(lost, 0) << "stops of holders must have cost some of them their lock";
  EXPECT_TRUE(temp_files_below(tmp.path()).empty());
  RecordProperty("lost_locks", lost);
  RecordProperty("committed", static_cast<int>(committed));
}

TEST_F(UpdateProcessTest, AWriterOverItsFileSizeLimitFailsCleanly) {
  tokenlock::atomic_write(target, "small and intact\n");
  int status = 0;
  const std::string report = tokenlock::testing::run_in_child(
      [&] {
        ::signal(SIGXFSZ, SIG_IGN);
        rlimit lim{4096, 4096};
        ::setrlimit(RLIMIT_FSIZE, &lim);
        std::error_code ec;
        tokenlock::atomic_write(target, std::string(100000, 'x'), {}, ec);
        return std::to_string(ec.value()) + " " + tokenlock::last_error_message();
      },
      status);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(report.rfind(std::to_string(EFBIG) + " ", 0), 0u) << report;
  EXPECT_NE(report.find("RLIMIT_FSIZE"), std::string::npos) << report;
  EXPECT_NE(report.find(target.string()), std::string::npos) << report;
  EXPECT_EQ(slurp(target), "small and intact\n");
  EXPECT_TRUE(temp_files_below(tmp.path()).empty());
}

TEST_F(UpdateProcessTest, AnUnwritableDirectoryGivesAClearErrorAndChangesNothing) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become another user";
  // Root ignores permission bits: a child that became "nobody" does not.
  fs::permissions(tmp.path(), fs::perms(0755));
  tokenlock::atomic_write(target, "owned by root\n");
  const auto before = tokenlock::testing::snapshot(tmp.path());
  int status = 0;
  const std::string report = tokenlock::testing::run_in_child(
      [&] {
        if (::setgid(65534) != 0 || ::setuid(65534) != 0) return std::string("setuid failed");
        std::error_code ec;
        tokenlock::atomic_write(target, "nobody's\n", {}, ec);
        return std::to_string(ec.value()) + " " + tokenlock::last_error_message();
      },
      status);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(report.rfind(std::to_string(EACCES) + " ", 0), 0u) << report;
  EXPECT_NE(report.find("write and search permission"), std::string::npos) << report;
  EXPECT_NE(report.find(target.string()), std::string::npos) << report;
  EXPECT_EQ(slurp(target), "owned by root\n");
  EXPECT_EQ(tokenlock::testing::snapshot(tmp.path()), before);
}

TEST_F(UpdateProcessTest, SixteenIncrementersWithKilledHoldersLoseNothing) {
  const fs::path counter = tmp / "hits.count";
  const fs::path counter_lock = tmp / "hits.count.lock";
  const int n = 16, count = 40, kills = 6;
  std::mt19937 rng(std::random_device{}());
  std::vector<child> w;
  for (int i = 0; i < n; ++i)
    w.emplace_back(std::vector<std::string>{worker, "--lock", counter_lock.string(), "incr",
                                            counter.string(), std::to_string(count),
                                            (tmp / ("log." + std::to_string(i))).string()});
  int killed = 0;
  for (int k = 0; k < kills; ++k) {
    // A random moment: after 1 to 15 more increments.
    auto value = [&] { return tokenlock::read_counter(counter).value_or(0); };
    const std::uint64_t target_value = value() + 1 + rng() % 15;
    const std::int64_t give_up = monotonic_ns() + 30'000'000'000LL;
    while (value() < target_value && monotonic_ns() < give_up)
      std::this_thread::sleep_for(1ms);  // polling a condition
    const int pid = holder_pid(counter_lock);
    for (auto& c : w)
      if (c.running() && c.pid() == pid) {
        c.signal(SIGKILL);
        c.wait();
        ++killed;
      }
  }
  for (auto& c : w)
    if (c.running()) {
      int status = c.wait();
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
  std::vector<std::uint64_t> logged;
  for (int i = 0; i < n; ++i)
    for (const auto& line : lines_of(slurp(tmp / ("log." + std::to_string(i)))))
      logged.push_back(std::stoull(line));
  std::set<std::uint64_t> distinct(logged.begin(), logged.end());
  EXPECT_EQ(distinct.size(), logged.size()) << "two increments saw the same value";
  const std::uint64_t final_value = tokenlock::read_counter(counter).value_or(0);
  EXPECT_GE(final_value, logged.size());
  EXPECT_LE(final_value - logged.size(), static_cast<std::uint64_t>(killed))
      << "only a killed holder may have committed without logging";
  EXPECT_GT(killed, 0);
  EXPECT_TRUE(temp_files_below(tmp.path()).empty());
  RecordProperty("killed_holders", killed);
}

}  // namespace
