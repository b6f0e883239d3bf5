// etcd_lock in one process against a real etcd cluster (etcd_cluster.hpp),
// for what is etcd's own: the lease etcd raises, a key deleted under its
// holder, bad URLs and options, and a hostile value in the lock's line.
// What every backend promises (grants, fences, refusal while held, adopt,
// break, keep_alive) is the typed suite tests/contract/lock_contract_test.cpp.
#include <gtest/gtest.h>

#include <chrono>

#include "etcd_test_base.hpp"
#include "tokenlock/etcd_lock.hpp"

using namespace std::chrono_literals;
using tokenlock::etcd_handle;
using tokenlock::etcd_lock;
using tokenlock::etcd_lock_options;
using tokenlock::testing::etcd_cluster;
using tokenlock::testing::shared_cluster;

namespace {

class EtcdLockTest : public tokenlock::testing::etcd_test {};

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

// Options that cannot work are refused before any request, naming the
// option (no cluster needed: nothing is sent).
TEST(EtcdLockOptions, BadOptionsAreRefusedNamingThem) {
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
