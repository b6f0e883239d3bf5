// etcd_lock in one process against a real etcd cluster (etcd_cluster.hpp):
// grants and fences, refusal while held, adopt, the lease etcd raises, the
// leader killed under a held lock, a whole-cluster restart, and the errors
// for bad URLs, wrong passwords and an unreachable cluster.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "etcd_test_base.hpp"
#include "tokenlock/etcd_lock.hpp"
#include "tokenlock/keep_alive.hpp"

using namespace std::chrono_literals;
using tokenlock::etcd_handle;
using tokenlock::etcd_lock;
using tokenlock::etcd_lock_options;
using tokenlock::testing::etcd_cluster;
using tokenlock::testing::shared_cluster;

namespace {

class EtcdLockTest : public tokenlock::testing::etcd_test {};

TEST_F(EtcdLockTest, GrantsIncreasingFencesAndReleaseLeavesNoKey) {
  etcd_cluster& c = shared_cluster();
  etcd_lock lock(c.url(), name());
  std::uint64_t last = 0;
  for (int i = 0; i < 3; ++i) {
    etcd_handle h = lock.acquire();
    ASSERT_TRUE(h.owns());
    EXPECT_GT(h.fence(), last);
    last = h.fence();
    EXPECT_EQ(keys(c, name()), 1);
    const auto info = lock.holder();
    ASSERT_TRUE(info);
    EXPECT_EQ(info->owner, h.owner());
    EXPECT_EQ(info->fence, h.fence());
    EXPECT_GT(info->remaining.count(), 0);
    h.release();
    EXPECT_FALSE(h.owns());
    EXPECT_EQ(keys(c, name()), 0);
  }
  EXPECT_FALSE(lock.holder());
}

TEST_F(EtcdLockTest, TryAcquireIsRefusedWhileHeldAndLeavesNothing) {
  etcd_cluster& c = shared_cluster();
  etcd_lock a(c.url(), name());
  etcd_lock b(c.url(), name());
  etcd_handle h = a.acquire();
  std::error_code ec;
  EXPECT_FALSE(b.try_acquire(ec));
  EXPECT_FALSE(ec);
  EXPECT_FALSE(b.try_acquire());
  EXPECT_EQ(keys(c, name()), 1);  // the refused attempts took their keys back
  etcd_lock_options zero;
  zero.wait = 0ms;
  etcd_lock z(c.url(), name(), zero);
  z.acquire(ec);
  EXPECT_EQ(ec, tokenlock::errc::busy);
  EXPECT_NE(tokenlock::last_error_message().find(h.owner()), std::string::npos)
      << tokenlock::last_error_message();
  etcd_lock_options short_wait;
  short_wait.wait = 300ms;
  etcd_lock w(c.url(), name(), short_wait);
  w.acquire(ec);
  EXPECT_EQ(ec, tokenlock::errc::timed_out);
  EXPECT_EQ(keys(c, name()), 1);
  const std::uint64_t fence = h.fence();
  h.release();
  auto got = b.try_acquire();
  ASSERT_TRUE(got);
  EXPECT_GT(got->fence(), fence);
}

TEST_F(EtcdLockTest, AdoptedGrantIsReleasedByAnotherLockObject) {
  etcd_cluster& c = shared_cluster();
  etcd_lock a(c.url(), name());
  etcd_handle h = a.acquire();
  const std::string owner = h.owner();
  const auto fence = h.fence();
  etcd_lock b(c.url(), name());
  std::error_code ec;
  b.adopt("nobody", ec);
  EXPECT_EQ(ec, tokenlock::errc::lock_lost);
  etcd_handle adopted = b.adopt(owner);
  EXPECT_EQ(adopted.fence(), fence);
  EXPECT_EQ(adopted.lease(), h.lease());
  EXPECT_GT(adopted.expires(), std::chrono::system_clock::now());
  adopted.refresh();
  adopted.release();
  EXPECT_EQ(keys(c, name()), 0);
  h.release(ec);  // the original finds its grant gone
  EXPECT_EQ(ec, tokenlock::errc::lock_lost);
  EXPECT_NE(tokenlock::last_error_message().find("lease ended"), std::string::npos)
      << tokenlock::last_error_message();
}

TEST_F(EtcdLockTest, ALeaseBelowEtcdsMinimumIsRaisedAndSaysSo) {
  etcd_cluster& c = shared_cluster();
  etcd_lock_options o;
  o.lease = 300ms;
  etcd_lock lock(c.url(), name(), o);
  etcd_handle h = lock.acquire();
  EXPECT_TRUE(h.lease_raised());
  EXPECT_GE(h.lease(), 1s);
  o.lease = 60s;
  etcd_lock normal(c.url(), name() + "-2", o);
  etcd_handle h2 = normal.acquire();
  EXPECT_FALSE(h2.lease_raised());
  EXPECT_EQ(h2.lease(), 60s);
}

TEST_F(EtcdLockTest, RefreshReportsAKeyDeletedBySomeoneElse) {
  etcd_cluster& c = shared_cluster();
  etcd_lock lock(c.url(), name());
  etcd_handle h = lock.acquire();
  h.refresh();
  ASSERT_EQ(c.ctl({"del", h.key()}).status, 0);
  std::error_code ec;
  h.refresh(ec);
  EXPECT_EQ(ec, tokenlock::errc::lock_lost);
  EXPECT_NE(tokenlock::last_error_message().find("deleted by someone else"), std::string::npos)
      << tokenlock::last_error_message();
  EXPECT_FALSE(h.owns());
}



TEST_F(EtcdLockTest, BadUrlsAreRefusedNamingThePart) {
  const std::pair<const char*, const char*> cases[] = {
      {"redis://127.0.0.1:2379", "does not start with etcd://"},
      {"etcd://", "no host"},
      {"etcd://127.0.0.1:0", "port"},
      {"etcd://127.0.0.1:99999", "port"},
      {"etcd://127.0.0.1:2379,,127.0.0.1:2380", "empty member"},
      {"etcd://user@127.0.0.1:2379", "user:password"},
      {"etcd://127.0.0.1:2379?ca=x", "unknown query parameter"},
      {"etcd://[::1:2379", "closing ']'"},
  };
  for (const auto& [url, part] : cases) {
    etcd_lock lock(url, "x");
    std::error_code ec;
    lock.acquire(ec);
    EXPECT_EQ(ec, tokenlock::errc::bad_argument) << url;
    EXPECT_NE(tokenlock::last_error_message().find(part), std::string::npos)
        << url << ": " << tokenlock::last_error_message();
  }
  etcd_lock slash("etcd://127.0.0.1:2379", "a/b");
  std::error_code ec;
  slash.acquire(ec);
  EXPECT_EQ(ec, tokenlock::errc::bad_argument);
}



}  // namespace

namespace {


// keep_alive refreshes an etcd grant past several of its leases.
TEST_F(EtcdLockTest, KeepAliveHoldsAGrantPastSeveralLeases) {
  etcd_cluster& c = shared_cluster();
  etcd_lock_options o;
  o.lease = 2s;
  etcd_lock lock(c.url(), name(), o);
  etcd_handle h = lock.acquire();
  tokenlock::keep_alive keeper(h);
  // Six refreshes at a third of the lease: two leases long.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (keeper.refreshes() < 6 && !keeper.lost()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "keep_alive stopped refreshing";
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_FALSE(keeper.lost()) << keeper.last_message();
  etcd_lock other(c.url(), name(), o);
  EXPECT_FALSE(other.try_acquire());
  EXPECT_FALSE(keeper.stop()) << keeper.last_message();
  h.release();
  EXPECT_TRUE(other.try_acquire());
}

}  // namespace


namespace {

// Options that cannot work are refused before any request, naming the
// option (no cluster needed: nothing is sent).
TEST(EtcdLockOptions, BadOptionsAndAnEmptyOwnerAreRefusedNamingThem) {
  const std::string url = "etcd://127.0.0.1:1";
  struct bad_case {
    const char* option;
    void (*set)(etcd_lock_options&);
  };
  const bad_case cases[] = {
      {"options.wait", [](etcd_lock_options& o) { o.wait = -1ms; }},
      {"options.connect_timeout", [](etcd_lock_options& o) { o.connect_timeout = 0ms; }},
      {"options.command_timeout", [](etcd_lock_options& o) { o.command_timeout = -5ms; }},
  };
  for (const bad_case& c : cases) {
    etcd_lock_options o;
    c.set(o);
    etcd_lock lock(url, "x", o);
    std::error_code ec;
    lock.acquire(ec);
    EXPECT_EQ(ec, tokenlock::errc::bad_argument) << c.option;
    EXPECT_NE(tokenlock::last_error_message().find(c.option), std::string::npos)
        << tokenlock::last_error_message();
    try {
      lock.try_acquire();
      ADD_FAILURE() << "try_acquire accepted " << c.option;
    } catch (const tokenlock::lock_error& e) {
      EXPECT_EQ(e.code(), tokenlock::errc::bad_argument);
      EXPECT_NE(std::string(e.what()).find(c.option), std::string::npos) << e.what();
    }
  }
  etcd_lock lock(url, "x");
  std::error_code ec;
  lock.adopt("", ec);
  EXPECT_EQ(ec, tokenlock::errc::bad_argument) << tokenlock::last_error_message();
  EXPECT_NE(tokenlock::last_error_message().find("owner id is empty"), std::string::npos)
      << tokenlock::last_error_message();
}

// A key in the lock's line written by another client, with a value that
// would break a message's line and make it huge: messages show it escaped
// and cut.
TEST_F(EtcdLockTest, AHostileHolderValueIsEscapedAndCutInMessages) {
  etcd_cluster& c = shared_cluster();
  const std::string hostile = "evil\nowner\x1b[2J" + std::string(100000, 'A');
  ASSERT_EQ(c.ctl({"put", "tokenlock/" + name() + "/0000000000000001", hostile}).status, 0);
  etcd_lock_options o;
  o.wait = 0ms;
  etcd_lock lock(c.url(), name(), o);
  auto check = [&](const std::error_code& ec, tokenlock::errc want) {
    const std::string m = tokenlock::last_error_message();
    EXPECT_EQ(ec, want) << m.substr(0, 300);
    EXPECT_EQ(m.find('\n'), std::string::npos) << m.substr(0, 300);
    EXPECT_EQ(m.find('\x1b'), std::string::npos) << m.substr(0, 300);
    EXPECT_LT(m.size(), 1000u) << m.substr(0, 300);
    EXPECT_NE(m.find("evil\\x0aowner"), std::string::npos) << m.substr(0, 300);
    EXPECT_NE(m.find("(" + std::to_string(hostile.size()) + " bytes)"), std::string::npos)
        << m.substr(0, 300);
  };
  std::error_code ec;
  lock.acquire(ec);
  check(ec, tokenlock::errc::busy);
  lock.adopt("someone", ec);
  check(ec, tokenlock::errc::lock_lost);
  lock.break_owner("someone", ec);
  check(ec, tokenlock::errc::lock_lost);
  EXPECT_EQ(keys(c, name()), 1);  // the foreign key stays; nothing of ours is left
}

}  // namespace
