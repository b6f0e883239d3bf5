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

#include "etcd_test_base.hpp"
#include "http_proxy.hpp"
#include "tokenlock/etcd_lock.hpp"

using namespace std::chrono_literals;
using tokenlock::etcd_handle;
using tokenlock::etcd_lock;
using tokenlock::etcd_lock_options;
using tokenlock::testing::etcd_cluster;
using tokenlock::testing::shared_cluster;
using tokenlock::testing::http_proxy;

namespace {

class EtcdFailureTest : public tokenlock::testing::etcd_test {};

TEST_F(EtcdFailureTest, AReleaseAfterTheLeaseWasRevokedReportsItAndLeavesNothing) {
  etcd_cluster& c = shared_cluster();
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



// The port of a member's client URL.
int port_of(const etcd_cluster& c, int member) {
  const std::string u = c.client_url(member);
  return std::stoi(u.substr(u.rfind(':') + 1));
}

// The proxy, then the cluster's members: a request the proxy holds times
// out and goes on to a member.
std::string through_proxy_first(const http_proxy& proxy, const etcd_cluster& c) {
  return "etcd://127.0.0.1:" + std::to_string(proxy.port()) + "," +
         c.url().substr(std::string("etcd://").size());
}

etcd_lock_options short_timeout() {
  etcd_lock_options o;
  o.command_timeout = 500ms;
  return o;
}

bool is_put(const http_proxy::request& r) {
  return r.path == "/v3/kv/txn" && r.body.find("request_put") != std::string::npos;
}

// The acquire's Txn reaches the member, which applies it, but its answer
// never comes: the client sends it again to the next member, finds the key
// holding its own owner id, and goes on from it.
TEST_F(EtcdFailureTest, AnAcquireWhosePutWasAppliedButNotAnsweredGoesOnFromIt) {
  etcd_cluster& c = shared_cluster();
  std::atomic<int> puts{0};
  http_proxy proxy(port_of(c, 0), [&](const http_proxy::request& r) {
    http_proxy::action a;
    if (is_put(r) && puts++ == 0) a.what = http_proxy::action::hold;
    return a;
  });
  etcd_lock lock(through_proxy_first(proxy, c), name(), short_timeout());
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
  etcd_cluster& c = shared_cluster();
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
  etcd_lock lock(through_proxy_first(proxy, c), name(), short_timeout());
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
  etcd_cluster& c = shared_cluster();
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
