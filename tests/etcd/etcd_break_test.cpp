// Breaking an etcd grant (etcd_lock::break_owner) and judging its holder
// (etcd_holder_liveness), against a real etcd cluster and real processes.
#include <gtest/gtest.h>

#include <csignal>
#include <thread>

#include "child.hpp"
#include "etcd_test_base.hpp"
#include "tokenlock/etcd_lock.hpp"

using namespace std::chrono_literals;
using tokenlock::etcd_handle;
using tokenlock::etcd_holder_info;
using tokenlock::etcd_lock;
using tokenlock::etcd_lock_options;
using tokenlock::owner_liveness;
using tokenlock::testing::child;
using tokenlock::testing::etcd_cluster;
using tokenlock::testing::shared_cluster;

namespace {

class EtcdBreakTest : public tokenlock::testing::etcd_test {};

TEST_F(EtcdBreakTest, BreakingTheHoldersGrantWakesAWaiterAndTheHolderLearnsItLost) {
  etcd_cluster& c = shared_cluster();
  etcd_lock lock(c.url(), name());
  etcd_handle h = lock.acquire();
  etcd_lock_options o;
  o.wait = 60s;
  etcd_lock waiting(c.url(), name(), o);
  std::error_code waiter_ec;
  etcd_handle got;
  std::thread waiter([&] { got = waiting.acquire(waiter_ec); });
  wait_for_line(c, name(), 2);
  etcd_lock breaker(c.url(), name());
  breaker.break_owner(h.owner());
  waiter.join();
  ASSERT_FALSE(waiter_ec) << tokenlock::last_error_message();
  EXPECT_TRUE(got.owns());
  EXPECT_GT(got.fence(), h.fence());
  EXPECT_FALSE(lease_exists(c, h.lease_id())) << "the broken grant's lease was left";
  std::error_code ec;
  h.release(ec);
  EXPECT_EQ(ec, tokenlock::errc::lock_lost);
  EXPECT_FALSE(h.owns());
  got.refresh();  // the old holder's release did not touch the new grant
  EXPECT_EQ(keys(c, name()), 1);
  got.release();
  EXPECT_EQ(keys(c, name()), 0);
}

TEST_F(EtcdBreakTest, BreakingAnotherOwnerOrAFreeLockDeletesNothing) {
  etcd_cluster& c = shared_cluster();
  etcd_lock lock(c.url(), name());
  std::error_code ec;
  lock.break_owner("host-0123abcd.1.0.0123456789abcdef", ec);
  EXPECT_EQ(ec, tokenlock::errc::lock_lost);
  EXPECT_NE(tokenlock::last_error_message().find("it is free"), std::string::npos)
      << tokenlock::last_error_message();
  etcd_handle h = lock.acquire();
  etcd_lock other(c.url(), name());
  EXPECT_THROW(other.break_owner("host-0123abcd.1.0.0123456789abcdef"), tokenlock::lock_error);
  other.break_owner(h.owner() + "x", ec);
  EXPECT_EQ(ec, tokenlock::errc::lock_lost);
  const std::string m = tokenlock::last_error_message();
  EXPECT_NE(m.find(h.owner() + " does"), std::string::npos) << m;
  EXPECT_NE(m.find("nothing was deleted"), std::string::npos) << m;
  EXPECT_EQ(keys(c, name()), 1);
  EXPECT_TRUE(lease_exists(c, h.lease_id()));
  h.refresh();
  h.release();
}

TEST_F(EtcdBreakTest, LivenessIsAliveForUsDeadForAnExitedChildUnknownElsewhere) {
  etcd_cluster& c = shared_cluster();
  etcd_lock lock(c.url(), name());
  {
    etcd_handle h = lock.acquire();
    const auto mine = lock.holder();
    ASSERT_TRUE(mine);
    EXPECT_EQ(tokenlock::etcd_holder_liveness(*mine), owner_liveness::alive);
  }
  child holder({LOCK_WORKER_PATH, "--lock", c.url() + "#" + name(), "hold", "60000"});
  ASSERT_EQ(holder.read_line().substr(0, 2), "H ");
  holder.signal(SIGKILL);
  holder.wait();  // reaped: no zombie is left to answer for it
  const auto dead = lock.holder();
  ASSERT_TRUE(dead);
  EXPECT_EQ(tokenlock::etcd_holder_liveness(*dead), owner_liveness::dead) << dead->owner;
  lock.break_owner(dead->owner);
  EXPECT_FALSE(lock.holder());
  etcd_holder_info elsewhere;
  elsewhere.owner = "otherhost-0123abcd." + std::to_string(getpid()) + ".0.0123456789abcdef";
  EXPECT_EQ(tokenlock::etcd_holder_liveness(elsewhere), owner_liveness::unknown);
  elsewhere.owner = "not an owner id";
  EXPECT_EQ(tokenlock::etcd_holder_liveness(elsewhere), owner_liveness::unknown);
}

}  // namespace
