// update_file under an etcd lock where etcd differs: the lease it grants
// is not the one asked for. What every backend promises of update_file,
// increment_counter and keep_alive is the contract's (tests/contract,
// UpdateContract and ProcessContract).
#include <gtest/gtest.h>

#include <sys/time.h>

#include "etcd_test_base.hpp"
#include "inspect.hpp"
#include "temp_dir.hpp"
#include "tokenlock/etcd_lock.hpp"

using namespace std::chrono_literals;
using tokenlock::etcd_lock;
using tokenlock::etcd_lock_options;
using tokenlock::testing::etcd_cluster;
using tokenlock::testing::shared_cluster;
using tokenlock::testing::slurp;
using tokenlock::testing::spit;
using tokenlock::testing::temp_dir;

namespace {

class EtcdUpdateTest : public tokenlock::testing::etcd_test {};

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

}  // namespace
