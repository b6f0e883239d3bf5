// Shared holders and semaphores on the Redis lock (docs/redis.md, Shared
// locks and semaphores), against a real redis-server each test starts:
// readers together, a writer alone and preferred, N slots at most, leases
// per holder, and what a client of the previous version sees.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <future>
#include <sstream>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "error_of.hpp"
#include "redis/redis_wait_stats.hpp"
#include "redis_raw.hpp"
#include "redis_server.hpp"
#include "tokenlock/redis_lock.hpp"
#include "tokenlock/update_any.hpp"
#include "temp_dir.hpp"

using namespace std::chrono_literals;
using tokenlock::errc;
using tokenlock::lock_mode;
using tokenlock::redis_handle;
using tokenlock::redis_holder_info;
using tokenlock::redis_lock;
using tokenlock::redis_lock_options;
using tokenlock::testing::error_of;
using tokenlock::detail::redis_wait_stats;
using tokenlock::detail::this_thread_redis_wait_stats;
using tokenlock::testing::raw;
using tokenlock::testing::redis_server;

namespace {

using clock_type = std::chrono::steady_clock;

// Until `cond` holds; false after `bound`.
bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds bound = 10s) {
  const auto give_up = clock_type::now() + bound;
  while (!cond()) {
    if (clock_type::now() > give_up) return false;
    std::this_thread::yield();
  }
  return true;
}

// Counters the test's forked processes share (zeroed); null when mmap
// fails.
template <class T>
T* in_shared_memory() {
  void* mem = ::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return mem == MAP_FAILED ? nullptr : new (mem) T{};
}

redis_lock_options shared_options(std::uint32_t slots = 0, std::chrono::milliseconds lease = 30s,
                                  std::chrono::milliseconds wait = 0ms) {
  redis_lock_options o;
  o.mode = lock_mode::shared;
  o.slots = slots;
  o.lease = lease;
  o.wait = wait;
  return o;
}

redis_lock_options writer_options(std::chrono::milliseconds wait = 0ms,
                                  std::chrono::milliseconds lease = 30s) {
  redis_lock_options o;
  o.lease = lease;
  o.wait = wait;
  return o;
}

class RedisSharedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = redis_server::unavailable();
    if (!why.empty()) GTEST_SKIP() << why;
    server = std::make_unique<redis_server>();
  }
  redis_lock lock(redis_lock_options o, const std::string& name = "page") const {
    return redis_lock(server->url(), name, o);
  }
  std::string cli(const std::vector<std::string>& args) const { return server->cli(args); }
  long long pttl(const std::string& key) const { return std::stoll(cli({"PTTL", key})); }
  std::size_t shared_count(const std::string& name = "page") const {
    std::vector<redis_holder_info> all = lock(shared_options(), name).holders();
    return static_cast<std::size_t>(std::count_if(all.begin(), all.end(), [](const redis_holder_info& h) {
      return h.mode == lock_mode::shared && !h.waiting_writer;
    }));
  }
  bool writer_waits(const std::string& name = "page") const {
    std::vector<redis_holder_info> all = lock(shared_options(), name).holders();
    return std::any_of(all.begin(), all.end(), [](const redis_holder_info& h) { return h.waiting_writer; });
  }
  // The lock left nothing but its last fence.
  void expect_only_the_fence_left(const std::string& name = "page") const {
    EXPECT_EQ(cli({"EXISTS", "tokenlock:" + name}), "0");
    EXPECT_EQ(cli({"EXISTS", "tokenlock:" + name + ":shared"}), "0");
    EXPECT_EQ(cli({"EXISTS", "tokenlock:" + name + ":writer"}), "0");
    EXPECT_GT(pttl("tokenlock:" + name + ":fence"), 0);
  }
  std::unique_ptr<redis_server> server;
};

// ---- readers together ------------------------------------------------------------

TEST_F(RedisSharedTest, EightReadersHoldAtOnce) {
  std::atomic<int> holding{0}, most{0};
  std::vector<std::thread> readers;
  std::atomic<int> failed{0};
  for (int i = 0; i < 8; ++i)
    readers.emplace_back([&] {
      try {
        redis_lock l = lock(shared_options(0, 30s, 10s));
        redis_handle h = l.acquire();
        if (h.mode() != lock_mode::shared || h.fence() != 0) ++failed;
        const int now = ++holding;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        // Everyone holds before anyone leaves: the count reaches 8 only if
        // all eight hold at once.
        if (!eventually([&] { return holding.load() == 8; })) ++failed;
        h.release();
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        ++failed;
      }
    });
  EXPECT_TRUE(eventually([&] { return holding.load() == 8; }));
  for (auto& t : readers) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(most.load(), 8);
  expect_only_the_fence_left();
}

TEST_F(RedisSharedTest, HoldersListsEveryReaderAndTheWaitingWriter) {
  redis_lock r = lock(shared_options());
  redis_handle a = r.acquire(), b = r.acquire(), c = r.acquire();
  auto writer = std::async(std::launch::async, [&] { return lock(writer_options(10s)).acquire(); });
  ASSERT_TRUE(eventually([&] { return writer_waits(); }));
  const std::vector<redis_holder_info> all = r.holders();
  ASSERT_EQ(all.size(), 4u);
  std::vector<std::string> owners;
  for (const auto& h : all) {
    if (h.waiting_writer) continue;
    EXPECT_EQ(h.mode, lock_mode::shared);
    EXPECT_EQ(h.pid, ::getpid());
    EXPECT_GT(h.remaining.count(), 25000);
    owners.push_back(h.owner);
  }
  std::sort(owners.begin(), owners.end());
  std::vector<std::string> want = {a.owner(), b.owner(), c.owner()};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(owners, want);
  EXPECT_TRUE(all.back().waiting_writer);
  // Through the interface every backend has.
  tokenlock::lock& any = r;
  const std::vector<tokenlock::lock_holder> listed = any.holders();
  ASSERT_EQ(listed.size(), 4u);
  EXPECT_EQ(std::count_if(listed.begin(), listed.end(),
                          [](const auto& h) { return h.mode == lock_mode::shared && !h.fence; }),
            3);
  EXPECT_TRUE(listed.back().waiting_writer);
  ASSERT_TRUE(any.holder().has_value());
  EXPECT_EQ(any.holder()->mode, lock_mode::shared);
  a.release();
  b.release();
  c.release();
  redis_handle w = writer.get();
  EXPECT_EQ(w.mode(), lock_mode::exclusive);
  EXPECT_EQ(r.holders().size(), 1u);
  EXPECT_EQ(r.holders().front().owner, w.owner());
}

// ---- writers ---------------------------------------------------------------------

TEST_F(RedisSharedTest, AWriterWaitsForTheReadersAndGetsInWhenTheLastLeaves) {
  redis_lock r = lock(shared_options());
  redis_handle a = r.acquire(), b = r.acquire();
  const std::uint64_t shared_fence = std::stoull(cli({"GET", "tokenlock:page:fence"}));
  std::atomic<bool> done{false};
  auto writer = std::async(std::launch::async, [&] {
    redis_handle w = lock(writer_options(20s)).acquire();
    done = true;
    return w;
  });
  ASSERT_TRUE(eventually([&] { return writer_waits(); }));
  a.release();
  // One reader still holds: the writer is not in (the grant still the
  // shared one, the mark still there).
  EXPECT_EQ(shared_count(), 1u);
  EXPECT_TRUE(writer_waits());
  EXPECT_FALSE(done.load());
  b.release();
  redis_handle w = writer.get();
  EXPECT_TRUE(w.owns());
  EXPECT_GT(w.fence(), shared_fence);
  EXPECT_EQ(cli({"EXISTS", "tokenlock:page:writer"}), "0") << "the mark outlived the hand-over";
  EXPECT_EQ(cli({"EXISTS", "tokenlock:page:shared"}), "0");
  w.release();
  expect_only_the_fence_left();
}

TEST_F(RedisSharedTest, AWaitingWriterBarsNewReadersWhoGetInAfterIt) {
  redis_lock r = lock(shared_options(0, 30s, 0ms));
  redis_handle first = r.acquire();
  auto writer = std::async(std::launch::async, [&] {
    redis_handle w = lock(writer_options(20s)).acquire();
    std::this_thread::sleep_for(50ms);  // the writer's work
    return w.fence();
  });
  ASSERT_TRUE(eventually([&] { return writer_waits(); }));
  const auto refused = error_of([&] { r.acquire(); });
  EXPECT_EQ(refused.first, errc::busy);
  EXPECT_NE(refused.second.find("a writer (pid " + std::to_string(::getpid())), std::string::npos)
      << refused.second;
  EXPECT_FALSE(r.try_acquire().has_value());
  EXPECT_EQ(shared_count(), 1u) << "a reader joined past the writer's mark";
  // A reader that waits gets in once the writer is done.
  auto reader = std::async(std::launch::async, [&] {
    return lock(shared_options(0, 30s, 20s)).acquire();
  });
  first.release();
  const std::uint64_t writer_fence = writer.get();
  redis_handle later = reader.get();
  EXPECT_TRUE(later.owns());
  EXPECT_GT(std::stoull(cli({"GET", "tokenlock:page:fence"})), writer_fence);
  later.release();
  expect_only_the_fence_left();
}

// One wake-up per release that can admit someone: a writer waiting for
// three readers is woken once, by the last of them, and its wake-up is not
// lost; slot waiters are woken one per freed slot.
TEST_F(RedisSharedTest, OnlyAReleaseThatCanAdmitSomeoneWakesAWaiter) {
  redis_lock r = lock(shared_options());
  redis_handle a = r.acquire(), b = r.acquire(), c = r.acquire();
  std::atomic<bool> blocked{false};
  auto writer = std::async(std::launch::async, [&] {
    auto& stats = this_thread_redis_wait_stats();
    stats.joined_line = [&] { blocked = true; };
    const redis_wait_stats before = stats;
    redis_handle w = lock(writer_options(20s)).acquire();
    stats.joined_line = nullptr;
    return std::make_pair(stats.wakes - before.wakes, stats.wakes_lost - before.wakes_lost);
  });
  ASSERT_TRUE(eventually([&] { return blocked.load() && writer_waits(); }));
  a.release();
  b.release();
  EXPECT_EQ(cli({"LLEN", "tokenlock:page:wake"}), "0") << "a reader that was not the last woke someone";
  c.release();
  const auto [wakes, lost] = writer.get();
  EXPECT_EQ(wakes, 1u);
  EXPECT_EQ(lost, 0u);
  // A semaphore of 2, full, two waiters: one release wakes one of them.
  redis_lock two = lock(shared_options(2), "slots");
  redis_handle s1 = two.acquire(), s2 = two.acquire();
  std::atomic<int> in{0};
  auto waiter = [&] {
    redis_handle h = lock(shared_options(2, 30s, 20s), "slots").acquire();
    ++in;
    return h;
  };
  auto w1 = std::async(std::launch::async, waiter), w2 = std::async(std::launch::async, waiter);
  ASSERT_TRUE(eventually([&] { return cli({"GET", "tokenlock:slots:waiters"}) == "2"; }));
  s1.release();
  ASSERT_TRUE(eventually([&] { return in.load() == 1; }));
  EXPECT_EQ(cli({"GET", "tokenlock:slots:waiters"}), "1") << "the release woke both";
  s2.release();
  w1.get().release();
  w2.get().release();
  expect_only_the_fence_left("slots");
}

// A writer among six readers that keep taking the lock, each holding
// `hold`: it gets in within two holds (the holders at its mark finish) plus
// one poll (here: the hand-over's round trips, bounded generously).
TEST_F(RedisSharedTest, AWriterAmongSixLoopingReadersGetsInWithinTwoHoldsAndAPoll) {
  constexpr auto hold = 100ms;
  constexpr auto poll = 100ms;
  std::atomic<bool> stop{false};
  std::atomic<int> rounds{0}, failed{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 6; ++i)
    readers.emplace_back([&] {
      redis_lock l = lock(shared_options(0, 30s, 30s));
      while (!stop) {
        try {
          redis_handle h = l.acquire();
          std::this_thread::sleep_for(hold);  // the reader's work
          h.release();
          ++rounds;
        } catch (const std::exception& e) {
          ADD_FAILURE() << e.what();
          ++failed;
          return;
        }
      }
    });
  ASSERT_TRUE(eventually([&] { return rounds.load() >= 12; }, 20s));
  redis_lock w = lock(writer_options(20s));
  std::vector<double> waits;
  for (int i = 0; i < 3; ++i) {
    const auto start = clock_type::now();
    redis_handle h = w.acquire();
    waits.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - start).count());
    EXPECT_EQ(shared_count(), 0u) << "a reader holds beside the writer";
    h.release();
    ASSERT_TRUE(eventually([&, n = rounds.load()] { return rounds.load() >= n + 6; }, 20s));
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(failed.load(), 0);
  using ms_double = std::chrono::duration<double, std::milli>;
  const double bound = ms_double(2 * hold + poll).count();
  for (double ms : waits) {
    std::cout << "writer waited " << ms << " ms\n";
    EXPECT_LE(ms, bound);
  }
  expect_only_the_fence_left();
}

// Four reader processes and two writer processes loop on one lock for a
// while: a writer never holds beside anyone, every acquisition is granted
// within its budget (no wake-up lost, nobody starved), and every writer
// gets in.
TEST_F(RedisSharedTest, ReadersAndWritersFromSeveralProcessesNeverMeet) {
  struct counters {
    std::atomic<int> readers, writers, clashes, failed, reads, writes;
  };
  auto* n = in_shared_memory<counters>();
  ASSERT_NE(n, nullptr);
  std::vector<pid_t> children;
  for (int p = 0; p < 6; ++p) {
    const bool writer = p < 2;
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      try {
        redis_lock l(server->url(), "page", writer ? writer_options(20s) : shared_options(0, 30s, 20s));
        const auto end = clock_type::now() + 1500ms;
        while (clock_type::now() < end) {
          redis_handle h = l.acquire();
          std::atomic<int>& mine = writer ? n->writers : n->readers;
          std::atomic<int>& theirs = writer ? n->readers : n->writers;
          if (++mine > (writer ? 1 : 4) || theirs.load() != 0) ++n->clashes;
          std::this_thread::sleep_for(writer ? 2ms : 5ms);  // the holder's work
          if (theirs.load() != 0) ++n->clashes;
          --mine;
          h.release();
          ++(writer ? n->writes : n->reads);
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        ++n->failed;
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
  EXPECT_EQ(n->clashes.load(), 0);
  EXPECT_EQ(n->failed.load(), 0);
  EXPECT_GT(n->writes.load(), 10);
  EXPECT_GT(n->reads.load(), 40);
  std::cout << n->reads.load() << " reads, " << n->writes.load() << " writes\n";
  ::munmap(n, sizeof(counters));
  expect_only_the_fence_left();
}

TEST_F(RedisSharedTest, AWriterThatGivesUpLeavesNoMark) {
  redis_lock r = lock(shared_options());
  redis_handle a = r.acquire();
  redis_lock w = lock(writer_options(300ms));
  const auto e = error_of([&] { w.acquire(); });
  EXPECT_EQ(e.first, errc::timed_out);
  EXPECT_NE(e.second.find("held by shared holders"), std::string::npos) << e.second;
  EXPECT_EQ(cli({"EXISTS", "tokenlock:page:writer"}), "0");
  EXPECT_FALSE(w.try_acquire().has_value());
  EXPECT_EQ(cli({"EXISTS", "tokenlock:page:writer"}), "0") << "a try_acquire marked";
  // Readers still join, and the holder kept its share.
  redis_handle b = r.acquire();
  EXPECT_EQ(shared_count(), 2u);
  a.release();
  b.release();
  expect_only_the_fence_left();
}

// ---- clients of the previous version ---------------------------------------------

std::string previous_acquire() {
  std::ifstream in(PREVIOUS_ACQUIRE_LUA);
  std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // As that version sends it: without the header comment.
  std::size_t at = 0;
  while (body.compare(at, 2, "--") == 0) at = body.find('\n', at) + 1;
  return body.substr(at);
}

TEST_F(RedisSharedTest, AClientOfThePreviousVersionSeesTheLockHeldWhileAnyShareIsLive) {
  const std::string script = previous_acquire();
  ASSERT_NE(script.find("local function nextfence"), std::string::npos);
  const std::vector<std::string> keys = {"EVAL", script, "5", "tokenlock:page", "tokenlock:page:fence",
                                         "tokenlock:page:wake", "tokenlock:page:waiters",
                                         "tokenlock:page:handoff", "old-00000000.1.1.0123456789abcdef",
                                         "30000", "86400000", "0", "0"};
  redis_lock r = lock(shared_options(0, 400ms));
  redis_handle a = r.acquire();
  redis_handle b = lock(shared_options(0, 30s)).acquire();
  // SET NX, and the previous acquire script: held (not corrupt, not ours).
  EXPECT_EQ(raw(*server, {"SET", "tokenlock:page", "x", "NX", "PX", "1000"}), "(nil)");
  std::string answer = raw(*server, keys);
  EXPECT_EQ(answer.rfind("0\nshared-00000000.0.0.0000000000000000\n", 0), 0u) << answer;
  // The short lease ended: the other share keeps the lock held to them.
  ASSERT_TRUE(eventually([&] { return shared_count() == 1; }));
  EXPECT_EQ(raw(*server, {"SET", "tokenlock:page", "x", "NX", "PX", "1000"}), "(nil)");
  answer = raw(*server, keys);
  EXPECT_EQ(answer.rfind("0\n", 0), 0u) << answer;
  EXPECT_GT(pttl("tokenlock:page"), 25000);
  EXPECT_EQ(error_of([&] { a.release(); }).first, errc::lock_lost);
  b.release();
  // Free again: the previous version takes it (a fence, not an array).
  answer = raw(*server, keys);
  EXPECT_EQ(answer.find('\n'), std::string::npos) << answer;
  EXPECT_EQ(cli({"GET", "tokenlock:page"}).substr(cli({"GET", "tokenlock:page"}).find(' ') + 1),
            "old-00000000.1.1.0123456789abcdef");
}

// ---- leases ----------------------------------------------------------------------

TEST_F(RedisSharedTest, AReaderWhoseLeaseEndedIsDroppedAndItsReleaseSaysLockLost) {
  redis_handle brief = lock(shared_options(0, 300ms)).acquire();
  redis_handle kept = lock(shared_options(0, 30s)).acquire();
  ASSERT_TRUE(eventually([&] { return shared_count() == 1; }));
  const auto e = error_of([&] { brief.release(); });
  EXPECT_EQ(e.first, errc::lock_lost);
  EXPECT_NE(e.second.find("our lease ended"), std::string::npos) << e.second;
  EXPECT_FALSE(brief.owns());
  // Nothing else lost: the other reader holds, the lock held to writers.
  EXPECT_EQ(cli({"HEXISTS", "tokenlock:page:shared", brief.owner()}), "0");
  EXPECT_EQ(cli({"HEXISTS", "tokenlock:page:shared", kept.owner()}), "1");
  EXPECT_GT(pttl("tokenlock:page"), 25000);
  EXPECT_FALSE(lock(writer_options()).try_acquire().has_value());
  const auto r = error_of([&] { brief.refresh(); });
  EXPECT_EQ(r.first, errc::not_owner);
  kept.release();
  expect_only_the_fence_left();
}

TEST_F(RedisSharedTest, ARefreshExtendsOneHoldersLeaseAndTheGrantCoversIt) {
  redis_handle a = lock(shared_options(0, 2s)).acquire();
  redis_handle b = lock(shared_options(0, 2s)).acquire();
  const long long b_end = std::stoll(cli({"HGET", "tokenlock:page:shared", b.owner()}));
  a.refresh(20s);
  const long long a_end = std::stoll(cli({"HGET", "tokenlock:page:shared", a.owner()}));
  EXPECT_EQ(std::stoll(cli({"HGET", "tokenlock:page:shared", b.owner()})), b_end) << "b's lease moved";
  EXPECT_GT(a_end - b_end, 17000);
  EXPECT_GT(pttl("tokenlock:page"), 19000);
  EXPECT_GT(pttl("tokenlock:page:shared"), 19000);
  // b's lease ends; a's holds the lock.
  ASSERT_TRUE(eventually([&] { return shared_count() == 1; }));
  EXPECT_FALSE(lock(writer_options()).try_acquire().has_value());
  EXPECT_EQ(error_of([&] { b.refresh(); }).first, errc::lock_lost);
  EXPECT_EQ(error_of([&] { a.refresh(); }).first, std::error_code());
  a.release();
  expect_only_the_fence_left();
}

// ---- semaphores ------------------------------------------------------------------

TEST_F(RedisSharedTest, ASemaphoreWithAnotherCountWaitsAndSaysBothCounts) {
  redis_lock three = lock(shared_options(3));
  redis_handle a = three.acquire(), b = three.acquire(), c = three.acquire();
  EXPECT_FALSE(three.try_acquire().has_value());
  auto e = error_of([&] { lock(shared_options(3)).acquire(); });
  EXPECT_EQ(e.first, errc::busy);
  EXPECT_NE(e.second.find("all 3 slots"), std::string::npos) << e.second;
  a.release();
  e = error_of([&] { lock(shared_options(5)).acquire(); });
  EXPECT_EQ(e.first, errc::busy);
  EXPECT_NE(e.second.find("a semaphore of 3 slots"), std::string::npos) << e.second;
  EXPECT_NE(e.second.find("a semaphore of 5 slots"), std::string::npos) << e.second;
  e = error_of([&] { lock(shared_options(0)).acquire(); });
  EXPECT_NE(e.second.find("without a limit"), std::string::npos) << e.second;
  EXPECT_EQ(shared_count(), 2u) << "a refused semaphore touched the holders";
  const auto listed = three.holders();
  for (const auto& h : listed) EXPECT_EQ(h.slots, 3u);
  b.release();
  c.release();
  // Free: another count may start its own.
  redis_handle five = lock(shared_options(5)).acquire();
  EXPECT_EQ(lock(shared_options(5)).holders().front().slots, 5u);
  five.release();
  expect_only_the_fence_left();
}

// Six processes take one of three slots 25 times each: a counter in shared
// memory never passes 3, and reaches it.
TEST_F(RedisSharedTest, NeverMoreThanNSlotHoldersUnderLoadFromSeveralProcesses) {
  constexpr int slots = 3, processes = 6, rounds = 25;
  struct counters {
    std::atomic<int> holding, most, done, failed;
  };
  auto* n = in_shared_memory<counters>();
  ASSERT_NE(n, nullptr);
  std::vector<pid_t> children;
  for (int p = 0; p < processes; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      try {
        redis_lock l(server->url(), "page", shared_options(slots, 30s, 30s));
        for (int i = 0; i < rounds; ++i) {
          redis_handle h = l.acquire();
          const int now = ++n->holding;
          int seen = n->most.load();
          while (now > seen && !n->most.compare_exchange_weak(seen, now)) {
          }
          std::this_thread::sleep_for(2ms);  // the holder's work
          --n->holding;
          h.release();
          ++n->done;
        }
      } catch (...) {
        ++n->failed;
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(n->failed.load(), 0);
  EXPECT_EQ(n->done.load(), processes * rounds);
  EXPECT_LE(n->most.load(), slots);
  EXPECT_EQ(n->most.load(), slots) << "the slots were never all used at once";
  ::munmap(n, sizeof(counters));
  expect_only_the_fence_left();
}

// A child process that takes a share of `o` and is killed with SIGKILL
// holding it (its share left to its lease).
void share_of_a_killed_process(const std::string& url, const redis_lock_options& o) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      redis_lock l(url, "page", o);
      redis_handle h = l.acquire();
      h.detach();
      (void)!::write(ready[1], "1", 1);
    } catch (...) {
    }
    ::pause();
    _exit(0);
  }
  char c = 0;
  EXPECT_EQ(::read(ready[0], &c, 1), 1);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_F(RedisSharedTest, AKilledSlotHoldersSlotComesBackWhenItsLeaseEnds) {
  share_of_a_killed_process(server->url(), shared_options(2, 1500ms));
  redis_handle other = lock(shared_options(2)).acquire();
  EXPECT_FALSE(lock(shared_options(2)).try_acquire().has_value()) << "the dead holder's slot is free early";
  const auto start = clock_type::now();
  redis_handle mine = lock(shared_options(2, 30s, 10s)).acquire();
  const auto waited = clock_type::now() - start;
  EXPECT_TRUE(mine.owns());
  EXPECT_LE(waited, 2s) << "waited past the dead holder's lease";
  EXPECT_EQ(shared_count(), 2u);
  other.release();
  mine.release();
  expect_only_the_fence_left();
}

// A writer waiting for a reader killed with SIGKILL gets in when that
// reader's lease ends, as for a dead exclusive holder, and leaves no mark.
TEST_F(RedisSharedTest, AWriterGetsInWhenAKilledReadersLeaseEnds) {
  share_of_a_killed_process(server->url(), shared_options(0, 1500ms));
  const auto start = clock_type::now();
  redis_handle w = lock(writer_options(10s)).acquire();
  EXPECT_LE(clock_type::now() - start, 2s) << "waited past the dead reader's lease";
  EXPECT_EQ(cli({"EXISTS", "tokenlock:page:writer"}), "0");
  EXPECT_EQ(cli({"EXISTS", "tokenlock:page:shared"}), "0");
  w.release();
  expect_only_the_fence_left();
}

// ---- adopt, break, the interface -------------------------------------------------

TEST_F(RedisSharedTest, AdoptAndBreakWorkOnOneShareAndLeaveTheOthers) {
  redis_lock r = lock(shared_options());
  redis_handle a = r.acquire(), b = r.acquire();
  const std::string a_owner = a.detach();
  redis_handle adopted = r.adopt(a_owner);
  EXPECT_EQ(adopted.mode(), lock_mode::shared);
  EXPECT_EQ(adopted.fence(), 0u);
  adopted.refresh(20s);
  const std::string b_owner = b.owner();
  r.break_owner(b_owner);
  EXPECT_EQ(shared_count(), 1u);
  EXPECT_EQ(error_of([&] { b.release(); }).first, errc::lock_lost);
  EXPECT_EQ(error_of([&] { r.adopt(b_owner); }).first, errc::lock_lost);
  EXPECT_GT(pttl("tokenlock:page"), 15000) << "breaking one share freed the lock";
  r.break_owner(adopted.owner());
  EXPECT_EQ(error_of([&] { adopted.release(); }).first, errc::lock_lost);
  expect_only_the_fence_left();
}

TEST_F(RedisSharedTest, ASharedGrantHasNoFenceAndTheFencedUpdatesRefuseIt) {
  tokenlock::testing::temp_dir dir;
  const std::string target = (dir / "counter").string();
  { std::ofstream(target) << "7\n"; }
  redis_lock r = lock(shared_options());
  tokenlock::lock& any = r;
  tokenlock::handle h = any.acquire();
  EXPECT_EQ(h.mode(), lock_mode::shared);
  EXPECT_FALSE(h.fence().has_value());
  const auto e = error_of([&] { tokenlock::commit_file(h, target, "8\n"); });
  // bad_argument ("a shared hold gives no fence"), or not_fenced where
  // commit_file reads only the missing fence.
  EXPECT_TRUE(e.first == errc::bad_argument || e.first == errc::not_fenced) << e.second;
  std::ifstream in(target);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "7\n");
  h.release();
  expect_only_the_fence_left();
}

// ---- what the lock never writes --------------------------------------------------

// A holders' hash or a mark the lock never wrote is refused by every call
// that reads it, naming the key and the fix, with nothing written. (A
// holder's own refresh or release reads its own field only, as an
// exclusive one compares its own grant only.)
TEST_F(RedisSharedTest, AHoldersHashOrMarkTheLockNeverWroteIsRefusedWithNothingWritten) {
  redis_handle held = lock(shared_options()).acquire();
  const std::string grant = cli({"GET", "tokenlock:page"});
  cli({"HSET", "tokenlock:page:shared", "someone", "soon"});
  for (auto call : {std::function<void()>([&] { lock(shared_options()).acquire(); }),
                    std::function<void()>([&] { lock(writer_options()).acquire(); }),
                    std::function<void()>([&] { lock(shared_options()).holders(); })}) {
    const auto e = error_of(call);
    EXPECT_EQ(e.first, errc::lock_corrupt) << e.second;
    EXPECT_NE(e.second.find("tokenlock:page:shared holds \"someone soon\""), std::string::npos) << e.second;
    EXPECT_NE(e.second.find("DEL tokenlock:page:shared"), std::string::npos) << e.second;
  }
  EXPECT_EQ(cli({"GET", "tokenlock:page"}), grant);
  // Ours, the limit and the plant: nothing added or removed.
  EXPECT_EQ(cli({"HLEN", "tokenlock:page:shared"}), "3");
  // Our release reads the others to know whether it is the last: refused.
  const std::string mine = held.owner();
  EXPECT_EQ(error_of([&] { held.release(); }).first, errc::lock_corrupt);
  EXPECT_EQ(cli({"HEXISTS", "tokenlock:page:shared", mine}), "1") << "a refused release wrote";
  EXPECT_EQ(cli({"EXISTS", "tokenlock:page:writer"}), "0") << "a refused writer marked";
  cli({"DEL", "tokenlock:page:shared"});
  cli({"RPUSH", "tokenlock:page:writer", "x"});
  const auto e = error_of([&] { lock(shared_options()).acquire(); });
  EXPECT_EQ(e.first, errc::lock_corrupt) << e.second;
  EXPECT_NE(e.second.find("holds a list, not a string"), std::string::npos) << e.second;
  EXPECT_EQ(cli({"EXISTS", "tokenlock:page:shared"}), "0");
  EXPECT_EQ(cli({"GET", "tokenlock:page"}), grant);
  cli({"DEL", "tokenlock:page:writer", "tokenlock:page"});
}

}  // namespace
