// The etcd lock's failure paths against a real cluster: a release whose
// lease was revoked under it, a release whose delete etcd refuses (the
// role lost its permission), the auth token expiring (etcd's
// --auth-token-ttl) under a holder and under a waiter; and, through a
// proxy in front of a member (http_proxy.hpp), an acquire whose first put
// was applied but not answered, and a watch that answers an error. Each
// checks what is left in etcd afterwards.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include <nlohmann/json.hpp>

#include "etcd_cluster.hpp"
#include "http_proxy.hpp"
#include "tokenlock/etcd_lock.hpp"

using namespace std::chrono_literals;
using tokenlock::etcd_handle;
using tokenlock::etcd_lock;
using tokenlock::etcd_lock_options;
using tokenlock::testing::etcd_cluster;
using tokenlock::testing::http_proxy;

namespace {

class EtcdFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = etcd_cluster::unavailable();
    if (!why.empty()) GTEST_SKIP() << why;
  }
  static std::string name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }
  static std::string dir() { return "tokenlock/" + name() + "/"; }
  static std::string hex(std::int64_t id) {
    char buf[20];
    std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(id));
    return buf;
  }
  static std::string base64(const std::string& in) {
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (std::size_t i = 0; i < in.size(); i += 3) {
      const std::size_t n = std::min<std::size_t>(3, in.size() - i);
      std::uint32_t v = 0;
      for (std::size_t k = 0; k < 3; ++k)
        v = v << 8 | (k < n ? static_cast<unsigned char>(in[i + k]) : 0u);
      for (std::size_t k = 0; k < 4; ++k) out += k <= n ? digits[(v >> (18 - 6 * k)) & 63] : '=';
    }
    return out;
  }
  static bool lease_exists(const etcd_cluster& c, std::int64_t id) {
    return c.ctl({"lease", "list"}).out.find(hex(id)) != std::string::npos;
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

TEST_F(EtcdFailureTest, AReleaseAfterTheLeaseWasRevokedReportsItAndLeavesNothing) {
  etcd_cluster c(1);
  etcd_lock lock(c.url(), name());
  etcd_handle h = lock.acquire();
  ASSERT_EQ(c.ctl({"lease", "revoke", hex(h.lease_id())}).status, 0);
  std::error_code ec;
  h.release(ec);
  EXPECT_EQ(ec, tokenlock::errc::lock_lost);
  const std::string m = tokenlock::last_error_message();
  EXPECT_NE(m.find("our lease ended"), std::string::npos) << m;
  EXPECT_NE(m.find(h.key()), std::string::npos) << m;
  EXPECT_FALSE(h.owns());
  EXPECT_EQ(c.key_count(dir()), 0);
  EXPECT_FALSE(lease_exists(c, h.lease_id()));
  EXPECT_TRUE(lock.try_acquire());
}

// The role loses its permission while the lock is held: the release's
// delete is refused (server_error, with the fix), the handle still owns
// the grant, and once the permission is back the release removes it all.
TEST_F(EtcdFailureTest, AReleaseWhoseDeleteIsRefusedKeepsTheGrantUntilItCanRelease) {
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
TEST_F(EtcdFailureTest, AnExpiredAuthTokenIsFetchedAgainByHolderAndWaiter) {
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

// The port of a member's client URL.
int port_of(const etcd_cluster& c, int member) {
  const std::string u = c.client_url(member);
  return std::stoi(u.substr(u.rfind(':') + 1));
}

bool is_put(const http_proxy::request& r) {
  return r.path == "/v3/kv/txn" && r.body.find("request_put") != std::string::npos;
}

// The acquire's Txn reaches the member, which applies it, but its answer
// never comes: the client sends it again to the next member, finds the key
// holding its own owner id, and goes on from it.
TEST_F(EtcdFailureTest, AnAcquireWhosePutWasAppliedButNotAnsweredGoesOnFromIt) {
  etcd_cluster c(1);
  std::atomic<int> puts{0};
  http_proxy proxy(port_of(c, 0), [&](const http_proxy::request& r) {
    http_proxy::action a;
    if (is_put(r) && puts++ == 0) a.what = http_proxy::action::hold;
    return a;
  });
  etcd_lock_options o;
  o.command_timeout = 500ms;
  etcd_lock lock("etcd://127.0.0.1:" + std::to_string(proxy.port()) + "," + c.url().substr(7), name(), o);
  etcd_handle h = lock.acquire();
  EXPECT_EQ(proxy.held(), 1);
  EXPECT_TRUE(h.owns());
  EXPECT_EQ(c.key_count(dir()), 1);
  const auto info = lock.holder();
  ASSERT_TRUE(info);
  EXPECT_EQ(info->owner, h.owner());
  EXPECT_EQ(info->fence, h.fence());
  h.release();
  EXPECT_EQ(c.key_count(dir()), 0);
}

// The same, but what reached the member was another value under our
// lease's key: the acquire refuses it (server_error, "a key_prefix of the
// lock's own") and its lease, with that key, is revoked.
TEST_F(EtcdFailureTest, AnAcquireFindingAnotherValueUnderItsKeyRefusesAndLeavesNothing) {
  etcd_cluster c(1);
  std::atomic<int> puts{0};
  std::string lease;
  http_proxy proxy(port_of(c, 0), [&](const http_proxy::request& r) {
    http_proxy::action a;
    if (is_put(r) && puts++ == 0) {
      nlohmann::json txn = nlohmann::json::parse(r.body);
      auto& put = txn["success"][0]["request_put"];
      put["value"] = base64("intruder");
      lease = put.value("lease", "");
      a.what = http_proxy::action::hold;
      a.body = txn.dump();
    }
    return a;
  });
  etcd_lock_options o;
  o.command_timeout = 500ms;
  etcd_lock lock("etcd://127.0.0.1:" + std::to_string(proxy.port()) + "," + c.url().substr(7), name(), o);
  std::error_code ec;
  lock.acquire(ec);
  EXPECT_EQ(ec, tokenlock::errc::server_error);
  const std::string m = tokenlock::last_error_message();
  EXPECT_NE(m.find("written by another client"), std::string::npos) << m;
  EXPECT_NE(m.find("key_prefix"), std::string::npos) << m;
  EXPECT_EQ(proxy.held(), 1);
  EXPECT_EQ(c.key_count(dir()), 0);
  ASSERT_FALSE(lease.empty());
  EXPECT_FALSE(lease_exists(c, std::stoll(lease)));
}

// A waiter's watch answered with an error (a role that may not watch the
// key): the acquire fails with server_error naming the watch and the
// cause, and takes its place in line back.
TEST_F(EtcdFailureTest, AWatchAnsweringAnErrorFailsTheWaiterAndLeavesNothingOfIt) {
  etcd_cluster c(1);
  http_proxy proxy(port_of(c, 0), [](const http_proxy::request& r) {
    http_proxy::action a;
    if (r.path == "/v3/watch") {
      a.what = http_proxy::action::answer;
      a.body = R"({"error":{"grpc_code":7,"http_code":403,"message":"etcdserver: permission denied","http_status":"Forbidden"}})";
    }
    return a;
  });
  etcd_lock lock(c.url(), name());
  etcd_handle h = lock.acquire();
  etcd_lock_options o;
  o.wait = 30s;
  etcd_lock waiting("etcd://127.0.0.1:" + std::to_string(proxy.port()), name(), o);
  std::error_code ec;
  waiting.acquire(ec);
  EXPECT_EQ(ec, tokenlock::errc::server_error);
  const std::string m = tokenlock::last_error_message();
  EXPECT_NE(m.find("/v3/watch"), std::string::npos) << m;
  EXPECT_NE(m.find("permission denied"), std::string::npos) << m;
  EXPECT_EQ(proxy.answered(), 1);
  EXPECT_EQ(c.key_count(dir()), 1);  // the holder's key only
  h.release();
  EXPECT_EQ(c.key_count(dir()), 0);
}

}  // namespace
