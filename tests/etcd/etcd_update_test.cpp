// update_file and increment_counter under an etcd lock: the commit fenced
// through TARGET.fence by the grant's create revision.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include <sys/time.h>
#include <sys/wait.h>

#include "child.hpp"
#include "etcd_test_base.hpp"
#include "inspect.hpp"
#include "temp_dir.hpp"
#include "tokenlock/etcd_lock.hpp"

using namespace std::chrono_literals;
using tokenlock::etcd_lock;
using tokenlock::etcd_lock_options;
using tokenlock::testing::child;
using tokenlock::testing::etcd_cluster;
using tokenlock::testing::shared_cluster;
using tokenlock::testing::slurp;
using tokenlock::testing::spit;
using tokenlock::testing::start_barrier;
using tokenlock::testing::temp_dir;
using tokenlock::testing::temp_files_below;

namespace {

class EtcdUpdateTest : public tokenlock::testing::etcd_test {};

// A holder stalls in its update function past its lease; a newer holder
// takes the lock, updates and commits; the stalled one's commit is refused
// and the newer data stays.
TEST_F(EtcdUpdateTest, AStalledHoldersCommitIsRefusedByTheFence) {
  etcd_cluster& c = shared_cluster();
  temp_dir tmp;
  const std::string file = (tmp / "data").string();
  spit(file, "0\n");
  std::mutex m;
  std::condition_variable cv;
  bool in_function = false, newer_done = false;
  std::error_code stalled_ec;
  std::string stalled_message;
  std::thread stalled([&] {
    etcd_lock_options o;
    o.lease = 1s;  // raised to etcd's minimum
    etcd_lock a(c.url(), name(), o);
    tokenlock::update_file(file, a,
                           [&](const std::optional<std::string>&) {
                             std::unique_lock<std::mutex> g(m);
                             in_function = true;
                             cv.notify_all();
                             cv.wait(g, [&] { return newer_done; });
                             return std::string("stalled\n");
                           },
                           {}, stalled_ec);
    stalled_message = tokenlock::last_error_message();  // per thread
  });
  {
    std::unique_lock<std::mutex> g(m);
    cv.wait(g, [&] { return in_function; });
  }
  etcd_lock_options o;
  o.wait = 30s;  // waits out the stalled holder's lease, then updates
  etcd_lock b(c.url(), name(), o);
  tokenlock::update_file(file, b, [](const std::optional<std::string>&) { return std::string("newer\n"); });
  {
    std::lock_guard<std::mutex> g(m);
    newer_done = true;
  }
  cv.notify_all();
  stalled.join();
  EXPECT_EQ(stalled_ec, tokenlock::errc::lock_lost);
  EXPECT_NE(stalled_message.find("a newer holder took the fence before our commit"), std::string::npos)
      << stalled_message;
  EXPECT_EQ(slurp(file), "newer\n");
  EXPECT_TRUE(temp_files_below(tmp.path()).empty());
}

// update_options::keep_alive: an update function that runs for more than
// two leases commits, because the lease was kept alive meanwhile, and
// nobody else got the lock while it ran.
TEST_F(EtcdUpdateTest, KeepAliveCarriesAnUpdatePastSeveralLeases) {
  etcd_cluster& c = shared_cluster();
  temp_dir tmp;
  const std::string file = (tmp / "data").string();
  spit(file, "0\n");
  etcd_lock_options o;
  o.lease = 2s;
  etcd_lock holder(c.url(), name(), o);
  etcd_lock other(c.url(), name(), o);
  tokenlock::update_options u;
  u.keep_alive = true;
  int looks = 0, taken = 0;
  const auto result = tokenlock::update_file(
      file, holder,
      [&](const std::optional<std::string>& current) {
        // Five seconds: past two leases of 2 s. A sleep paces the looks;
        // what is checked is that no look got the lock.
        const auto until = std::chrono::steady_clock::now() + 5s;
        while (std::chrono::steady_clock::now() < until) {
          ++looks;
          if (other.try_acquire()) ++taken;
          std::this_thread::sleep_for(250ms);
        }
        return current.value_or("") + "kept\n";
      },
      u);
  EXPECT_TRUE(result.fenced);
  EXPECT_GE(looks, 10);
  EXPECT_EQ(taken, 0) << "another lock object got the lock while the update ran";
  EXPECT_EQ(slurp(file), "0\nkept\n");
  EXPECT_EQ(c.key_count("tokenlock/" + name() + "/"), 0);
}

// Temporary files beside the target are swept when older than the lease
// etcd granted (2 s for a 300 ms lease), not the one asked for: one a
// second old may still be a live writer's.
TEST_F(EtcdUpdateTest, TheSweepCountsTheGrantedLeaseNotTheAskedOne) {
  etcd_cluster& c = shared_cluster();
  temp_dir tmp;
  const std::string file = (tmp / "data").string();
  const std::string young = (tmp / ".data.tmp.0123456789abcdef").string();
  spit(young, "a writer's\n");
  const auto second_ago = std::chrono::system_clock::now() - 1s;
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(second_ago.time_since_epoch());
  const struct timeval times[2] = {{us.count() / 1000000, us.count() % 1000000},
                                   {us.count() / 1000000, us.count() % 1000000}};
  ASSERT_EQ(::utimes(young.c_str(), times), 0);
  etcd_lock_options o;
  o.lease = 300ms;
  etcd_lock lock(c.url(), name(), o);
  tokenlock::update_options u;
  u.sweep_every = 1;  // every update sweeps
  tokenlock::update_file(file, lock, [](const std::optional<std::string>&) { return std::string("x\n"); }, u);
  EXPECT_EQ(slurp(file), "x\n");
  EXPECT_TRUE(boost::filesystem::exists(young)) << "a temporary file younger than the granted lease was swept";
}

TEST_F(EtcdUpdateTest, EightProcessesIncrementingOneCounterSeeEveryValueOnce) {
  etcd_cluster& c = shared_cluster();
  temp_dir d;
  const std::string counter = (d / "hits").string();
  constexpr int workers = 8, each = 10;
  start_barrier gate;
  std::vector<child> kids;
  for (int i = 0; i < workers; ++i)
    kids.emplace_back(std::vector<std::string>{LOCK_WORKER_PATH, "--lock", c.url() + "#" + name(),
                                               "incr", counter, std::to_string(each)},
                      &gate);
  gate.open_gate();
  std::set<unsigned long long> seen;
  for (auto& k : kids) {
    for (std::string line = k.read_line(240s); line != "done"; line = k.read_line(240s))
      EXPECT_TRUE(seen.insert(std::stoull(line)).second) << "value " << line << " twice";
    const int st = k.wait();
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "worker status " << st;
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(workers * each));
  EXPECT_EQ(slurp(counter), std::to_string(workers * each) + "\n");
  EXPECT_TRUE(temp_files_below(d.path()).empty());
}

}  // namespace
