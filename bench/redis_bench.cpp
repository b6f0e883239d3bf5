// The Redis lock against its floor, side by side in one run on one server
// (docs/redis.md, Figures; bench/redis_bench.sh starts the server):
//
//   redis_bench URL pair ROUNDS N
//     acquire+release of redis_lock against the floor of two bare round
//     trips through hiredis (SET key NX PX, then DEL), interleaved in ROUNDS
//     rounds of N each; prints the medians per operation and their ratio.
//   redis_bench URL shared ROUNDS N
//     an uncontended shared acquire+release against an exclusive one,
//     interleaved in ROUNDS rounds of N each; prints the medians per
//     operation and their ratio (the target: at most 1.5x).
//   redis_bench URL handoff N
//     a waiting process takes the lock after a release: the time from just
//     before the release to the waiter's acquire returning (one host, one
//     monotonic clock), median and 90th percentile over N hand-offs, and
//     the median round trip (PING) for scale.
//   redis_bench URL contend PROCS SECONDS
//     PROCS processes acquire and release one lock for SECONDS: total
//     acquisitions per second and Jain's fairness index over the
//     processes' counts.
// Output lines are "FIGURE name=value unit=..." for the reproduction
// script; absolute times on a shared machine are noise, ratios are not.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <vector>

#include <hiredis/hiredis.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tokenlock/redis_lock.hpp"

using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "redis_bench: %s\n", what.c_str());
  std::exit(2);
}

struct endpoint {
  std::string host;
  int port = 0;
  std::string password;
};

// The bench's own URLs only: redis://[:password@]127.0.0.1:PORT
endpoint parse(const std::string& url) {
  endpoint e;
  std::string rest = url.substr(std::string("redis://").size());
  if (auto at = rest.find('@'); at != std::string::npos) {
    e.password = rest.substr(1, at - 1);
    rest = rest.substr(at + 1);
  }
  const auto colon = rest.find(':');
  e.host = rest.substr(0, colon);
  e.port = std::atoi(rest.substr(colon + 1).c_str());
  return e;
}

redisContext* raw_connect(const std::string& url) {
  const endpoint e = parse(url);
  redisContext* c = redisConnect(e.host.c_str(), e.port);
  if (!c || c->err) die("cannot connect to " + url);
  if (!e.password.empty()) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "AUTH %s", e.password.c_str()));
    if (!r || r->type == REDIS_REPLY_ERROR) die("AUTH failed");
    freeReplyObject(r);
  }
  return c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

double us_since(clk::time_point t) {
  return std::chrono::duration<double, std::micro>(clk::now() - t).count();
}

// The server's own time spent so far in the commands named, in
// microseconds (INFO commandstats).
double server_usec(redisContext* c, std::initializer_list<std::string> names) {
  auto* r = static_cast<redisReply*>(redisCommand(c, "INFO commandstats"));
  if (!r || r->type != REDIS_REPLY_STRING) die("INFO commandstats failed");
  double total = 0;
  const std::string text(r->str, r->len);
  freeReplyObject(r);
  for (std::size_t at = 0; (at = text.find("cmdstat_", at)) != std::string::npos;) {
    const std::size_t colon = text.find(':', at);
    const std::string name = text.substr(at + 8, colon - at - 8);
    const std::size_t u = text.find(",usec=", colon);
    for (const std::string& n : names)
      if (name == n) total += std::atof(text.c_str() + u + 6);
    at = colon;
  }
  return total;
}

int pair(const std::string& url, int rounds, int n) {
  redisContext* c = raw_connect(url);
  tokenlock::redis_lock lock(url, "bench:pair");
  std::vector<double> floor_us, lock_us;
  // Where the lock's extra time goes: the server's time per cycle in each
  // half (the lock's scripts count their inner commands too, so only
  // EVALSHA is summed for it).
  double floor_server = 0, lock_server = 0;
  for (int r = 0; r < rounds; ++r) {
    const double s0 = server_usec(c, {"set", "del"});
    auto t = clk::now();
    for (int i = 0; i < n; ++i) {
      auto* a = static_cast<redisReply*>(redisCommand(c, "SET bench:floor x NX PX 30000"));
      auto* b = static_cast<redisReply*>(redisCommand(c, "DEL bench:floor"));
      if (!a || !b) die("floor command failed");
      freeReplyObject(a);
      freeReplyObject(b);
    }
    floor_us.push_back(us_since(t) / n);
    const double s1 = server_usec(c, {"set", "del"});
    const double e0 = server_usec(c, {"evalsha"});
    t = clk::now();
    for (int i = 0; i < n; ++i) lock.acquire().release();
    lock_us.push_back(us_since(t) / n);
    lock_server += server_usec(c, {"evalsha"}) - e0;
    floor_server += s1 - s0;
  }
  // The ratio of each round's pair, then their median: a machine whose
  // speed drifts (a shared VM) moves both halves of a round alike.
  std::vector<double> ratio;
  for (std::size_t i = 0; i < floor_us.size(); ++i) ratio.push_back(lock_us[i] / floor_us[i]);
  std::printf("FIGURE name=floor_set_nx_del value=%.1f unit=us\n", median(floor_us));
  std::printf("FIGURE name=lock_acquire_release value=%.1f unit=us\n", median(lock_us));
  std::printf("FIGURE name=lock_vs_floor value=%.2f unit=x\n", median(ratio));
  const double cycles = static_cast<double>(rounds) * n;
  std::printf("FIGURE name=floor_server_time value=%.1f unit=us\n", floor_server / cycles);
  std::printf("FIGURE name=lock_server_time value=%.1f unit=us\n", lock_server / cycles);
  redisFree(c);
  return 0;
}

int shared_pair(const std::string& url, int rounds, int n) {
  tokenlock::redis_lock exclusive(url, "bench-shared");
  tokenlock::redis_lock_options o;
  o.mode = tokenlock::lock_mode::shared;
  tokenlock::redis_lock shared(url, "bench-shared", o);
  std::vector<double> exclusive_us, shared_us, ratio;
  for (int r = 0; r < rounds; ++r) {
    auto t = clk::now();
    for (int i = 0; i < n; ++i) exclusive.acquire().release();
    exclusive_us.push_back(us_since(t) / n);
    t = clk::now();
    for (int i = 0; i < n; ++i) shared.acquire().release();
    shared_us.push_back(us_since(t) / n);
    ratio.push_back(shared_us.back() / exclusive_us.back());
  }
  std::printf("FIGURE name=exclusive_acquire_release value=%.1f unit=us\n", median(exclusive_us));
  std::printf("FIGURE name=shared_acquire_release value=%.1f unit=us\n", median(shared_us));
  std::printf("FIGURE name=shared_vs_exclusive value=%.2f unit=x\n", median(ratio));
  std::printf("FIGURE name=shared_vs_exclusive_p10_p90 value=%.2f-%.2f unit=x\n",
              percentile(ratio, 0.1), percentile(ratio, 0.9));
  return 0;
}

int handoff(const std::string& url, int n) {
  redisContext* c = raw_connect(url);
  // Round trips are timed between the hand-offs, not before them: what a
  // round trip costs on a shared VM drifts over a run.
  std::vector<double> rtt;
  std::vector<double> lat;
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < 5; ++k) {
      auto t = clk::now();
      freeReplyObject(redisCommand(c, "PING"));
      rtt.push_back(us_since(t));
    }
    tokenlock::redis_lock_options o;
    o.wait = 10s;
    tokenlock::redis_lock holder_lock(url, "bench-handoff", o);
    tokenlock::redis_handle h = holder_lock.acquire();
    int from_child[2];
    if (::pipe(from_child)) die("pipe");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(from_child[0]);
      tokenlock::redis_lock waiter(url, "bench-handoff", o);
      // Tell the parent we are about to wait; it releases once our BLPOP
      // has been seen on the server.
      char ready = 'r';
      if (::write(from_child[1], &ready, 1) != 1) _exit(2);
      tokenlock::redis_handle g = waiter.acquire();
      const auto done = clk::now().time_since_epoch().count();
      if (::write(from_child[1], &done, sizeof done) != sizeof done) _exit(2);
      g.release();
      _exit(0);
    }
    ::close(from_child[1]);
    char ready;
    if (::read(from_child[0], &ready, 1) != 1) die("child");
    // Released once the waiter is blocked on the server (CLIENT LIST).
    for (;;) {
      auto* r = static_cast<redisReply*>(redisCommand(c, "CLIENT LIST"));
      const bool blocked = r && r->type == REDIS_REPLY_STRING && std::string(r->str).find("cmd=blpop") != std::string::npos;
      freeReplyObject(r);
      if (blocked) break;
    }
    const auto before = clk::now();
    h.release();
    decltype(before.time_since_epoch().count()) done = 0;
    if (::read(from_child[0], &done, sizeof done) != sizeof done) die("child result");
    lat.push_back(std::chrono::duration<double, std::micro>(
                      clk::duration(done) - before.time_since_epoch())
                      .count());
    ::waitpid(pid, nullptr, 0);
    ::close(from_child[0]);
  }
  std::printf("FIGURE name=rtt_ping value=%.1f unit=us\n", median(rtt));
  std::printf("FIGURE name=handoff_median value=%.1f unit=us\n", median(lat));
  std::printf("FIGURE name=handoff_p90 value=%.1f unit=us\n", percentile(lat, 0.9));
  std::printf("FIGURE name=handoff_in_rtts value=%.2f unit=rtt\n", median(lat) / median(rtt));
  redisFree(c);
  return 0;
}

int contend(const std::string& url, int procs, double seconds) {
  std::vector<int> fds;
  std::vector<pid_t> pids;
  int gate[2];
  if (::pipe(gate)) die("pipe");
  for (int p = 0; p < procs; ++p) {
    int fd[2];
    if (::pipe(fd)) die("pipe");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fd[0]);
      ::close(gate[1]);
      char c;
      if (::read(gate[0], &c, 1) < 0) _exit(2);  // EOF: all start together
      tokenlock::redis_lock_options o;
      o.wait = 60s;
      tokenlock::redis_lock lock(url, "bench:contend", o);
      long count = 0;
      const auto end = clk::now() + std::chrono::duration<double>(seconds);
      while (clk::now() < end) {
        lock.acquire().release();
        ++count;
      }
      if (::write(fd[1], &count, sizeof count) != sizeof count) _exit(2);
      _exit(0);
    }
    ::close(fd[1]);
    fds.push_back(fd[0]);
    pids.push_back(pid);
  }
  ::close(gate[0]);
  ::close(gate[1]);
  double sum = 0, sq = 0;
  for (int p = 0; p < procs; ++p) {
    long count = 0;
    if (::read(fds[p], &count, sizeof count) != sizeof count) die("worker");
    sum += static_cast<double>(count);
    sq += static_cast<double>(count) * static_cast<double>(count);
    ::waitpid(pids[p], nullptr, 0);
  }
  std::printf("FIGURE name=contend_%d_ops value=%.0f unit=acquisitions/s\n", procs, sum / seconds);
  std::printf("FIGURE name=contend_%d_jain value=%.3f unit=index\n", procs,
              sq > 0 ? sum * sum / (procs * sq) : 0.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3)
    die("usage: redis_bench URL pair ROUNDS N | shared ROUNDS N | handoff N | "
        "contend PROCS SECONDS");
  const std::string url = argv[1], mode = argv[2];
  try {
    if (mode == "pair" && argc == 5) return pair(url, std::atoi(argv[3]), std::atoi(argv[4]));
    if (mode == "shared" && argc == 5)
      return shared_pair(url, std::atoi(argv[3]), std::atoi(argv[4]));
    if (mode == "handoff" && argc == 4) return handoff(url, std::atoi(argv[3]));
    if (mode == "contend" && argc == 5) return contend(url, std::atoi(argv[3]), std::atof(argv[4]));
  } catch (const std::exception& e) {
    die(e.what());
  }
  die("bad arguments");
}
