// Breaking an etcd grant (etcd_lock::break_owner) and judging its holder
// (etcd_holder_liveness), for what is etcd's own: the broken grant's lease
// is revoked, a refused break leaves the holder's lease, and a holder of
// another host or of an owner id of another form is of unknown liveness.
// Break's contract on every backend (the lock lost by its holder, a waiter
// woken, other ids and a free lock left alone, a holder whose process is
// gone) is the typed suite tests/contract/lock_contract_test.cpp.
#include <gtest/gtest.h>

#include <unistd.h>

#include "etcd_test_base.hpp"
#include "tokenlock/etcd_lock.hpp"

using tokenlock::etcd_handle;
using tokenlock::etcd_holder_info;
using tokenlock::etcd_lock;
using tokenlock::owner_liveness;
using tokenlock::testing::etcd_cluster;
using tokenlock::testing::shared_cluster;

namespace {

class EtcdBreakTest : public tokenlock::testing::etcd_test {};

TEST_F(EtcdBreakTest, ABreakRevokesTheBrokenGrantsLeaseAndARefusedOneLeavesIt) {
  etcd_cluster& c = shared_cluster();
  etcd_lock lock(c.url(), name());
  etcd_handle h = lock.acquire();
  etcd_lock other(c.url(), name());
  std::error_code ec;
  other.break_owner(h.owner() + "x", ec);
  EXPECT_EQ(ec, tokenlock::errc::lock_lost);
  EXPECT_TRUE(lease_exists(c, h.lease_id())) << "a refused break revoked the holder's lease";
  EXPECT_EQ(keys(c, name()), 1);
  other.break_owner(h.owner());
  EXPECT_FALSE(lease_exists(c, h.lease_id())) << "the broken grant's lease was left";
  EXPECT_EQ(keys(c, name()), 0);
  h.release(ec);
  EXPECT_EQ(ec, tokenlock::errc::lock_lost);
}

TEST(EtcdHolderLiveness, UnknownForAnotherHostOrAnOwnerIdOfAnotherForm) {
  etcd_holder_info elsewhere;
  elsewhere.owner = "otherhost-0123abcd." + std::to_string(::getpid()) + ".0.0123456789abcdef";
  EXPECT_EQ(tokenlock::etcd_holder_liveness(elsewhere), owner_liveness::unknown);
  elsewhere.owner = "not an owner id";
  EXPECT_EQ(tokenlock::etcd_holder_liveness(elsewhere), owner_liveness::unknown);
}

}  // namespace
