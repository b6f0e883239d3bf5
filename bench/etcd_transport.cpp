// What the etcd lock's transport costs a short-lived process, side by side
// in one run (docs/etcd.md, Transport).
//
//   etcd_transport [--rounds N] [--cycles N] URL
//
// Each round measures every workload once, in an order that changes from
// round to round, `cycles` times each; the program prints each workload's
// median time per cycle over the rounds and the ratios that decide the
// transport and check the targets:
//   process_floor   fork + exec of this program, which exits at once: what
//                   any per-request process costs before it locks
//   lock_cold       a fresh process: etcd_lock acquire + release (connects,
//                   then grant, Txn, delete Txn, revoke)
//   raw_cold        a fresh process: the same four requests sent bare by the
//                   same client over one new connection
//   lock_warm       acquire + release in this process, connection kept
//   raw_warm        the four bare requests in this process, connection kept
//   etcdctl_lock    `etcdctl lock NAME true`: etcd's own (gRPC) client, one
//                   process per cycle
// A gRPC C++ client is not among them: see docs/etcd.md for what it takes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "etcd/etcd_client.hpp"
#include "etcd/etcd_requests.hpp"
#include "tokenlock/etcd_lock.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using tokenlock::detail::etcd_client;
using tokenlock::detail::failure;

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "etcd_transport: %s\n", m.c_str());
  std::exit(2);
}

std::unique_ptr<etcd_client> make_client(const std::string& url) {
  tokenlock::detail::etcd_url u;
  if (failure f = tokenlock::detail::parse_etcd_url(url, u)) die(f.message);
  return std::make_unique<etcd_client>(u, std::chrono::seconds(2), std::chrono::seconds(2));
}

// The lock's four requests, sent bare: the floor an acquire + release
// is compared with.
void raw_cycle(etcd_client& c, const std::string& key) {
  using namespace tokenlock::detail;
  long long id = 0, ttl = 0, rev = 0;
  bool created = false, has_first = false, deleted = false, gone = false;
  etcd_kv first;
  failure f = lease_grant(c, 60, id, ttl);
  if (!f) f = put_if_absent(c, key + std::to_string(id), "bench", id, key, created, rev, first, has_first);
  if (!f) f = delete_if_revision(c, "release", key + std::to_string(id), rev, deleted);
  if (!f) f = lease_revoke(c, "release", id, gone);
  if (f || !created || !deleted) die("raw cycle failed: " + f.message);
}

void lock_cycle(tokenlock::etcd_lock& lock) { lock.acquire().release(); }

int child_main(const std::string& mode, const std::string& url) {
  if (mode == "noop") return 0;
  if (mode == "lock") {
    tokenlock::etcd_lock lock(url, "bench-lock-cold");
    lock_cycle(lock);
    return 0;
  }
  if (mode == "raw") {
    raw_cycle(*make_client(url), "tokenlock/bench-raw-cold/");
    return 0;
  }
  die("unknown child mode " + mode);
}

void run_process(const std::vector<std::string>& argv) {
  const pid_t pid = ::fork();
  if (pid < 0) die("fork failed");
  if (pid == 0) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die(argv[0] + std::string(" ") + argv[1] + " failed");
}

// etcdctl's endpoints from our URL (plain http members only).
std::string etcdctl_endpoints(const std::string& url) {
  tokenlock::detail::etcd_url u;
  if (failure f = tokenlock::detail::parse_etcd_url(url, u)) die(f.message);
  std::string e;
  for (const auto& m : u.members) e += (e.empty() ? "" : ",") + m;
  return e;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--child") return child_main(argv[2], argv[3]);
  int rounds = 31, cycles = 20;
  std::string url;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (a == "--cycles" && i + 1 < argc) cycles = std::atoi(argv[++i]);
    else if (a.rfind("etcd", 0) == 0) url = a;
    else die("usage: etcd_transport [--rounds N] [--cycles N] etcd://host:port[,...]");
  }
  if (url.empty() || rounds < 1 || cycles < 1) die("usage: etcd_transport [--rounds N] [--cycles N] URL");
  const std::string self = argv[0], endpoints = etcdctl_endpoints(url);
  tokenlock::etcd_lock warm_lock(url, "bench-lock-warm");
  auto warm_client = make_client(url);
  const std::map<std::string, std::function<void()>> workloads{
      {"process_floor", [&] { run_process({self, "--child", "noop", url}); }},
      {"lock_cold", [&] { run_process({self, "--child", "lock", url}); }},
      {"raw_cold", [&] { run_process({self, "--child", "raw", url}); }},
      {"lock_warm", [&] { lock_cycle(warm_lock); }},
      {"raw_warm", [&] { raw_cycle(*warm_client, "tokenlock/bench-raw-warm/"); }},
      {"etcdctl_lock",
       [&] { run_process({"etcdctl", "--endpoints=" + endpoints, "lock", "bench-etcdctl", "true"}); }},
  };
  std::vector<std::string> order;
  for (const auto& w : workloads) order.push_back(w.first);
  std::map<std::string, std::vector<double>> us;
  std::mt19937 rng(12345);
  for (int r = 0; r < rounds; ++r) {
    std::shuffle(order.begin(), order.end(), rng);
    for (const auto& name : order) {
      const auto t0 = clock_type::now();
      for (int c = 0; c < cycles; ++c) workloads.at(name)();
      const std::chrono::duration<double, std::micro> d = clock_type::now() - t0;
      us[name].push_back(d.count() / cycles);
    }
  }
  std::printf("# %d rounds of %d cycles; median microseconds per cycle\n", rounds, cycles);
  for (const auto& name : order) std::printf("%-14s %10.1f\n", name.c_str(), median(us[name]));
  const auto m = [&](const char* n) { return median(us[n]); };
  std::printf("ratio lock_warm/raw_warm          %.3f\n", m("lock_warm") / m("raw_warm"));
  std::printf("ratio (lock_cold-floor)/(raw_cold-floor) %.3f\n",
              (m("lock_cold") - m("process_floor")) / (m("raw_cold") - m("process_floor")));
  std::printf("ratio etcdctl_lock/lock_cold      %.3f\n", m("etcdctl_lock") / m("lock_cold"));
  return 0;
}
