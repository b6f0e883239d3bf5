// The etcd tests that need a cluster of their own: they kill or stop
// members, restart the whole cluster, turn auth on or serve TLS
// (etcd_test_base.hpp has the rest sharing one cluster).
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <thread>

#include <nlohmann/json.hpp>

#include "child.hpp"
#include "etcd_test_base.hpp"
#include "tokenlock/etcd_lock.hpp"

using namespace std::chrono_literals;
using tokenlock::etcd_handle;
using tokenlock::etcd_lock;
using tokenlock::etcd_lock_options;
using tokenlock::testing::child;
using tokenlock::testing::etcd_cluster;

namespace {

class EtcdOwnClusterTest : public tokenlock::testing::etcd_test {
 protected:
  // The members' indexes, the leader's first (for a URL that sends every
  // request to the leader while it lives); empty when none leads.
  static std::vector<int> leader_first(const etcd_cluster& c) {
    const int leader = c.leader();
    if (leader < 0) return {};
    std::vector<int> order{leader};
    for (int i = 0; i < c.size(); ++i)
      if (i != leader) order.push_back(i);
    return order;
  }
  // Auth on, with root and a user "app" (password "apppw") whose role may
  // read and write the test's lock keys only; later ctl() calls are root's.
  static void enable_auth(etcd_cluster& c) {
    for (const std::vector<std::string>& a :
         {std::vector<std::string>{"user", "add", "root:rootpw"}, {"user", "grant-role", "root", "root"},
          {"role", "add", "app"}, {"role", "grant-permission", "app", "--prefix=true", "readwrite", dir()},
          {"user", "add", "app:apppw"}, {"user", "grant-role", "app", "app"}, {"auth", "enable"}}) {
      const auto r = c.ctl(a);
      ASSERT_EQ(r.status, 0) << a[0] << " " << a[1] << ": " << r.out;
    }
    c.ctl_user("root:rootpw");
  }
};

// The holder talks to the leader first; the leader dies. The holder's
// refreshes go to another member, and nobody else gets the lock meanwhile.
TEST_F(EtcdOwnClusterTest, KillingTheLeaderWhileHeldKeepsTheLockWithItsHolder) {
  etcd_cluster c;
  const std::vector<int> order = leader_first(c);
  ASSERT_FALSE(order.empty()) << "no member says who leads";
  const int leader = order[0];
  etcd_lock_options o;
  o.lease = 3s;
  etcd_lock holder_lock(c.url({}, order), name(), o);
  etcd_handle h = holder_lock.acquire();
  c.kill_hard(leader);
  std::vector<int> others(order.begin() + 1, order.end());
  etcd_lock other(c.url({}, others), name(), o);
  // Three leases long: a refresh at a third of the lease, as `run` does.
  for (int i = 0; i < 9; ++i) {
    std::error_code ec;
    h.refresh(ec);
    ASSERT_FALSE(ec) << tokenlock::last_error_message();
    auto got = other.try_acquire(ec);
    ASSERT_FALSE(ec) << tokenlock::last_error_message();
    EXPECT_FALSE(got) << "another process got the lock while its holder refreshed";
    std::this_thread::sleep_for(1s);  // the refresh interval, not a synchronisation
  }
  const auto fence = h.fence();
  h.release();
  etcd_handle next = other.acquire();
  EXPECT_GT(next.fence(), fence);
}

TEST_F(EtcdOwnClusterTest, FencesKeepGrowingAcrossAWholeClusterRestart) {
  etcd_cluster c;
  std::uint64_t before = 0;
  {
    etcd_lock lock(c.url(), name());
    before = lock.acquire().fence();
  }
  c.stop_all();
  c.start_all();
  etcd_lock lock(c.url(), name());
  etcd_handle h = lock.acquire();
  EXPECT_GT(h.fence(), before);
}

TEST_F(EtcdOwnClusterTest, AnUnreachableClusterIsAConnectionErrorNamingEveryMember) {
  etcd_cluster c(1);
  const std::string port = c.client_url(0).substr(c.client_url(0).rfind(':') + 1);
  c.stop(0);
  etcd_lock_options o;
  o.command_timeout = 500ms;
  etcd_lock lock("etcd://127.0.0.1:" + port, name(), o);
  std::error_code ec;
  lock.acquire(ec);
  EXPECT_EQ(ec, std::errc::connection_refused) << tokenlock::last_error_message();
  const std::string m = tokenlock::last_error_message();
  EXPECT_NE(m.find("127.0.0.1:" + port), std::string::npos) << m;
  EXPECT_NE(m.find("is etcd running there"), std::string::npos) << m;
}

TEST_F(EtcdOwnClusterTest, WrongPasswordAndMissingCredentialsGetTheirFix) {
  etcd_cluster c(1);
  ASSERT_EQ(c.ctl({"user", "add", "root:rootpw"}).status, 0);
  c.ctl({"user", "grant-role", "root", "root"});
  const auto on = c.ctl({"auth", "enable"});
  ASSERT_EQ(on.status, 0) << on.out;
  std::error_code ec;
  etcd_lock wrong(c.url("root:nope"), name());
  wrong.acquire(ec);
  EXPECT_EQ(ec, tokenlock::errc::server_error);
  EXPECT_NE(tokenlock::last_error_message().find("wrong user or password"), std::string::npos)
      << tokenlock::last_error_message();
  etcd_lock none(c.url(), name());
  none.acquire(ec);
  EXPECT_EQ(ec, tokenlock::errc::server_error);
  EXPECT_NE(tokenlock::last_error_message().find("user:password@"), std::string::npos)
      << tokenlock::last_error_message();
  etcd_lock right(c.url("root:rootpw"), name());
  etcd_handle h = right.acquire();
  EXPECT_TRUE(h.owns());
  h.refresh();
  h.release();
}

TEST_F(EtcdOwnClusterTest, HttpsWorksWithTheClustersCaAndFailsClearlyWithoutIt) {
  etcd_cluster c(1, true);
  etcd_lock lock(c.url(), name());
  etcd_handle h = lock.acquire();
  EXPECT_TRUE(h.owns());
  h.refresh();
  h.release();
  const std::string no_ca = c.url().substr(0, c.url().find('?'));
  etcd_lock untrusted(no_ca, name());
  std::error_code ec;
  untrusted.acquire(ec);
  EXPECT_TRUE(ec);
  EXPECT_NE(tokenlock::last_error_message().find("?cacert=PATH"), std::string::npos)
      << tokenlock::last_error_message();
  const std::string plain = "etcd://" + no_ca.substr(std::string("etcds://").size());
  etcd_lock wrong_scheme(plain, name());
  wrong_scheme.acquire(ec);
  EXPECT_TRUE(ec);
  EXPECT_NE(tokenlock::last_error_message().find("HTTPS"), std::string::npos)
      << tokenlock::last_error_message();
}

// The cluster's certificate names 127.0.0.1 only: reached as localhost
// (a name, checked against the certificate, and sent as SNI), it is
// refused though its CA is trusted, and nothing is left in etcd.
TEST_F(EtcdOwnClusterTest, HttpsRefusesACertificateForAnotherHost) {
  etcd_cluster c(1, true);
  std::string by_name = c.url();
  by_name.replace(by_name.find("127.0.0.1"), std::string("127.0.0.1").size(), "localhost");
  etcd_lock lock(by_name, name());
  std::error_code ec;
  lock.acquire(ec);
  EXPECT_TRUE(ec);
  const std::string m = tokenlock::last_error_message();
  EXPECT_NE(m.find("certificate verification"), std::string::npos) << m;
  EXPECT_NE(m.find("?cacert=PATH"), std::string::npos) << m;
  etcd_lock by_address(c.url(), name());
  std::optional<etcd_handle> h = by_address.try_acquire();
  ASSERT_TRUE(h);  // the refused acquire left no key behind
  EXPECT_TRUE(h->owns());
  h->release();
}

// A waiter's watch is on the leader when the leader dies: the watch moves
// to another member, and the release still reaches the waiter.
TEST_F(EtcdOwnClusterTest, AWaiterWatchingThroughAKilledLeaderIsStillWokenByTheRelease) {
  etcd_cluster c;
  const std::vector<int> order = leader_first(c);
  ASSERT_FALSE(order.empty()) << "no member says who leads";
  const int leader = order[0];
  tokenlock::etcd_lock lock(c.url({}, order), name());
  tokenlock::etcd_handle h = lock.acquire();
  child waiter({LOCK_WORKER_PATH, "--lock", c.url({}, order) + "#" + name(), "hold", "60000"});
  wait_for_line(c, name(), 2);
  c.kill_hard(leader);
  const std::uint64_t fence = h.fence();
  h.release();
  const auto released = std::chrono::steady_clock::now();
  const auto w = split(waiter.read_line(60s));
  ASSERT_EQ(w.size(), 5u);  // "H <owner> <fence> <watches> <wakes>"
  EXPECT_EQ(w[0], "H");
  EXPECT_GT(std::stoull(w[2]), fence);
  // The waiter's watches last a third of its short lease (1 s), so the
  // release is seen by a watch, or by the look at the line that follows
  // one: either way within the election and a watch, not the waiter's 60 s.
  EXPECT_LE(std::stoi(w[4]), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - released, 15s) << "the release did not reach the waiter";
  waiter.write_line("go");
  EXPECT_EQ(waiter.read_line(), "released");
  EXPECT_EQ(keys(c, name()), 0);
}

// The role loses its permission while the lock is held: the release's
// delete is refused (server_error, with the fix), the handle still owns
// the grant, and once the permission is back the release removes it all.
TEST_F(EtcdOwnClusterTest, AReleaseWhoseDeleteIsRefusedKeepsTheGrantUntilItCanRelease) {
  etcd_cluster c(1);
  enable_auth(c);
  if (HasFatalFailure()) return;
  etcd_lock lock(c.url("app:apppw"), name());
  etcd_handle h = lock.acquire();
  ASSERT_EQ(c.ctl({"role", "revoke-permission", "app", "--prefix=true", dir()}).status, 0);
  std::error_code ec;
  h.release(ec);
  EXPECT_EQ(ec, tokenlock::errc::server_error);
  const std::string m = tokenlock::last_error_message();
  EXPECT_NE(m.find("release"), std::string::npos) << m;
  EXPECT_NE(m.find("permission denied"), std::string::npos) << m;
  EXPECT_NE(m.find("readwrite"), std::string::npos) << m;
  EXPECT_TRUE(h.owns()) << "a refused release dropped a grant that is still in etcd";
  EXPECT_EQ(c.key_count(dir()), 1);
  ASSERT_EQ(c.ctl({"role", "grant-permission", "app", "--prefix=true", "readwrite", dir()}).status, 0);
  h.release();
  EXPECT_FALSE(h.owns());
  EXPECT_EQ(c.key_count(dir()), 0);
  EXPECT_FALSE(lease_exists(c, h.lease_id()));
}

// etcd drops a simple auth token after --auth-token-ttl seconds unused.
// The holder's refresh and release, and a waiter's keep-alive between its
// watches, fetch a new token and go on.
TEST_F(EtcdOwnClusterTest, AnExpiredAuthTokenIsFetchedAgainByHolderAndWaiter) {
  etcd_cluster c(1, false, {"--auth-token-ttl", "1"});
  enable_auth(c);
  if (HasFatalFailure()) return;
  etcd_lock_options o;
  o.lease = 20s;  // outlives the wait for the token to expire
  etcd_lock lock(c.url("app:apppw"), name(), o);
  etcd_handle h = lock.acquire();
  // A token of our own, fetched after the lock's last request: once it is
  // refused, the lock's token has expired too.
  std::string answer;
  ASSERT_TRUE(c.post(0, "/v3/auth/authenticate", R"({"name":"app","password":"apppw"})", answer)) << answer;
  const std::string probe = nlohmann::json::parse(answer).value("token", "");
  ASSERT_FALSE(probe.empty()) << answer;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  std::this_thread::sleep_for(1500ms);  // unused for longer than its TTL: what is tested
  const std::string range = R"({"key":")" + base64(dir()) + R"("})";
  while (c.post(0, "/v3/kv/range", range, answer, probe)) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the token never expired: " << answer;
    std::this_thread::sleep_for(1500ms);
  }
  EXPECT_NE(answer.find("invalid auth token"), std::string::npos) << answer;
  h.refresh();
  // A waiter whose watch rounds (a third of its 9 s lease) outlast the
  // token: the keep-alive after a round needs a new one.
  etcd_lock_options wo;
  wo.lease = 9s;
  wo.wait = 60s;
  etcd_lock waiting(c.url("app:apppw"), name(), wo);
  std::error_code waiter_ec;
  std::string waiter_message;
  etcd_handle got;
  std::thread waiter([&] {
    got = waiting.acquire(waiter_ec);
    waiter_message = tokenlock::last_error_message();
  });
  // The holder refreshes now and then, past several of the waiter's
  // rounds and token lifetimes.
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(2s);  // the refresh interval, longer than the token's TTL
    std::error_code ec;
    h.refresh(ec);
    ASSERT_FALSE(ec) << tokenlock::last_error_message();
  }
  const std::uint64_t fence = h.fence();
  h.release();
  waiter.join();
  ASSERT_FALSE(waiter_ec) << waiter_message;
  EXPECT_GT(got.fence(), fence);
  got.release();
  EXPECT_EQ(c.key_count(dir()), 0);
}

}  // namespace
