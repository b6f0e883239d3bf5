// The backends the typed contract suites (lock_contract_test.cpp,
// update_contract_test.cpp, process_contract_test.cpp) run on, and their
// fixture: a lock directory always, Redis and etcd against real servers
// the tests start (skipped, with the reason, where they cannot run). Each
// suite opens its locks through tokenlock::open_lock, by spec.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include <unistd.h>

#include <boost/filesystem.hpp>
#include <gtest/gtest.h>

#include "etcd_cluster.hpp"
#include "redis_raw.hpp"
#include "redis_server.hpp"
#include "temp_dir.hpp"
#include "tokenlock/etcd_lock.hpp"
#include "tokenlock/lock.hpp"
#include "tokenlock/open_lock.hpp"
#include "tokenlock/redis_lock.hpp"
#include "tokenlock/rename_lock.hpp"

namespace tokenlock::contract {

using namespace std::chrono_literals;
using tokenlock::handle;
using tokenlock::lock_backend;

// Each backend: whether it can run here, a fresh lock's spec, and the
// looks into its store that the tests assert on (what the interface does
// not show: how many grant records it keeps, whether a waiter is in line).
struct directory_backend {
  static constexpr lock_backend kind = lock_backend::directory;
  using native = tokenlock::lock_handle;
  // The shortest lease the backend grants as asked.
  static constexpr std::chrono::milliseconds short_lease{300};
  static std::string unavailable() { return {}; }
  std::string spec(const std::string& name) { return (dir / name).string(); }
  // Held tokens in the lock directory: D/lockfile.<expiry>.<owner>.
  int records(const std::string& name) {
    int n = 0;
    boost::system::error_code ec;
    for (boost::filesystem::directory_iterator it(dir / name, ec), end; !ec && it != end;
         it.increment(ec))
      if (it->path().filename().string().rfind("lockfile.", 0) == 0) ++n;
    return n;
  }
  // A waiter heads the line: the board D.wait names a head (its third
  // 32-bit word; docs/protocol.md, The line of waiters).
  bool waiter_in_line(const std::string& name) {
    std::ifstream board((dir / (name + ".wait")).string(), std::ios::binary);
    std::uint32_t words[3] = {};
    return board.read(reinterpret_cast<char*>(words), sizeof words) && words[2] != 0;
  }
  // Everything of the lock in the store: D and the files beside it (D.wait ...).
  int written(const std::string& name) {
    int n = 0;
    for (boost::filesystem::directory_iterator it(dir.path()), end; it != end; ++it) {
      const std::string entry = it->path().filename().string();
      if (entry == name || entry.rfind(name + ".", 0) == 0) ++n;
    }
    return n;
  }
  tokenlock::testing::temp_dir dir;
};

struct redis_backend {
  static constexpr lock_backend kind = lock_backend::redis;
  using native = tokenlock::redis_handle;
  static constexpr std::chrono::milliseconds short_lease{300};
  static std::string unavailable() { return tokenlock::testing::redis_server::unavailable(); }
  // One server for the whole program: each test's lock has a name of its own.
  static tokenlock::testing::redis_server& server() {
    static tokenlock::testing::redis_server s;
    return s;
  }
  std::string spec(const std::string& name) { return server().url() + "#" + name; }
  // The grant's key (tokenlock:NAME).
  int records(const std::string& name) {
    return std::stoi(tokenlock::testing::raw(server(), {"EXISTS", "tokenlock:" + name}));
  }
  // Every key of the lock: the grant and tokenlock:NAME:* (fence, wake, waiters, handoff).
  int written(const std::string& name) {
    const std::string grant = "tokenlock:" + name;
    std::istringstream keys(tokenlock::testing::raw(server(), {"KEYS", grant + "*"}));
    int n = 0;
    for (std::string key; std::getline(keys, key);)
      if (key == grant || key.rfind(grant + ":", 0) == 0) ++n;
    return n;
  }
  // A client blocks on a wake list (the tests of one program run one at a time).
  bool waiter_in_line(const std::string&) {
    return tokenlock::testing::raw(server(), {"CLIENT", "LIST"}).find("cmd=blpop") !=
           std::string::npos;
  }
};

struct etcd_backend {
  static constexpr lock_backend kind = lock_backend::etcd;
  using native = tokenlock::etcd_handle;
  // etcd raises a lease below its minimum TTL (1 s or more here,
  // etcd_lock_test.cpp); 2 s is granted as asked.
  static constexpr std::chrono::milliseconds short_lease{2000};
  static std::string unavailable() { return tokenlock::testing::etcd_cluster::unavailable(); }
  // Three members, as etcd's own tests have it (etcd_test_base.hpp): the
  // contract holds through a cluster, not only a lone member.
  static tokenlock::testing::etcd_cluster& cluster() {
    static tokenlock::testing::etcd_cluster c(3);
    return c;
  }
  std::string spec(const std::string& name) { return cluster().url() + "#" + name; }
  // The holder's and the waiters' keys (tokenlock/NAME/...).
  int records(const std::string& name) { return cluster().key_count("tokenlock/" + name + "/"); }
  bool waiter_in_line(const std::string& name) { return records(name) >= 2; }
  int written(const std::string& name) { return records(name); }
};

// Until `condition` holds, looking every 2 ms (the cores are shared);
// false when `bound` passes first.
template <class Condition>
bool eventually(Condition condition, std::chrono::milliseconds bound = 10s) {
  const auto give_up = std::chrono::steady_clock::now() + bound;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

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
                                        const std::string& suffix = {}) {
    tokenlock::open_options o;
    o.wait = wait;
    o.lease = 10s;
    return open_with(o, suffix);
  }
  std::unique_ptr<tokenlock::lock> open_with(const tokenlock::open_options& o,
                                             const std::string& suffix = {}) {
    return tokenlock::open_lock(backend_.spec(name_ + suffix), o);
  }
  std::unique_ptr<tokenlock::lock> open_leased(std::chrono::milliseconds lease,
                                               std::chrono::milliseconds wait = 0ms) {
    tokenlock::open_options o;
    o.wait = wait;
    o.lease = lease;
    return open_with(o);
  }

  // Whether the lock is free, seen by a fresh lock: it can be taken (and
  // is given back at once).
  bool free_now() {
    std::optional<handle> h = open()->try_acquire();
    return h.has_value() && h->owns();
  }
  // The grant records the backend keeps for this lock (see the backends).
  int records() { return backend_.records(name_); }
  // Whatever the backend keeps for this lock, the fence included.
  int written() { return backend_.written(name_); }
  // Until a waiter of this lock is in line, at most 10 s.
  bool waiter_in_line() {
    return eventually([&] { return backend_.waiter_in_line(name_); });
  }
  static bool has_fences() { return Backend::kind != lock_backend::directory; }
  static bool on_a_server() { return Backend::kind != lock_backend::directory; }
  // Why a lease is refused, as each backend words it: a lock directory
  // tells the two ends apart (lock_options), an etcd lease longer than the
  // grant's is refused for its TTL (lock.hpp).
  static std::string refused_lease_says(std::chrono::milliseconds lease, bool refresh) {
    if (Backend::kind == lock_backend::directory)
      return lease <= 0ms ? "lease must be positive" : refresh ? "must not exceed 24 hours"
                                                               : "at most 24 hours";
    if (Backend::kind == lock_backend::etcd && refresh && lease > 0ms) return "keeps the TTL";
    return "at most 24 hours";
  }

  Backend backend_;
  std::string name_;
};

// The error `call` reports through its std::error_code& form, with the message.
template <class Call>
std::pair<std::error_code, std::string> error_of(Call call) {
  std::error_code ec;
  call(ec);
  return {ec, ec ? tokenlock::last_error_message() : std::string()};
}

struct backend_names {
  template <class B>
  static std::string GetName(int) {
    return tokenlock::backend_name(B::kind);
  }
};

using backends = ::testing::Types<directory_backend, redis_backend, etcd_backend>;

}  // namespace tokenlock::contract
