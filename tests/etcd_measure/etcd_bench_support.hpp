// What the etcd benchmarks (etcd_*.cpp here) have in common: the lock's
// bare requests through the library's own client class, a process per
// cycle, etcdctl's endpoints, and rounds of workloads in an order that
// changes from round to round, so that workloads compared by ratio see
// the same drift of the machine's speed. Failures throw
// std::runtime_error; the programs report them.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "etcd/etcd_client.hpp"
#include "etcd/etcd_requests.hpp"

namespace tokenlock::bench {

inline std::unique_ptr<detail::etcd_client> etcd_bare_client(const std::string& url) {
  detail::etcd_url u;
  if (detail::failure f = detail::parse_etcd_url(url, u)) throw std::runtime_error(f.message);
  return std::make_unique<detail::etcd_client>(u, std::chrono::seconds(2), std::chrono::seconds(2));
}

// The four requests of an uncontended acquire + release (lease grant, the
// put-if-absent Txn, the compare-delete Txn, the revoke), sent bare: the
// floor the lock is compared with. The key (16 hex digits of the lease)
// and the value (as long as an owner id) have the lock's sizes, so that
// both send the same bytes. `dir` ends with '/'.
inline void etcd_bare_cycle(detail::etcd_client& c, const std::string& dir) {
  using namespace tokenlock::detail;
  long long id = 0, ttl = 0, rev = 0;
  bool created = false, has_first = false, deleted = false, gone = false;
  etcd_kv first;
  failure f = lease_grant(c, 60, id, ttl);
  char hex[20];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(id));
  const std::string key = dir + hex, value(48, 'o');
  if (!f) f = put_if_absent(c, key, value, id, dir, created, rev, first, has_first);
  if (!f) f = delete_if_revision(c, "release", key, rev, deleted);
  if (!f) f = lease_revoke(c, "release", id, gone);
  if (f || !created || !deleted) throw std::runtime_error("bare cycle on " + dir + " failed: " + f.message);
}

// Runs argv (PATH searched) and waits for it; throws unless it exits 0.
// Returns the child's peak RSS in KiB.
inline long run_process(const std::vector<std::string>& argv) {
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  int st = 0;
  struct rusage ru {};
  if (::wait4(pid, &st, 0, &ru) != pid) throw std::runtime_error("wait4 failed");
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    std::string cmd;
    for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
    throw std::runtime_error(cmd + " failed (status " + std::to_string(st) + ")");
  }
  return ru.ru_maxrss;
}

// etcdctl's --endpoints from the lock's URL (plain http members only).
inline std::string etcdctl_endpoints(const std::string& url) {
  detail::etcd_url u;
  if (detail::failure f = detail::parse_etcd_url(url, u)) throw std::runtime_error(f.message);
  std::string e;
  for (const auto& m : u.members) e += (e.empty() ? "" : ",") + m;
  return e;
}

inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

inline double median(std::vector<double> v) { return percentile(std::move(v), 0.5); }

using workloads = std::map<std::string, std::function<void()>>;

// Each round runs every workload `cycles` times, in a shuffled order;
// returns each workload's microseconds per cycle, one entry per round.
inline std::map<std::string, std::vector<double>> run_rounds(const workloads& w, int rounds, int cycles) {
  std::vector<std::string> order;
  for (const auto& e : w) order.push_back(e.first);
  std::map<std::string, std::vector<double>> us;
  std::mt19937 rng(12345);
  for (int r = 0; r < rounds; ++r) {
    std::shuffle(order.begin(), order.end(), rng);
    for (const auto& name : order) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int c = 0; c < cycles; ++c) w.at(name)();
      const std::chrono::duration<double, std::micro> d = std::chrono::steady_clock::now() - t0;
      us[name].push_back(d.count() / cycles);
    }
  }
  return us;
}

// The median over rounds of a/b taken within each round: a machine whose
// speed drifts moves both workloads of a round alike.
inline double median_ratio(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) r.push_back(a[i] / b[i]);
  return median(r);
}

}  // namespace tokenlock::bench
