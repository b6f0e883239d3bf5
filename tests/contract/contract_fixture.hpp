// The backends the typed contract suites (lock_contract_test.cpp,
// update_contract_test.cpp) run on, and their fixture: a lock directory
// always, Redis and etcd against real servers the tests start (skipped,
// with the reason, where they cannot run). Each suite opens its locks
// through tokenlock::open_lock, by spec.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>

#include "etcd_cluster.hpp"
#include "redis_server.hpp"
#include "temp_dir.hpp"
#include "tokenlock/etcd_lock.hpp"
#include "tokenlock/lock.hpp"
#include "tokenlock/open_lock.hpp"
#include "tokenlock/redis_lock.hpp"
#include "tokenlock/rename_lock.hpp"

namespace tokenlock::contract {

using namespace std::chrono_literals;
using tokenlock::lock_backend;

// Each backend: whether it can run here, and a fresh lock's spec.
struct directory_backend {
  static constexpr lock_backend kind = lock_backend::directory;
  using native = tokenlock::lock_handle;
  static std::string unavailable() { return {}; }
  std::string spec(const std::string& name) { return (dir / name).string(); }
  tokenlock::testing::temp_dir dir;
};

struct redis_backend {
  static constexpr lock_backend kind = lock_backend::redis;
  using native = tokenlock::redis_handle;
  static std::string unavailable() { return tokenlock::testing::redis_server::unavailable(); }
  // One server for the whole program: each test's lock has a name of its own.
  static tokenlock::testing::redis_server& server() {
    static tokenlock::testing::redis_server s;
    return s;
  }
  std::string spec(const std::string& name) { return server().url() + "#" + name; }
};

struct etcd_backend {
  static constexpr lock_backend kind = lock_backend::etcd;
  using native = tokenlock::etcd_handle;
  static std::string unavailable() { return tokenlock::testing::etcd_cluster::unavailable(); }
  static tokenlock::testing::etcd_cluster& cluster() {
    static tokenlock::testing::etcd_cluster c(1);
    return c;
  }
  std::string spec(const std::string& name) { return cluster().url() + "#" + name; }
};

template <class Backend>
class LockContract : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = Backend::unavailable();
    if (!why.empty()) GTEST_SKIP() << why;
    name_ = std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" +
            std::to_string(::getpid());
  }

  // Another lock on the same spec, as another process would open it.
  std::unique_ptr<tokenlock::lock> open(std::chrono::milliseconds wait = 0ms,
                                        const std::string& suffix = {},
                                        std::chrono::milliseconds lease = 10s) {
    tokenlock::open_options o;
    o.wait = wait;
    o.lease = lease;
    return tokenlock::open_lock(backend_.spec(name_ + suffix), o);
  }

  // Whether the lock is free, seen by a fresh lock: it can be taken (and
  // is given back at once).
  bool free_now() {
    std::optional<tokenlock::handle> h = open()->try_acquire();
    return h.has_value() && h->owns();
  }

  Backend backend_;
  std::string name_;
};

struct backend_names {
  template <class B>
  static std::string GetName(int) {
    return tokenlock::backend_name(B::kind);
  }
};

using backends = ::testing::Types<directory_backend, redis_backend, etcd_backend>;

}  // namespace tokenlock::contract
