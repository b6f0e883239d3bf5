// etcd_lock across real processes (lock_worker, tests/support) and a real
// etcd cluster: FIFO order with one wake per release, and a waiter whose
// place was deleted. A killed holder, a holder stopped past its lease and
// sixteen processes at once are the contract of every backend
// (tests/contract, ProcessContract).
#include <chrono>
#include <cstdint>

#include <gtest/gtest.h>

#include <thread>

#include "child.hpp"
#include "etcd_test_base.hpp"
#include "tokenlock/etcd_lock.hpp"

using namespace std::chrono_literals;
using tokenlock::testing::child;
using tokenlock::testing::etcd_cluster;
using tokenlock::testing::shared_cluster;

namespace {

class EtcdProcessTest : public tokenlock::testing::etcd_test {};

// Waiters queue in the order they asked; each release wakes exactly the
// next one (one wake each), and fences follow the line. A waiter's watch
// lasts a third of its short waiter lease (3 s: docs/etcd.md, A waiter's
// key), then it looks at the line and watches again: so a waiter opens one
// watch, and one more per second it waited. (Counting one watch only held
// while the waits were short: under load, the fifth waiter waited longer
// than a second and opened two, with one wake.)
TEST_F(EtcdProcessTest, WaitersAreServedInOrderWithOneWakeEachPerRelease) {
  using clock = std::chrono::steady_clock;
  constexpr auto watch_span = std::chrono::seconds(1);  // a third of the waiter lease
  etcd_cluster& c = shared_cluster();
  std::vector<child> line;
  std::vector<clock::time_point> in_line;
  for (int i = 0; i < 5; ++i) {
    line.emplace_back(std::vector<std::string>{LOCK_WORKER_PATH, "--lock", c.url() + "#" + name(),
                                               "hold", "60000"});
    if (i == 0) {
      EXPECT_EQ(split(line[0].read_line())[0], "H");
    }
    wait_for_line(c, name(), i + 1);
    in_line.push_back(clock::now());
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
      // At most: it waited no longer than from its key's place in line to
      // the reading of its line.
      const auto waited = clock::now() - in_line[i];
      const auto most = 1 + static_cast<std::uint64_t>(waited / watch_span);
      EXPECT_GE(std::stoull(w[3]), 1u);
      EXPECT_LE(std::stoull(w[3]), most)
          << "waiter " << i << " opened more watches than its wait of "
          << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count() << " ms explains";
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
