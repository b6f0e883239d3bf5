// The library's threaded parts, on the real OS: keep_alive's background
// refreshes, update_file's keep_alive option, and locks shared between
// threads. scripts/test --full also runs these under ThreadSanitizer.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cleanup_registry.hpp"
#include "inspect.hpp"
#include "temp_dir.hpp"
#include "tokenlock/tokenlock.hpp"

namespace tl = tokenlock;
using namespace std::chrono_literals;
using tokenlock::testing::entries;
using tokenlock::testing::slurp;
using tokenlock::testing::spit;
using tokenlock::testing::temp_dir;
using tokenlock::testing::temp_files_below;

namespace {

// What a keep_alive's callback saw, for the test thread to wait on.
class refresh_log {
 public:
  std::function<void(const std::error_code&)> callback() {
    return [this](const std::error_code& ec) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (ec)
        errors_.push_back(ec);
      else
        ++successes_;
      changed_.notify_all();
    };
  }
  bool wait_for_successes(int n) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, 30s, [&] { return successes_ >= n; });
  }
  std::optional<std::error_code> wait_for_error() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_for(lock, 30s, [&] { return !errors_.empty(); })) return std::nullopt;
    return errors_.front();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int successes_ = 0;
  std::vector<std::error_code> errors_;
};

tl::lock_options short_lease(std::chrono::milliseconds lease) {
  tl::lock_options o;
  o.lease = lease;
  o.skew_allowance = 0ms;  // stale as soon as the lease ends
  o.wait = 30s;
  return o;
}

// Takes the lock's current token over by force. A refresh by the keeper
// may rename it between our look and our rename; then we look again.
tl::lock_handle take_it(const tl::rename_lock& lock) {
  for (int attempt = 0; attempt < 10000; ++attempt) {
    std::optional<tl::holder_info> h = lock.holder();
    if (!h) continue;
    std::error_code ec;
    tl::lock_handle taken = lock.take_over(h->token, true, ec);
    if (!ec) return taken;
    EXPECT_EQ(ec, tl::errc::lock_lost) << tl::last_error_message();
  }
  ADD_FAILURE() << "could not take the lock over";
  return {};
}

// The slow part of an update: outlasts `span` of wall-clock time.
void work_for(std::chrono::milliseconds span) {
  const auto end = std::chrono::steady_clock::now() + span;
  while (std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(5ms);
}

}  // namespace

TEST(KeepAlive, RefreshesUntilStoppedAndHandsTheHandleBack) {
  temp_dir tmp;
  tl::rename_lock lock(tmp / "lock", short_lease(300ms));
  tl::lock_handle h = lock.acquire();
  const std::string first = h.token();
  const auto first_expiry = h.expires();

  refresh_log log;
  tl::keep_alive ka(h, {20ms, log.callback()});
  ASSERT_TRUE(log.wait_for_successes(3));
  EXPECT_FALSE(ka.stop());
  EXPECT_FALSE(ka.lost());
  EXPECT_GE(ka.refreshes(), 3u);
  EXPECT_TRUE(ka.last_message().empty());
  EXPECT_FALSE(ka.stop()) << "stop() is idempotent";

  EXPECT_NE(h.token(), first);
  EXPECT_GT(h.expires(), first_expiry);
  EXPECT_EQ(entries(tmp / "lock"), std::vector<std::string>{h.token()});
  h.release();
  EXPECT_EQ(entries(tmp / "lock"), std::vector<std::string>{"lockfile"});
}

TEST(KeepAlive, ReportsATakeoverAndLeavesTheNewOwnerAlone) {
  temp_dir tmp;
  tl::rename_lock lock(tmp / "lock", short_lease(300ms));
  tl::lock_handle h = lock.acquire();

  refresh_log log;
  tl::keep_alive ka(h, {10ms, log.callback()});
  tl::lock_handle taker = take_it(lock);
  ASSERT_TRUE(taker.owns());

  std::optional<std::error_code> seen = log.wait_for_error();
  ASSERT_TRUE(seen);
  EXPECT_EQ(*seen, tl::errc::lock_lost);
  EXPECT_EQ(ka.stop(), tl::errc::lock_lost);
  EXPECT_TRUE(ka.lost());
  EXPECT_NE(ka.last_message().find((tmp / "lock").string()), std::string::npos)
      << ka.last_message();
  EXPECT_FALSE(h.owns());
  EXPECT_EQ(entries(tmp / "lock"), std::vector<std::string>{taker.token()});
  taker.release();
  EXPECT_EQ(entries(tmp / "lock"), std::vector<std::string>{"lockfile"});
}

TEST(KeepAlive, TheErrorCodeFormRefreshesAsTheOtherDoes) {
  temp_dir tmp;
  tl::rename_lock lock(tmp / "lock", short_lease(300ms));
  tl::lock_handle h = lock.acquire();
  const std::string first = h.token();
  refresh_log log;
  std::error_code ec;
  tl::keep_alive ka(h, {20ms, log.callback()}, ec);
  EXPECT_FALSE(ec);
  ASSERT_TRUE(log.wait_for_successes(2));
  EXPECT_FALSE(ka.stop());
  EXPECT_NE(h.token(), first);
  h.release();
}

TEST(KeepAlive, RefusesAnEmptyHandleAndAnIntervalAsLongAsTheLease) {
  temp_dir tmp;
  tl::rename_lock lock(tmp / "lock", short_lease(300ms));
  tl::lock_handle empty;
  try {
    tl::keep_alive ka(empty);
    FAIL() << "keep_alive accepted an empty handle";
  } catch (const tl::lock_error& e) {
    EXPECT_EQ(e.code(), tl::errc::not_owner);
    EXPECT_NE(std::string(e.what()).find("acquire the lock first"), std::string::npos);
  }

  tl::lock_handle h = lock.acquire();
  const std::string token = h.token();
  try {
    tl::keep_alive ka(h, {300ms, {}});
    FAIL() << "keep_alive accepted an interval equal to the lease";
  } catch (const tl::lock_error& e) {
    EXPECT_EQ(e.code(), tl::errc::bad_argument);
    EXPECT_NE(std::string(e.what()).find("300 ms"), std::string::npos) << e.what();
  }
  // The error_code form: the same refusals, and an inert object.
  std::error_code ec;
  {
    tl::keep_alive ka(empty, {}, ec);
    EXPECT_EQ(ec, tl::errc::not_owner);
    EXPECT_NE(tl::last_error_message().find("acquire the lock first"), std::string::npos);
    EXPECT_EQ(ka.stop(), tl::errc::not_owner) << "stop() reports the same";
    EXPECT_EQ(ka.refreshes(), 0u);
  }
  {
    tl::keep_alive ka(h, {300ms, {}}, ec);
    EXPECT_EQ(ec, tl::errc::bad_argument);
    EXPECT_NE(ka.last_message().find("300 ms"), std::string::npos) << ka.last_message();
  }
  // Nothing was touched: the same token, still ours.
  EXPECT_EQ(h.token(), token);
  EXPECT_EQ(entries(tmp / "lock"), std::vector<std::string>{token});
  h.release();
}

// An update of "old" whose function runs three times the 300 ms lease, while
// a competitor tries to take the lock; with or without keep_alive.
struct slow_update {
  temp_dir tmp;
  boost::filesystem::path target = tmp / "data";
  bool competitor_got_it = false;
  std::error_code ec;

  explicit slow_update(bool keep_alive) {
    spit(target, "old");
    tl::rename_lock lock(tmp / "lock", short_lease(300ms));
    tl::rename_lock competitor(tmp / "lock", short_lease(300ms));
    tl::update_options options;
    options.keep_alive = keep_alive;
    tl::update_file(target, lock, [&](const std::optional<std::string>& current) {
      work_for(900ms);
      competitor_got_it = competitor.try_acquire().has_value();
      return *current + "+new";
    }, options, ec);
  }
};

TEST(KeepAlive, UpdateFileKeepsTheLockThroughASlowFunction) {
  slow_update u(true);
  EXPECT_FALSE(u.ec) << tl::last_error_message();
  EXPECT_FALSE(u.competitor_got_it);
  EXPECT_EQ(slurp(u.target), "old+new");
  EXPECT_TRUE(temp_files_below(u.tmp.path()).empty());
  EXPECT_EQ(entries(u.tmp / "lock"), std::vector<std::string>{"lockfile"});
}

// Without keep_alive the lease ends, the competitor takes over, and the
// slow update is refused. This is what the option prevents.
TEST(KeepAlive, WithoutItASlowUpdateLosesTheLock) {
  slow_update u(false);
  EXPECT_TRUE(u.competitor_got_it);
  EXPECT_EQ(u.ec, tl::errc::lock_lost);
  EXPECT_EQ(slurp(u.target), "old");
  EXPECT_TRUE(temp_files_below(u.tmp.path()).empty());
}

// A lease too short to keep alive (a third of it rounds to 0 ms): the update
// is refused before its function runs, and nothing is left behind.
TEST(KeepAlive, UpdateFileRefusesALeaseTooShortToKeepAlive) {
  temp_dir tmp;
  const auto target = tmp / "data";
  spit(target, "old");
  tl::rename_lock lock(tmp / "lock", short_lease(2ms));
  tl::update_options options;
  options.keep_alive = true;
  bool ran = false;
  std::error_code ec;
  tl::update_file(target, lock, [&](const std::optional<std::string>&) {
    ran = true;
    return std::string("new");
  }, options, ec);
  EXPECT_EQ(ec, tl::errc::bad_argument);
  EXPECT_NE(tl::last_error_message().find("keep the lease alive"), std::string::npos)
      << tl::last_error_message();
  EXPECT_FALSE(ran);
  EXPECT_EQ(slurp(target), "old");
  EXPECT_TRUE(temp_files_below(tmp.path()).empty());
  EXPECT_EQ(entries(tmp / "lock"), std::vector<std::string>{"lockfile"});
}

// A takeover while the function runs: nothing is committed, whichever of
// the keeper and the commit notices first.
TEST(KeepAlive, UpdateFileFailsCleanlyWhenTakenOverDuringTheFunction) {
  temp_dir tmp;
  const auto target = tmp / "data";
  spit(target, "old");
  tl::rename_lock lock(tmp / "lock", short_lease(300ms));

  tl::update_options options;
  options.keep_alive = true;
  tl::lock_handle taker;
  std::error_code ec;
  tl::update_file(target, lock, [&](const std::optional<std::string>& current) {
    taker = take_it(lock);
    return *current + "+new";
  }, options, ec);
  EXPECT_EQ(ec, tl::errc::lock_lost) << tl::last_error_message();
  EXPECT_NE(tl::last_error_message().find("nothing was written"), std::string::npos)
      << tl::last_error_message();
  EXPECT_EQ(slurp(target), "old");
  EXPECT_TRUE(temp_files_below(tmp.path()).empty());
  ASSERT_TRUE(taker.owns());
  EXPECT_EQ(entries(tmp / "lock"), std::vector<std::string>{taker.token()});
}

// Threads exclude each other like processes, whether each has its own
// rename_lock or they share one (the documented thread-safety of
// rename_lock, and of its shared watch cache).
TEST(Threads, UpdatesFromManyThreadsAreSerialised) {
  temp_dir tmp;
  const auto target = tmp / "count";
  tl::lock_options options;
  options.wait = 60s;
  tl::rename_lock shared(tmp / "lock", options);
  constexpr int threads = 4, rounds = 150;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};

  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::optional<tl::rename_lock> own;
      if (t % 2) own.emplace(tmp / "lock", options);
      const tl::rename_lock& lock = own ? *own : shared;
      for (int i = 0; i < rounds; ++i) {
        tl::update_file(target, lock, [&](const std::optional<std::string>& current) {
          if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
          const unsigned long n = current ? std::stoul(*current) : 0;
          inside.fetch_sub(1);
          return std::to_string(n + 1);
        });
      }
    });
  }
  for (std::thread& w : workers) w.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(slurp(target), std::to_string(threads * rounds));
  EXPECT_TRUE(temp_files_below(tmp.path()).empty());
  EXPECT_EQ(entries(tmp / "lock"), std::vector<std::string>{"lockfile"});
}

// install_signal_cleanup()'s table is written by every acquire, refresh,
// release and temporary file: from many threads at once it must keep each
// record whole (ThreadSanitizer checks the accesses) and leave nothing held.
TEST(Threads, SignalCleanupTrackingFromManyThreads) {
  temp_dir tmp;
  tl::install_signal_cleanup();
  // Tracking is on: a held token and an open temporary file take a slot
  // each, and give it back. (A table that leaked slots would fill, and
  // tracking would then return -1 silently.)
  ASSERT_EQ(tl::detail::cleanup_tracked_count(), 0);
  {
    tl::rename_lock probe(tmp / "probe");
    tl::lock_handle h = probe.acquire();
    EXPECT_EQ(tl::detail::cleanup_tracked_count(), 1);
    tl::atomic_file f(tmp / "probe-file");
    EXPECT_EQ(tl::detail::cleanup_tracked_count(), 2);
  }
  EXPECT_EQ(tl::detail::cleanup_tracked_count(), 0);
  constexpr int threads = 4, rounds = 200;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      tl::rename_lock lock(tmp / ("lock" + std::to_string(t)));
      tl::write_options fast;
      fast.sync = tl::durability::none;
      for (int i = 0; i < rounds; ++i) {
        tl::lock_handle h = lock.acquire();
        h.refresh();
        tl::atomic_write(tmp / ("file" + std::to_string(t)), std::to_string(i), fast);
        h.release();
      }
    });
  }
  for (std::thread& w : workers) w.join();
  for (int t = 0; t < threads; ++t) {
    EXPECT_EQ(entries(tmp / ("lock" + std::to_string(t))), std::vector<std::string>{"lockfile"});
    EXPECT_EQ(slurp(tmp / ("file" + std::to_string(t))), std::to_string(rounds - 1));
  }
  EXPECT_TRUE(temp_files_below(tmp.path()).empty());
  EXPECT_EQ(tl::detail::cleanup_tracked_count(), 0) << "slots outlived their tokens or files";
}
