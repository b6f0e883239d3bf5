// etcd_lock across real processes (lock_worker, tests/support) and a real etcd cluster:
// exclusion with an exact counter, FIFO order with one wake per release,
// a holder stopped past its lease, and a holder killed with SIGKILL.
#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
#include <sstream>
#include <thread>

#include <sys/wait.h>

#include "child.hpp"
#include "etcd/etcd_wait_stats.hpp"
#include "etcd_test_base.hpp"
#include "temp_dir.hpp"
#include "tokenlock/etcd_lock.hpp"

using namespace std::chrono_literals;
using tokenlock::testing::child;
using tokenlock::testing::etcd_cluster;
using tokenlock::testing::shared_cluster;
using tokenlock::testing::start_barrier;
using tokenlock::testing::temp_dir;

namespace {

class EtcdProcessTest : public tokenlock::testing::etcd_test {};

TEST_F(EtcdProcessTest, SixteenProcessesExcludeEachOtherAndKeepTheCounterExact) {
  etcd_cluster& c = shared_cluster();
  temp_dir d;
  const std::string counter = (d / "counter").string(), canary = (d / "canary").string();
  constexpr int workers = 16, cycles = 10;
  start_barrier gate;
  std::vector<child> kids;
  for (int i = 0; i < workers; ++i)
    kids.emplace_back(std::vector<std::string>{LOCK_WORKER_PATH, "--lock", c.url() + "#" + name(),
                                               "count", counter, canary, std::to_string(cycles)},
                      &gate);
  gate.open_gate();
  for (auto& k : kids) {
    EXPECT_EQ(k.read_line(240s), "fences ascending");
    const int st = k.wait();
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "worker status " << st;
  }
  std::ifstream in(counter);
  unsigned long long v = 0;
  in >> v;
  EXPECT_EQ(v, static_cast<unsigned long long>(workers * cycles));
  EXPECT_EQ(keys(c, name()), 0);
}

// Waiters queue in the order they asked; each release wakes exactly the
// next one (one watch, one wake each), and fences follow the line.
TEST_F(EtcdProcessTest, WaitersAreServedInOrderWithOneWakeEachPerRelease) {
  etcd_cluster& c = shared_cluster();
  std::vector<child> line;
  for (int i = 0; i < 5; ++i) {
    line.emplace_back(std::vector<std::string>{LOCK_WORKER_PATH, "--lock", c.url() + "#" + name(),
                                               "hold", "60000"});
    if (i == 0) {
      EXPECT_EQ(split(line[0].read_line())[0], "H");
    }
    wait_for_line(c, name(), i + 1);
  }
  std::uint64_t last = 0;
  for (int i = 0; i < 5; ++i) {
    if (i > 0) {
      const auto w = split(line[i].read_line());
      // "H <owner> <fence> <watches> <wakes>"
      ASSERT_EQ(w.size(), 5u);
      EXPECT_EQ(w[0], "H");
      EXPECT_GT(std::stoull(w[2]), last) << "served out of order";
      last = std::stoull(w[2]);
      EXPECT_EQ(w[3], "1") << "waiter " << i << " opened more than one watch";
      EXPECT_EQ(w[4], "1") << "waiter " << i << " was woken more than once";
    }
    // Nobody behind the holder has the lock yet.
    EXPECT_EQ(keys(c, name()), 5 - i);
    line[i].write_line("go");
    EXPECT_EQ(line[i].read_line(), "released");
    line[i].wait();
  }
  EXPECT_EQ(keys(c, name()), 0);
}

TEST_F(EtcdProcessTest, AHolderStoppedPastItsLeaseLearnsItLostTheLockAtRelease) {
  etcd_cluster& c = shared_cluster();
  child holder({LOCK_WORKER_PATH, "--lock", c.url() + "#" + name(), "hold", "2000"});
  const auto w = split(holder.read_line());
  ASSERT_EQ(w[0], "H");
  holder.signal(SIGSTOP);
  ASSERT_TRUE(holder.wait_stopped());
  tokenlock::etcd_lock_options o;
  o.wait = 30s;
  o.lease = 2s;  // as short as the holder's: kept alive while it waits
  tokenlock::etcd_lock lock(c.url(), name(), o);
  const auto before = tokenlock::detail::this_thread_etcd_wait_stats();
  tokenlock::etcd_handle h = lock.acquire();  // granted when the stopped holder's lease ends
  const auto after = tokenlock::detail::this_thread_etcd_wait_stats();
  EXPECT_GT(h.fence(), std::stoull(w[2]));
  // One watch per third of its own lease at most, while the holder's
  // lease (2 s) runs out: not a loop of watches that end at once.
  EXPECT_LE(after.watches - before.watches, 10u);
  EXPECT_EQ(after.wakes - before.wakes, 1u);
  holder.signal(SIGCONT);
  holder.write_line("release");
  const std::string said = holder.read_line();
  EXPECT_EQ(said.rfind("lock_lost ", 0), 0u) << said;
  EXPECT_NE(said.find("lease ended"), std::string::npos) << said;
  EXPECT_TRUE(h.owns());
  h.refresh();  // the late release did not touch the new grant
  h.release();
}

TEST_F(EtcdProcessTest, AKilledHoldersLockGoesToTheNextWaiterWhenItsLeaseEnds) {
  etcd_cluster& c = shared_cluster();
  child holder({LOCK_WORKER_PATH, "--lock", c.url() + "#" + name(), "hold", "2000"});
  const auto w = split(holder.read_line());
  ASSERT_EQ(w[0], "H");
  holder.signal(SIGKILL);
  holder.wait();
  tokenlock::etcd_lock_options o;
  o.wait = 30s;
  tokenlock::etcd_lock lock(c.url(), name(), o);
  auto busy = lock.try_acquire();
  EXPECT_FALSE(busy) << "the dead holder's lease ended at once";
  tokenlock::etcd_handle h = lock.acquire();
  EXPECT_GT(h.fence(), std::stoull(w[2]));
  EXPECT_EQ(keys(c, name()), 1);
}


// A waiter whose key another client deletes while it waits must not take
// the lock when the holder releases: the line behind it moved on.
TEST_F(EtcdProcessTest, AWaiterWhosePlaceWasDeletedIsNotGrantedTheLock) {
  etcd_cluster& c = shared_cluster();
  tokenlock::etcd_lock lock(c.url(), name());
  tokenlock::etcd_handle h = lock.acquire();
  tokenlock::etcd_lock_options o;
  o.wait = 60s;
  tokenlock::etcd_lock waiting(c.url(), name(), o);
  std::error_code ec;
  bool owns = true;
  std::string why;
  std::thread waiter([&] {
    owns = waiting.acquire(ec).owns();
    why = tokenlock::last_error_message();
  });
  wait_for_line(c, name(), 2);
  const auto listed = c.ctl({"get", "--prefix", "--keys-only", "tokenlock/" + name() + "/"});
  std::string theirs;
  for (const std::string& k : split(listed.out))
    if (k != h.key()) theirs = k;
  ASSERT_FALSE(theirs.empty()) << listed.out;
  ASSERT_EQ(c.ctl({"del", theirs}).status, 0);
  h.release();
  waiter.join();
  EXPECT_EQ(ec, tokenlock::errc::lock_lost) << why;
  EXPECT_NE(why.find("nothing was granted"), std::string::npos) << why;
  EXPECT_FALSE(owns);
  EXPECT_EQ(keys(c, name()), 0);
}

}  // namespace
