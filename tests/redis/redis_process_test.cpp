// The Redis lock with real processes, real signals and a real redis-server
// that is killed, restarted and failed over by the tests: what only Redis
// has (the hand-off to a woken waiter, a server that loses its state). A
// killed holder, a holder stopped past its lease and sixteen processes at
// once are the contract of every backend (tests/contract, ProcessContract).
#include <gtest/gtest.h>

#include <csignal>
#include <string>

#include "child.hpp"
#include "redis_server.hpp"
#include "tokenlock/redis_lock.hpp"

using namespace std::chrono_literals;
using tokenlock::errc;
using tokenlock::redis_handle;
using tokenlock::redis_lock;
using tokenlock::redis_lock_options;
using tokenlock::testing::child;
using tokenlock::testing::redis_server;

namespace {

const std::string worker = LOCK_WORKER_PATH;

// The worker's "H <owner> <fence> <watches> <wakes>" -> fence.
std::uint64_t fence_of(const std::string& line) {
  EXPECT_EQ(line.rfind("H ", 0), 0u) << line;
  const std::size_t from = line.find(' ', 2) + 1;
  return std::stoull(line.substr(from, line.find(' ', from) - from));
}

redis_lock_options waiting(std::chrono::milliseconds wait, std::chrono::milliseconds lease = 30s) {
  redis_lock_options o;
  o.wait = wait;
  o.lease = lease;
  return o;
}

class RedisProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = redis_server::unavailable();
    if (!why.empty()) GTEST_SKIP() << why;
    server = std::make_unique<redis_server>();
  }
  // Until a client of the server is blocked in BLPOP (a waiter on the
  // lock's wake list); false after 10 s.
  bool someone_blocks() const {
    const auto give_up = std::chrono::steady_clock::now() + 10s;
    while (server->cli({"CLIENT", "LIST"}).find("cmd=blpop") == std::string::npos)
      if (std::chrono::steady_clock::now() > give_up) return false;
    return true;
  }
  std::unique_ptr<redis_server> server;
};

// A release keeps the free lock for the waiter it woke: a newcomer that
// comes before the woken waiter's attempt (here the woken waiter is stopped
// as the release reaches it) is refused, and the woken waiter takes the
// lock when it goes on. Without the hand-off the newcomer took it, and the
// waiter went back to the end of the line.
TEST_F(RedisProcessTest, ANewcomerCannotTakeTheLockFromTheWaiterTheReleaseWoke) {
  redis_handle h = redis_lock(server->url(), "coupons", waiting(0ms)).acquire();
  child w({worker, "--lock", server->url() + "#coupons", "hold", "30000"});
  ASSERT_TRUE(someone_blocks());
  w.signal(SIGSTOP);
  ASSERT_TRUE(w.wait_stopped());
  const std::uint64_t released = h.fence();
  // Connected before the release, so that its attempt comes well inside
  // the hand-off's 500 ms.
  redis_lock newcomer(server->url(), "coupons", waiting(0ms));
  ASSERT_TRUE(newcomer.holder().has_value());
  h.release();
  const auto e = [&] {
    try {
      newcomer.acquire();
    } catch (const tokenlock::lock_error& x) {
      return std::string(x.what());
    }
    return std::string("granted");
  }();
  EXPECT_NE(e.find("free, and kept"), std::string::npos) << e;
  // The server gave the wake-up to the stopped waiter's BLPOP.
  EXPECT_EQ(server->cli({"LLEN", "tokenlock:coupons:wake"}), "0");
  w.signal(SIGCONT);
  EXPECT_GT(fence_of(w.read_line()), released);
  w.write_line("release");
  EXPECT_EQ(w.read_line(), "released");
  EXPECT_EQ(w.wait(), 0);
}

// A woken waiter that never makes its attempt (stopped here; killed would
// be the same) keeps the lock free for the hand-off's grace, 500 ms, not
// longer: a newcomer then takes it. The waiter, going on, finds it taken,
// waits its turn again and gets it at the newcomer's release.
TEST_F(RedisProcessTest, AWokenWaiterThatNeverComesHoldsTheLockUpOnlyForTheGrace) {
  redis_handle h = redis_lock(server->url(), "coupons", waiting(0ms)).acquire();
  child w({worker, "--lock", server->url() + "#coupons", "hold", "30000"});
  ASSERT_TRUE(someone_blocks());
  w.signal(SIGSTOP);
  ASSERT_TRUE(w.wait_stopped());
  h.release();
  const auto start = std::chrono::steady_clock::now();
  redis_handle next = redis_lock(server->url(), "coupons", waiting(5s)).acquire();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 300ms) << "taken while the hand-off kept it for the woken waiter";
  EXPECT_LT(took, 3s) << "kept well past the hand-off's grace";
  w.signal(SIGCONT);
  ASSERT_TRUE(someone_blocks());
  const std::uint64_t mine = next.fence();
  next.release();
  EXPECT_GT(fence_of(w.read_line()), mine);
  w.write_line("release");
  EXPECT_EQ(w.read_line(), "released");
  EXPECT_EQ(w.wait(), 0);
}

TEST_F(RedisProcessTest, ARestartWithoutPersistenceTellsHoldersAndFencesKeepIncreasing) {
  child h({worker, "--lock", server->url() + "#coupons", "hold", "30000"});
  const std::uint64_t before = fence_of(h.read_line());
  server->kill_hard();
  server->restart();
  h.write_line("release");
  const std::string said = h.read_line();
  EXPECT_EQ(said.rfind("lock_lost ", 0), 0u) << said;
  EXPECT_NE(said.find("the server lost the lock's state"), std::string::npos) << said;
  redis_handle next = redis_lock(server->url(), "coupons", waiting(0ms)).acquire();
  EXPECT_GT(next.fence(), before);
}

// A replica that missed the last grant (asynchronous replication: the
// primary died before sending it) becomes the primary and takes over the
// server's address (here its unix socket path, renamed over the old one, as
// a service address would move). The grant's holder hears that the lock was
// lost, and the new primary's fences are still larger than that grant's,
// although it only knows an older last fence.
TEST_F(RedisProcessTest, AReplicaPromotedWithoutTheLastGrantKeepsFencesIncreasing) {
  redis_server replica({"--replicaof", "127.0.0.1", std::to_string(server->port())});
  redis_lock primary_lock(server->unix_url(), "coupons", waiting(0ms));
  const std::uint64_t earlier = primary_lock.acquire().fence();  // released at once
  // In sync once the replica has acknowledged everything written so far,
  // the release included.
  ASSERT_TRUE(server->replicas_caught_up(1)) << "the replica never synchronised";
  EXPECT_NE(replica.cli({"GET", "tokenlock:coupons:fence"}), "");
  // Replication stops here: the replica misses the next grant.
  ASSERT_EQ(replica.cli({"REPLICAOF", "NO", "ONE"}), "OK");
  child h({worker, "--lock", server->unix_url() + "#coupons", "hold", "30000"});
  const std::uint64_t granted = fence_of(h.read_line());
  EXPECT_GT(granted, earlier);
  server->kill_hard();
  replica.move_socket_to(server->socket_path());
  EXPECT_EQ(replica.cli({"EXISTS", "tokenlock:coupons"}), "0");

  h.write_line("release");
  const std::string said = h.read_line();
  EXPECT_EQ(said.rfind("lock_lost ", 0), 0u) << said;
  EXPECT_NE(said.find("the server lost the lock's state"), std::string::npos) << said;
  redis_handle next = redis_lock(replica.unix_url(), "coupons", waiting(0ms)).acquire();
  EXPECT_GT(next.fence(), granted);
}

}  // namespace
