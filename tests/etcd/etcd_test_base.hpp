// What the etcd tests share: the fixture that skips when etcd is missing,
// a lock name of each test's own, the looks into etcd they assert on, and
// the cluster of a test binary.
//
// The tests that neither stop nor kill a member, restart the cluster, nor
// need auth, TLS or member flags share one three-member cluster per
// process (etcd_shared_tests, run by ctest as one test): started on first
// use, stopped by pid when the process ends. Each test keeps to its own
// lock name ("<Suite>.<Test>"), so that tests never see each other's keys.
// The others (etcd_tests) start a cluster of their own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "etcd_cluster.hpp"

namespace tokenlock::testing {

// The binary's shared cluster (three members), started on first call.
etcd_cluster& shared_cluster();

class etcd_test : public ::testing::Test {
 protected:
  void SetUp() override;
  // "<Suite>.<Test>": the test's own lock name.
  static std::string name();
  // The prefix of its keys, "tokenlock/<name>/".
  static std::string dir() { return "tokenlock/" + name() + "/"; }
  // How many keys lock `lock_name` has in etcd now.
  static int keys(const etcd_cluster& c, const std::string& lock_name);
  // Until `n` keys (holder and waiters) are in the lock's line: polls etcd,
  // where a waiter's place is recorded, at most 30 s.
  static void wait_for_line(const etcd_cluster& c, const std::string& lock_name, int n);
  // Whether etcd still has lease `id` (etcdctl lease list).
  static bool lease_exists(const etcd_cluster& c, std::int64_t id);
  static std::string hex(std::int64_t id);
  // The words of a worker's line.
  static std::vector<std::string> split(const std::string& line);
  static std::string base64(const std::string& in);
};

}  // namespace tokenlock::testing
