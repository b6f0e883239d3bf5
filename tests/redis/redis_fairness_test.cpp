// How long a waiter of the Redis lock waits when newcomers keep arriving:
// threads that take the lock, release it and come straight back (a
// newcomer racing the waiter the release woke), against a real
// redis-server. Each acquisition counts the grants that went to others
// while it waited (hand-offs it was passed over for), and of those the ones
// after it joined the line (its last BLPOP reached the server), its wait,
// and how often it was woken by a release and then found the lock taken
// anyway (docs/redis.md, "Hand-off").
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "redis/redis_wait_stats.hpp"
#include "redis_raw.hpp"
#include "redis_server.hpp"
#include "tokenlock/redis_lock.hpp"

using namespace std::chrono_literals;
using tokenlock::redis_handle;
using tokenlock::redis_lock;
using tokenlock::redis_lock_options;
using tokenlock::detail::this_thread_redis_wait_stats;
using tokenlock::testing::raw;
using tokenlock::testing::redis_server;

namespace {

class RedisFairnessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = redis_server::unavailable();
    if (!why.empty()) GTEST_SKIP() << why;
    server = std::make_unique<redis_server>();
  }
  std::unique_ptr<redis_server> server;
};

// One acquisition as its thread saw it.
struct acquisition {
  std::uint64_t passed_over = 0;  // grants to others while it waited
  std::uint64_t passed_over_in_line = 0;  // of those, after it joined the line
  std::uint64_t wakes = 0, wakes_lost = 0, wakes_lost_within_grace = 0;
  std::chrono::microseconds waited{0};
  int cycle = 0;  // its thread's first acquisition is 0
};

struct contention_result {
  std::vector<acquisition> all;
  bool overlapped = false;  // two holders at once (never: mutual exclusion)
  std::vector<std::string> errors;  // what a thread's acquire or release threw
};

// `threads` threads, each `cycles` times: acquire, count the grant, release,
// and straight back to acquire. All start together.
contention_result contend(const std::string& url, int threads, int cycles) {
  contention_result out;
  std::mutex m;
  std::condition_variable go;
  bool started = false;
  std::atomic<std::uint64_t> grants{0};
  std::atomic<int> inside{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      redis_lock_options o;
      o.wait = 60s;
      o.lease = 30s;
      redis_lock lock(url, "fair", o);
      std::vector<acquisition> mine;
      // The grants counted when this thread's last BLPOP was written: it
      // is in the line from then on (redis_wait_stats.hpp). An acquisition
      // that never blocked was never in the line.
      std::uint64_t joined = 0;
      bool in_line = false;
      this_thread_redis_wait_stats().joined_line = [&] {
        joined = grants.load();
        in_line = true;
      };
      {
        std::unique_lock<std::mutex> l(m);
        go.wait(l, [&] { return started; });
      }
      std::string error;
      try {
      for (int i = 0; i < cycles; ++i) {
        const auto before = this_thread_redis_wait_stats();
        const std::uint64_t seen = grants.load();
        in_line = false;
        const auto start = std::chrono::steady_clock::now();
        redis_handle h = lock.acquire();
        acquisition a;
        a.cycle = i;
        a.waited = std::chrono::duration_cast<std::chrono::microseconds>(
            std::chrono::steady_clock::now() - start);
        if (inside.fetch_add(1) != 0) out.overlapped = true;
        const std::uint64_t mine_at = grants.fetch_add(1);
        a.passed_over = mine_at - seen;
        a.passed_over_in_line = in_line ? mine_at - joined : 0;
        inside.fetch_sub(1);
        h.release();
        a.wakes = this_thread_redis_wait_stats().wakes - before.wakes;
        a.wakes_lost = this_thread_redis_wait_stats().wakes_lost - before.wakes_lost;
        a.wakes_lost_within_grace = this_thread_redis_wait_stats().wakes_lost_within_grace -
                                    before.wakes_lost_within_grace;
        mine.push_back(a);
      }
      } catch (const std::exception& e) {
        error = e.what();
      }
      this_thread_redis_wait_stats().joined_line = nullptr;
      std::lock_guard<std::mutex> l(m);
      out.all.insert(out.all.end(), mine.begin(), mine.end());
      if (!error.empty()) out.errors.push_back(error);
    });
  {
    std::lock_guard<std::mutex> l(m);
    started = true;
  }
  go.notify_all();
  for (auto& t : pool) t.join();
  return out;
}

struct contention_summary {
  std::uint64_t most_passed_over = 0, most_passed_over_in_line = 0, most_wakes_lost = 0;
  std::uint64_t wakes = 0, wakes_lost = 0, wakes_lost_within_grace = 0;
  acquisition most_passed_over_by;  // the acquisition passed over most often
  std::chrono::microseconds longest_wait{0};
  std::string text;
};

contention_summary summarize(const contention_result& r) {
  contention_summary s;
  for (const auto& a : r.all) {
    if (a.passed_over > s.most_passed_over) s.most_passed_over_by = a;
    s.most_passed_over = std::max(s.most_passed_over, a.passed_over);
    s.most_passed_over_in_line = std::max(s.most_passed_over_in_line, a.passed_over_in_line);
    s.wakes_lost_within_grace += a.wakes_lost_within_grace;
    s.most_wakes_lost = std::max(s.most_wakes_lost, a.wakes_lost);
    s.longest_wait = std::max(s.longest_wait, a.waited);
    s.wakes_lost += a.wakes_lost;
    s.wakes += a.wakes;
  }
  std::ostringstream t;
  t << r.all.size() << " acquisitions: passed over at most " << s.most_passed_over
    << " times (its thread's acquisition " << s.most_passed_over_by.cycle << ", "
    << s.most_passed_over_by.passed_over_in_line << " after joining the line, in "
    << s.most_passed_over_by.waited.count() / 1000.0 << " ms), at most "
    << s.most_passed_over_in_line << " after joining the line, longest wait "
    << s.longest_wait.count() / 1000.0 << " ms, " << s.wakes
    << " wake-ups of which " << s.wakes_lost << " lost (" << s.wakes_lost_within_grace
    << " within the hand-off's grace; at most " << s.most_wakes_lost << " by one acquisition)";
  s.text = t.str();
  return s;
}

// Eight threads that come straight back after each release: every release
// has a newcomer (the releaser itself) racing the waiter it woke. Without
// the hand-off, 36 to 44 % of the wake-ups were lost to such newcomers (up
// to 10 by one acquisition) and a waiter was passed over up to 160 times.
//
// How often a waiter is passed over in all has no bound that timing cannot
// break: its
// place in the line is where its BLPOP reaches the server, not where it
// was refused (two round trips on two connections), and a thread the
// scheduler stops in between is out of the line while the others go round
// it as often as they can. Schedule: A is refused while B holds the lock
// and C..H are blocked in that order; A is preempted before its BLPOP is
// written; B releases and wakes C, comes straight back, is refused (the
// hand-off) and blocks behind H; C releases, wakes D and blocks behind B;
// ... every grant passes A over once, until A's BLPOP is read and A is
// behind the six blocked and the holder: 7 more. Likewise a thread whose
// first attempt is late (connecting, loading the scripts) is not yet
// contending. On the 2-core VM with four copies of this test at once, one
// acquisition in the middle of a thread's 40 was passed over 98 times in
// 16 ms (6 of them after it joined the line), a first one 126 times; the
// test reports these, and asserts what the lock promises:
//
// Once a waiter has joined the line, each of the N - 1 others is granted
// at most once before it. The waiter count includes it, so every release
// wakes the line's head and keeps the free lock for it; the holder, or a
// waiter woken or blocked ahead, releases, comes straight back, is refused
// and sends its BLPOP only once that refusal is answered. Its release was
// sent after our BLPOP was on the server's socket, and the server accepts
// new connections and reads every ready socket in each pass, so ours is
// read no later than the pass after the release's, before that BLPOP.
// So at most 7 of 8 here. (Grants are counted when the BLPOP's write
// returned: over loopback its bytes are on the server's socket by then.
// One granted before and counted after is the holder's, and it is granted
// no more. An acquisition that never blocked was never in the
// line.) That holds while every woken waiter comes within the hand-off's
// grace (500 ms): one slower may find the lock taken by anyone, and the
// line's order is off. So a wake-up lost within the grace (counted from
// the BLPOP, which came before the release) would be a broken promise and
// is asserted never to happen, and the bound in the line is asserted when
// no wake-up was lost at all; a run with late ones says so.
TEST_F(RedisFairnessTest, EveryWaiterAmongEightThatComeStraightBackIsServedWithinSevenHandOffsOfJoiningTheLine) {
  constexpr int threads = 8, cycles = 40;
  const contention_result r = contend(server->url(), threads, cycles);
  const contention_summary s = summarize(r);
  std::cout << s.text << std::endl;
  EXPECT_TRUE(r.errors.empty()) << r.errors.front();
  EXPECT_FALSE(r.overlapped);
  ASSERT_EQ(r.all.size(), static_cast<std::size_t>(threads * cycles));
  EXPECT_EQ(s.wakes_lost_within_grace, 0u) << s.text;
  if (s.wakes_lost == 0)
    EXPECT_LE(s.most_passed_over_in_line, threads - 1u) << s.text;
  else
    std::cout << "the bound in the line is not checked: " << s.wakes_lost
              << " woken waiters lost the lock, all later than the hand-off's grace after their "
                 "BLPOP" << std::endl;
  EXPECT_GT(s.wakes, 0u) << "nobody waited: the test contended for nothing";
}

// The server's count of calls per command (INFO commandstats), without
// INFO itself.
std::map<std::string, long> calls(const redis_server& server) {
  std::map<std::string, long> out;
  std::istringstream in(raw(server, {"INFO", "commandstats"}));
  for (std::string line; std::getline(in, line);) {
    // cmdstat_evalsha:calls=2,usec=...
    const auto colon = line.find(':'), at = line.find("calls=");
    if (line.rfind("cmdstat_", 0) != 0 || colon == std::string::npos || at == std::string::npos) continue;
    const std::string name = line.substr(8, colon - 8);
    if (name != "info") out[name] = std::stol(line.substr(at + 6));
  }
  return out;
}

// The hand-off costs an uncontended lock nothing in round trips: an
// acquire and a release are one script each, as before. (The server counts
// the commands a script calls under their own names too, so this counts
// the commands a client sends: the scripts, and everything else the lock
// ever sends on its own.)
TEST_F(RedisFairnessTest, AnUncontendedAcquireAndReleaseAreTwoRoundTrips) {
  redis_lock_options o;
  o.wait = 5s;
  redis_lock lock(server->url(), "fair", o);
  lock.acquire().release();  // connects and loads the scripts
  const auto before = calls(*server);
  lock.acquire().release();
  const auto after = calls(*server);
  const auto more = [&](const std::string& name) {
    const auto b = before.find(name), a = after.find(name);
    return (a == after.end() ? 0 : a->second) - (b == before.end() ? 0 : b->second);
  };
  EXPECT_EQ(more("evalsha"), 2);
  for (const char* other : {"eval", "blpop", "wait", "auth", "select", "script", "ping"})
    EXPECT_EQ(more(other), 0) << other;
}

}  // namespace
