// Shared holders and semaphores on a real etcd cluster (docs/etcd.md,
// Shared locks and semaphores): readers together, a writer alone and not
// starved, never more than N slot holders, a killed holder's slot back
// when its lease ends, an exclusive client of the previous version kept
// out, holders() and the failure paths, each checking what is left in etcd.
// Processes are forked children, each with its own etcd_lock; what they
// count is in a shared anonymous mapping.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "etcd/etcd_wait_stats.hpp"
#include "etcd_test_base.hpp"
#include "tokenlock/etcd_lock.hpp"

using namespace std::chrono_literals;
using tokenlock::etcd_handle;
using tokenlock::etcd_lock;
using tokenlock::etcd_lock_options;
using tokenlock::lock_mode;
using tokenlock::testing::etcd_cluster;
using tokenlock::testing::shared_cluster;
using steady = std::chrono::steady_clock;

namespace {

// What the children count, in memory they share with the test.
struct tally {
  std::atomic<int> holding{0};      // shared or slot holders now
  std::atomic<int> most{0};         // the most at once
  std::atomic<int> writers{0};      // writers holding now
  std::atomic<int> grants{0};       // grants in all
  std::atomic<int> violations{0};   // a holder beside a writer, or over N
  std::atomic<bool> stop{false};
};

class shared_tally {
 public:
  shared_tally() {
    void* p = ::mmap(nullptr, sizeof(tally), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    t_ = new (p) tally();
  }
  ~shared_tally() { ::munmap(t_, sizeof(tally)); }
  tally* operator->() { return t_; }
  tally& operator*() { return *t_; }

 private:
  tally* t_;
};

// A child that runs `body` and exits with its status, never returning into
// the test (no destructors of the parent's objects run there).
pid_t fork_child(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int status = 2;
    try {
      status = body();
    } catch (...) {
    }
    ::_exit(status);
  }
  return pid;
}

int exit_status(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

etcd_lock_options shared_options(std::uint32_t slots = 0) {
  etcd_lock_options o;
  o.mode = lock_mode::shared;
  o.slots = slots;
  o.wait = 30s;
  return o;
}

// One holding, counted: `limit` 0 for readers (checks no writer holds),
// N for a semaphore (checks at most N hold), -1 for a writer (checks
// nobody else holds).
void hold_counted(tally& t, int limit, std::chrono::milliseconds hold) {
  if (limit < 0) {
    if (t.writers.fetch_add(1) != 0 || t.holding.load() != 0) ++t.violations;
  } else {
    const int now = t.holding.fetch_add(1) + 1;
    if (t.writers.load() != 0 || (limit > 0 && now > limit)) ++t.violations;
    for (int m = t.most.load(); now > m && !t.most.compare_exchange_weak(m, now);) {
    }
  }
  ++t.grants;
  std::this_thread::sleep_for(hold);  // the work done under the lock
  (limit < 0 ? t.writers : t.holding).fetch_sub(1);
}

// Until `done()` or 30 s.
bool within_30s(const std::function<bool()>& done) {
  const auto deadline = steady::now() + 30s;
  while (!done()) {
    if (steady::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

class EtcdSharedTest : public tokenlock::testing::etcd_test {};

TEST_F(EtcdSharedTest, EightReadersHoldTogetherInEightProcesses) {
  etcd_cluster& c = shared_cluster();
  shared_tally t;
  std::vector<pid_t> kids;
  for (int i = 0; i < 8; ++i)
    kids.push_back(fork_child([&] {
      etcd_lock lock(c.url(), name(), shared_options());
      etcd_handle h = lock.acquire();
      if (h.mode() != lock_mode::shared || h.fence() != 0) return 4;
      ++t->holding;
      ++t->grants;
      // Holds until all eight hold at once.
      if (!within_30s([&] { return t->holding.load() == 8 || t->stop.load(); })) return 3;
      t->most = t->holding.load();
      while (!t->stop.load()) std::this_thread::sleep_for(5ms);
      h.release();
      return 0;
    }));
  const bool all = within_30s([&] { return t->holding.load() == 8; });
  EXPECT_TRUE(all) << t->holding.load() << " held at once";
  etcd_lock lock(c.url(), name());
  EXPECT_EQ(lock.holders().size(), 8u);
  etcd_lock_options o;
  o.wait = 0ms;
  etcd_lock writer(c.url(), name(), o);
  EXPECT_FALSE(writer.try_acquire());
  EXPECT_EQ(keys(c, name()), 8);  // the writer's try left nothing
  t->stop = true;
  for (pid_t k : kids) EXPECT_EQ(exit_status(k), 0);
  EXPECT_EQ(t->most.load(), 8);
  EXPECT_EQ(keys(c, name()), 0);
}

TEST_F(EtcdSharedTest, AWriterWaitsForTheReadersAndGetsInWhenTheLastLeaves) {
  etcd_cluster& c = shared_cluster();
  std::vector<etcd_lock> locks;
  std::vector<etcd_handle> readers;
  for (int i = 0; i < 3; ++i) locks.emplace_back(c.url(), name(), shared_options());
  for (etcd_lock& l : locks) readers.push_back(l.acquire());
  etcd_lock_options o;
  o.wait = 30s;
  etcd_lock writer(c.url(), name(), o);
  std::atomic<bool> granted{false};
  std::size_t beside = 99;
  steady::time_point granted_at;
  std::thread w([&] {
    etcd_handle h = writer.acquire();
    granted_at = steady::now();
    granted = true;
    etcd_lock look(c.url(), name());
    beside = look.holders().size();  // the writer alone
    h.release();
  });
  wait_for_line(c, name(), 4);
  auto listed = locks[0].holders();
  ASSERT_EQ(listed.size(), 4u);
  EXPECT_TRUE(listed[3].waiting_writer);
  EXPECT_EQ(listed[3].mode, lock_mode::exclusive);
  readers[0].release();
  readers[2].release();
  EXPECT_FALSE(granted.load()) << "the writer got in beside a reader";
  const auto last = steady::now();
  readers[1].release();
  w.join();
  EXPECT_TRUE(granted.load());
  EXPECT_GE(granted_at, last);
  EXPECT_EQ(beside, 1u);
  EXPECT_EQ(keys(c, name()), 0);
}

// FIFO by revision: readers that ask after the writer queue behind it, so
// the writer waits for the readers ahead of it only: within twice their
// hold plus one watch's span (the longest a waiter goes without looking,
// a third of the 3 s waiter lease).
TEST_F(EtcdSharedTest, AWriterAmongSixLoopingReadersGetsInWithinTwiceTheirHold) {
  constexpr auto hold = 300ms;
  constexpr auto bound = 2 * hold + 1000ms;
  etcd_cluster& c = shared_cluster();
  shared_tally t;
  std::vector<pid_t> kids;
  for (int i = 0; i < 6; ++i)
    kids.push_back(fork_child([&] {
      etcd_lock lock(c.url(), name(), shared_options());
      while (!t->stop.load()) {
        etcd_handle h = lock.acquire();
        hold_counted(*t, 0, hold);
        h.release();
      }
      return 0;
    }));
  ASSERT_TRUE(within_30s([&] { return t->grants.load() >= 12; }));
  etcd_lock_options o;
  o.wait = 30s;
  etcd_lock writer(c.url(), name(), o);
  std::vector<steady::duration> waits;
  for (int round = 0; round < 3; ++round) {
    const auto asked = steady::now();
    etcd_handle h = writer.acquire();
    waits.push_back(steady::now() - asked);
    hold_counted(*t, -1, 50ms);
    h.release();
    const int before = t->grants.load();
    ASSERT_TRUE(within_30s([&] { return t->grants.load() >= before + 6; }));
  }
  t->stop = true;
  for (pid_t k : kids) EXPECT_EQ(exit_status(k), 0);
  std::string shown;
  for (const auto& w : waits) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(w).count();
    shown += " " + std::to_string(ms);
    EXPECT_LE(w, bound) << ms << " ms for the writer";
  }
  std::printf("the writer waited (ms):%s; bound %lld ms; readers at once: %d\n", shown.c_str(),
              static_cast<long long>(std::chrono::milliseconds(bound).count()), t->most.load());
  EXPECT_EQ(t->violations.load(), 0);
  EXPECT_GE(t->most.load(), 2);  // the readers did hold together
  EXPECT_EQ(keys(c, name()), 0);
}

TEST_F(EtcdSharedTest, NeverMoreThanNSlotHoldersUnderLoadFromSixProcesses) {
  constexpr int slots = 3, cycles = 8;
  etcd_cluster& c = shared_cluster();
  shared_tally t;
  std::vector<pid_t> kids;
  for (int i = 0; i < 6; ++i)
    kids.push_back(fork_child([&] {
      etcd_lock lock(c.url(), name(), shared_options(slots));
      for (int k = 0; k < cycles; ++k) {
        etcd_handle h = lock.acquire();
        hold_counted(*t, slots, 40ms);
        h.release();
      }
      return 0;
    }));
  for (pid_t k : kids) EXPECT_EQ(exit_status(k), 0);
  EXPECT_EQ(t->violations.load(), 0);
  EXPECT_EQ(t->grants.load(), 6 * cycles);
  EXPECT_LE(t->most.load(), slots);
  EXPECT_GE(t->most.load(), 2) << "the slots were never held together";
  std::printf("%d grants of %d slots, at most %d at once\n", t->grants.load(), slots,
              t->most.load());
  EXPECT_EQ(keys(c, name()), 0);
}

TEST_F(EtcdSharedTest, AKilledSlotHoldersSlotComesBackWhenItsLeaseEnds) {
  etcd_cluster& c = shared_cluster();
  shared_tally t;
  const pid_t kid = fork_child([&]() -> int {
    etcd_lock_options o = shared_options(2);
    o.lease = 2s;
    etcd_lock lock(c.url(), name(), o);
    etcd_handle h = lock.acquire();
    ++t->holding;
    for (;;) ::pause();
  });
  ASSERT_TRUE(within_30s([&] { return t->holding.load() == 1; }));
  etcd_lock mine(c.url(), name(), shared_options(2));
  etcd_handle other = mine.acquire();
  etcd_lock_options o = shared_options(2);
  o.wait = 0ms;
  etcd_lock third(c.url(), name(), o);
  EXPECT_FALSE(third.try_acquire()) << "a third holder of two slots";
  ::kill(kid, SIGKILL);
  EXPECT_EQ(exit_status(kid), 128 + SIGKILL);
  o.wait = 20s;
  etcd_lock after(c.url(), name(), o);
  const auto asked = steady::now();
  etcd_handle h = after.acquire();
  const auto waited = steady::now() - asked;
  EXPECT_LE(waited, 6s);  // a lease of 2 s and etcd's expiry check
  std::printf("the slot came back after %lld ms\n",
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()));
  EXPECT_TRUE(h.owns());
  other.refresh();  // the live holder kept its slot throughout
  EXPECT_EQ(mine.holders().size(), 2u);
  h.release();
  other.release();
  EXPECT_EQ(keys(c, name()), 0);
}

// The exclusive code path is the previous version's, unchanged: it sees a
// shared holder's key as one more key ahead of its own, and waits.
TEST_F(EtcdSharedTest, AnExclusiveClientWaitsWhileASharedHolderHolds) {
  etcd_cluster& c = shared_cluster();
  etcd_lock reader(c.url(), name(), shared_options());
  etcd_handle r = reader.acquire();
  EXPECT_NE(r.key().find(".s0"), std::string::npos) << r.key();
  etcd_lock_options o;
  o.wait = 0ms;
  etcd_lock old(c.url(), name(), o);
  std::error_code ec;
  old.acquire(ec);
  EXPECT_EQ(ec, tokenlock::errc::busy);
  EXPECT_NE(tokenlock::last_error_message().find("shared holders"), std::string::npos)
      << tokenlock::last_error_message();
  EXPECT_EQ(keys(c, name()), 1);
  auto first = old.holder();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->owner, r.owner());
  EXPECT_EQ(first->mode, lock_mode::shared);
  o.wait = 30s;
  etcd_lock waiting(c.url(), name(), o);
  std::atomic<bool> granted{false};
  std::thread w([&] {
    etcd_handle h = waiting.acquire();
    granted = h.owns();
  });
  wait_for_line(c, name(), 2);
  EXPECT_FALSE(granted.load());
  r.release();
  w.join();
  EXPECT_TRUE(granted.load());
  EXPECT_EQ(keys(c, name()), 0);
}

TEST_F(EtcdSharedTest, HoldersListsEveryHolderAndTheWaitingWriter) {
  etcd_cluster& c = shared_cluster();
  etcd_lock a(c.url(), name(), shared_options()), b(c.url(), name(), shared_options());
  etcd_handle ha = a.acquire(), hb = b.acquire();
  etcd_lock_options o;
  o.wait = 30s;
  etcd_lock writer(c.url(), name(), o);
  etcd_lock late(c.url(), name(), shared_options());
  std::thread w([&] { writer.acquire().release(); });
  wait_for_line(c, name(), 3);
  std::thread r([&] { late.acquire().release(); });  // behind the writer
  wait_for_line(c, name(), 4);
  tokenlock::lock& any = a;
  const std::vector<tokenlock::lock_holder> all = any.holders();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].id, ha.owner());
  EXPECT_EQ(all[1].id, hb.owner());
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(all[i].mode, lock_mode::shared);
    EXPECT_FALSE(all[i].fence) << "a shared holder has no fence";
    EXPECT_FALSE(all[i].waiting_writer);
    EXPECT_NE(all[i].reason.find("held shared"), std::string::npos) << all[i].reason;
  }
  EXPECT_TRUE(all[2].waiting_writer);
  EXPECT_EQ(all[2].mode, lock_mode::exclusive);
  EXPECT_NE(all[2].reason.find("waiting"), std::string::npos) << all[2].reason;
  ha.release();
  hb.release();
  w.join();
  r.join();
  EXPECT_EQ(keys(c, name()), 0);
  EXPECT_TRUE(any.holders().empty());
}

TEST_F(EtcdSharedTest, ASemaphoreOfAnotherSizeWaitsAndSaysBothSizes) {
  etcd_cluster& c = shared_cluster();
  etcd_lock two(c.url(), name(), shared_options(2));
  etcd_handle h = two.acquire();
  etcd_lock_options o = shared_options(3);
  o.wait = 0ms;
  etcd_lock three(c.url(), name(), o);
  std::error_code ec;
  three.acquire(ec);
  EXPECT_EQ(ec, tokenlock::errc::busy);
  const std::string m = tokenlock::last_error_message();
  EXPECT_NE(m.find("a semaphore of 2"), std::string::npos) << m;
  EXPECT_NE(m.find("a semaphore of 3"), std::string::npos) << m;
  o.wait = 1500ms;
  etcd_lock waits(c.url(), name(), o);
  waits.acquire(ec);
  EXPECT_EQ(ec, tokenlock::errc::timed_out);
  EXPECT_NE(tokenlock::last_error_message().find("a semaphore of 3"), std::string::npos)
      << tokenlock::last_error_message();
  EXPECT_EQ(keys(c, name()), 1);  // only the holder's key
  h.refresh();
  h.release();
  EXPECT_EQ(keys(c, name()), 0);
}

TEST_F(EtcdSharedTest, ASharedHolderWhoseLeaseEndedReportsLockLostOnRelease) {
  etcd_cluster& c = shared_cluster();
  etcd_lock reader(c.url(), name(), shared_options());
  etcd_lock other(c.url(), name(), shared_options());
  etcd_handle h = reader.acquire();
  etcd_handle keeps = other.acquire();
  ASSERT_EQ(c.ctl({"lease", "revoke", hex(h.lease_id())}).status, 0);
  std::error_code ec;
  h.release(ec);
  EXPECT_EQ(ec, tokenlock::errc::lock_lost);
  const std::string m = tokenlock::last_error_message();
  EXPECT_NE(m.find("shared grant"), std::string::npos) << m;
  EXPECT_NE(m.find("our lease ended"), std::string::npos) << m;
  EXPECT_FALSE(h.owns());
  EXPECT_FALSE(lease_exists(c, h.lease_id()));
  keeps.refresh();  // the other holder lost nothing
  EXPECT_EQ(keys(c, name()), 1);
  keeps.release();
  EXPECT_EQ(keys(c, name()), 0);
}

TEST_F(EtcdSharedTest, ASharedGrantIsAdoptedAndBrokenByItsOwner) {
  etcd_cluster& c = shared_cluster();
  etcd_lock a(c.url(), name(), shared_options()), b(c.url(), name(), shared_options());
  etcd_handle ha = a.acquire(), hb = b.acquire();
  etcd_lock admin(c.url(), name());
  etcd_handle adopted = admin.adopt(hb.detach());
  EXPECT_EQ(adopted.mode(), lock_mode::shared);
  adopted.refresh();
  tokenlock::lock& any = admin;
  tokenlock::handle erased = any.adopt(ha.owner());
  EXPECT_FALSE(erased.fence()) << "a shared grant has no fence";
  EXPECT_EQ(erased.mode(), lock_mode::shared);
  erased.detach();
  admin.break_owner(ha.owner());
  std::error_code ec;
  ha.refresh(ec);
  EXPECT_EQ(ec, tokenlock::errc::lock_lost);
  EXPECT_FALSE(lease_exists(c, ha.lease_id())) << "the broken grant's lease was left";
  admin.break_owner("nobody", ec);
  EXPECT_EQ(ec, tokenlock::errc::lock_lost);
  EXPECT_EQ(keys(c, name()), 1);  // only the adopted grant
  adopted.release();
  EXPECT_EQ(keys(c, name()), 0);
}

// A semaphore's line moves one waiter per release: the first waiter is
// woken by a holder's release; each later one by the grant of the waiter
// ahead (its key put again), and then as the first waiter by a release. So
// no waiter is woken more than twice however long the line, where a herd
// (every waiter watching every release) would wake the fifth five times.
// A lease of 3 s keeps each waiter on one lease (no move to a short one
// that would wake the waiter behind it early).
TEST_F(EtcdSharedTest, ASemaphoresReleaseWakesOneWaiter) {
  constexpr int waiters = 5;
  etcd_cluster& c = shared_cluster();
  etcd_lock_options o = shared_options(1);
  o.lease = 3s;
  o.wait = 60s;
  etcd_lock holder(c.url(), name(), o);
  etcd_handle h = holder.acquire();
  std::vector<std::unique_ptr<etcd_lock>> locks;
  std::atomic<int> order{0};
  std::vector<std::atomic<int>> place(waiters), wakes(waiters);
  std::vector<std::atomic<bool>> leave(waiters);
  std::vector<std::thread> line;
  for (int i = 0; i < waiters; ++i) {
    locks.push_back(std::make_unique<etcd_lock>(c.url(), name(), o));
    line.emplace_back([&, i] {
      etcd_handle mine = locks[i]->acquire();
      wakes[i] = static_cast<int>(tokenlock::detail::this_thread_etcd_wait_stats().wakes);
      place[i] = ++order;
      while (!leave[i].load()) std::this_thread::sleep_for(5ms);
      mine.release();
    });
    wait_for_line(c, name(), i + 2);
  }
  h.release();
  for (int i = 0; i < waiters; ++i) {
    ASSERT_TRUE(within_30s([&] { return place[i].load() != 0; })) << "waiter " << i;
    EXPECT_EQ(place[i].load(), i + 1) << "served out of order";
    EXPECT_EQ(order.load(), i + 1) << "two slot holders of one";
    leave[i] = true;
  }
  for (std::thread& t : line) t.join();
  EXPECT_LE(wakes[0].load(), 1);
  std::string shown = std::to_string(wakes[0].load());
  for (int i = 1; i < waiters; ++i) {
    EXPECT_LE(wakes[i].load(), 2) << "waiter " << i;
    shown += " " + std::to_string(wakes[i].load());
  }
  std::printf("wakes per waiter, in line order: %s\n", shown.c_str());
  EXPECT_EQ(keys(c, name()), 0);
}

TEST(EtcdSharedOptions, SlotsAboveTheLargestSemaphoreAreRefused) {
  etcd_lock_options o;
  o.slots = tokenlock::max_slots + 1;
  etcd_lock lock("etcd://127.0.0.1:1", "x", o);
  std::error_code ec;
  lock.acquire(ec);
  EXPECT_EQ(ec, tokenlock::errc::bad_argument);
  EXPECT_NE(tokenlock::last_error_message().find("options.slots"), std::string::npos);
}

}  // namespace
