// The protocol of docs/protocol.md over the OS seam: real renames in a
// temporary directory, with processes, hosts, clocks and faults played by
// fake_os.
#include <algorithm>
#include <functional>
#include <gtest/gtest.h>

#include <cerrno>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/filesystem.hpp>

#include "with_os.hpp"
#include "fake_os.hpp"
#include "temp_dir.hpp"
#include "token_name.hpp"
#include "wait_line.hpp"
#include "waiting.hpp"
#include "tokenlock/tokenlock.hpp"

namespace fs = boost::filesystem;
using namespace std::chrono_literals;
using tokenlock::errc;
using tokenlock::lock_error;
using tokenlock::lock_handle;
using tokenlock::lock_options;
using tokenlock::rename_lock;
using tokenlock::testing::fake_os;
using tokenlock::testing::op;
using tokenlock::testing::fake_world;
using tokenlock::testing::snapshot;
using tokenlock::testing::temp_dir;

namespace {

constexpr const char* other_host = "elsewhere-12345678";

class RenameLockTest : public ::testing::Test {
 protected:
  temp_dir tmp;
  fs::path dir = tmp / "data.lock";
  std::shared_ptr<fake_world> world = std::make_shared<fake_world>();

  std::shared_ptr<fake_os> process(int pid, const std::string& host = "testhost-0000abcd") {
    return std::make_shared<fake_os>(world, pid, 5000 + static_cast<std::uint64_t>(pid), host);
  }
  static lock_options options(std::chrono::milliseconds lease = 10s,
                              std::chrono::milliseconds wait = 0ms) {
    lock_options o;
    o.lease = lease;
    o.wait = wait;
    o.skew_allowance = 100ms;
    return o;
  }
  rename_lock lock_for(const std::shared_ptr<fake_os>& p, lock_options o = options()) {
    return tokenlock::detail::with_os::lock(dir, o, p);
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  // Entries beside the lock directory that creation may leave behind.
  std::vector<std::string> init_leftovers() const {
    std::vector<std::string> out;
    for (auto& e : fs::directory_iterator(tmp.path()))
      if (e.path().filename().string().find(".init.") != std::string::npos)
        out.push_back(e.path().string());
    return out;
  }
  std::string token_name(std::int64_t expiry_us, const std::string& host, int pid,
                         std::uint64_t start, std::uint64_t nonce = 0x1234) {
    return tokenlock::detail::make_token(expiry_us, host, pid, start, nonce);
  }
  void plant(const std::string& name) { fs::create_directories(dir / name); }
};

// What a throwing call threw: its code and message (empty when it did not).
struct caught {
  std::error_code code;
  std::string message;
};

template <class F>
caught catch_of(F f) {
  try {
    f();
  } catch (const lock_error& e) {
    return {e.code(), e.what()};
  }
  return {};
}

template <class F>
std::error_code code_of(F f) {
  return catch_of(f).code;
}

template <class F>
std::string message_of(F f) {
  return catch_of(f).message;
}

// The durations (µs) a played process slept, in order.
std::vector<long> sleeps_of(const fake_os& p) {
  std::vector<long> out;
  for (auto& c : p.calls)
    if (c.rfind("sleep_for ", 0) == 0) out.push_back(std::stol(c.substr(10)));
  return out;
}

TEST_F(RenameLockTest, CreatesMissingDirectoryWithExactModeAndAcquires) {
  auto a = process(100);
  lock_options o = options();
  o.dir_mode = 0775;
  mode_t old = ::umask(022);
  lock_handle h = lock_for(a, o).acquire();
  ::umask(old);
  ASSERT_TRUE(h.owns());
  EXPECT_EQ(entries(), std::vector<std::string>{h.token()});
  EXPECT_EQ(h.path(), dir / h.token());
  EXPECT_TRUE(fs::is_directory(h.path()));
  EXPECT_EQ(fs::status(dir).permissions() & 07777, 0775);
  EXPECT_EQ(fs::status(h.path()).permissions() & 07777, 0775);
  EXPECT_TRUE(init_leftovers().empty());
}

TEST_F(RenameLockTest, PopulatesAnEmptyExistingDirectory) {
  fs::create_directories(dir);
  auto a = process(100);
  lock_handle h = lock_for(a).acquire();
  EXPECT_EQ(entries(), std::vector<std::string>{h.token()});
  EXPECT_TRUE(init_leftovers().empty());
}

TEST_F(RenameLockTest, ReleaseRenamesTheTokenBack) {
  auto a = process(100);
  lock_handle h = lock_for(a).acquire();
  h.release();
  EXPECT_FALSE(h.owns());
  EXPECT_TRUE(h.token().empty());
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_FALSE(lock_for(a).holder().has_value());
}

TEST_F(RenameLockTest, TokenCarriesExpiryAndOwner) {
  auto a = process(4242);
  lock_handle h = lock_for(a, options(30s)).acquire();
  tokenlock::detail::held_token t;
  ASSERT_EQ(tokenlock::detail::classify_name(h.token(), &t), tokenlock::detail::name_kind::held);
  EXPECT_EQ(t.expiry_us, world->wall_us + 30'000'000);
  EXPECT_EQ(t.pid, 4242);
  EXPECT_EQ(t.start_time, 5000u + 4242u);
  EXPECT_EQ(t.host_tag, "testhost-0000abcd");
  EXPECT_EQ(h.expires().time_since_epoch(), std::chrono::microseconds(t.expiry_us));
}

TEST_F(RenameLockTest, RefreshExtendsTheLeaseAndMovesTheWorkspace) {
  auto a = process(100);
  lock_handle h = lock_for(a, options(10s)).acquire();
  fs::path old_path = h.path();
  fs::ofstream(old_path / "work") << "x";
  world->advance(3'000'000);
  h.refresh();
  EXPECT_FALSE(fs::exists(old_path));
  EXPECT_TRUE(fs::exists(h.path() / "work"));
  EXPECT_EQ(h.expires().time_since_epoch(), std::chrono::microseconds(world->wall_us + 10'000'000));
  h.refresh(20s);
  EXPECT_EQ(h.expires().time_since_epoch(), std::chrono::microseconds(world->wall_us + 20'000'000));
  EXPECT_EQ(entries(), std::vector<std::string>{h.token()});
}

TEST_F(RenameLockTest, FastPathIsTwoRenamesAndNothingElse) {
  auto a = process(100);
  rename_lock lock = lock_for(a);
  lock.acquire().release();  // creates the directory, asks for the filesystem once
  EXPECT_EQ(std::count(a->calls.begin(), a->calls.end(), "filesystem_of " + dir.string()), 1);
  a->calls.clear();
  lock_handle h = lock.acquire();
  const std::string token = h.token();
  h.release();
  ASSERT_EQ(a->calls.size(), 2u);
  EXPECT_EQ(a->calls[0], "rename " + (dir / "lockfile").string() + " -> " + (dir / token).string());
  EXPECT_EQ(a->calls[1], "rename " + (dir / token).string() + " -> " +
                             (dir / "lockfile").string())
      << "release must rename the token it holds";
}

TEST_F(RenameLockTest, TryAcquireReturnsNothingWhileAnOwnerLives) {
  auto a = process(100), b = process(200);
  lock_handle h = lock_for(a).acquire();
  auto before = snapshot(tmp.path());
  EXPECT_FALSE(lock_for(b).try_acquire().has_value());
  std::error_code ec;
  EXPECT_FALSE(lock_for(b).try_acquire(ec).has_value());
  EXPECT_FALSE(ec);
  EXPECT_EQ(code_of([&] { lock_for(b).acquire(); }), errc::busy);
  EXPECT_NE(message_of([&] { lock_for(b).acquire(); }).find("held by pid 100 on this host"),
            std::string::npos);
  EXPECT_EQ(snapshot(tmp.path()), before);
  EXPECT_TRUE(h.owns());
}

TEST_F(RenameLockTest, WaitsWithJitteredBackoffAndTimesOutAtTheBudget) {
  auto a = process(100), b = process(200);
  lock_handle h = lock_for(a, options(60s)).acquire();
  const auto start = world->steady_us;
  b->calls.clear();
  EXPECT_EQ(code_of([&] { lock_for(b, options(60s, 300ms)).acquire(); }), errc::timed_out);
  EXPECT_EQ(world->steady_us - start, 300'000) << "the last sleep is cut at the deadline";
  std::vector<long> sleeps = sleeps_of(*b);
  ASSERT_GE(sleeps.size(), 5u);
  EXPECT_GE(sleeps[0], 75);
  EXPECT_LE(sleeps[0], 125);
  EXPECT_GE(sleeps[1], 150);
  EXPECT_LE(sleeps[1], 250);
  for (long s : sleeps) EXPECT_LE(s, 62'500);
  std::string msg = message_of([&] { lock_for(b, options(60s, 50ms)).acquire(); });
  EXPECT_NE(msg.find("timed out after 50 ms"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir.string()), std::string::npos) << msg;
}

TEST_F(RenameLockTest, FollowsTheConfiguredBackoffBounds) {
  auto a = process(100), b = process(200);
  lock_handle h = lock_for(a, options(60s)).acquire();
  lock_options o = options(60s, 100ms);
  o.backoff_min = 2ms;
  o.backoff_max = 8ms;
  b->calls.clear();
  EXPECT_EQ(code_of([&] { lock_for(b, o).acquire(); }), errc::timed_out);
  std::vector<long> sleeps = sleeps_of(*b);
  ASSERT_GE(sleeps.size(), 4u);
  EXPECT_GE(sleeps[0], 1500);
  EXPECT_LE(sleeps[0], 2500);
  for (size_t i = 0; i + 1 < sleeps.size(); ++i) EXPECT_LE(sleeps[i], 10'000);
}

TEST_F(RenameLockTest, AWaiterChecksWithALookupBeforeRenamingAndLooksAtTheHolderSparingly) {
  auto a = process(100), b = process(200);
  lock_handle h = lock_for(a, options(60s)).acquire();
  b->calls.clear();
  EXPECT_EQ(code_of([&] { lock_for(b, options(60s, 100ms)).acquire(); }), errc::timed_out);
  int renames = 0, lookups = 0, listings = 0;
  for (auto& c : b->calls) {
    renames += c.rfind("rename ", 0) == 0;
    lookups += c.rfind("status " + (dir / "lockfile").string(), 0) == 0;
    listings += c.rfind("list_directory", 0) == 0;
  }
  EXPECT_EQ(renames, 1) << "only the first round renames while the token is not free";
  EXPECT_GT(lookups, 3);
  // 100 ms of waiting, a look at most every 10 ms (each look may list twice
  // only for anomalies, which this is not), plus the first and the last.
  EXPECT_LE(listings, 12);
  EXPECT_GE(listings, 2);
}

int count_calls(const fake_os& p, const std::string& prefix) {
  int n = 0;
  for (auto& c : p.calls) n += c.rfind(prefix, 0) == 0;
  return n;
}

int count_exact_calls(const fake_os& p, const std::string& call) {
  return static_cast<int>(std::count(p.calls.begin(), p.calls.end(), call));
}

TEST_F(RenameLockTest, AWaiterWatchesForReleasesAndDisarmsItsWatchAfterwards) {
  auto a = process(100), b = process(200);
  lock_handle h = lock_for(a, options(60s)).acquire();
  b->release_interval_us = 5000;  // slow releases: worth watching
  rename_lock lock = lock_for(b, options(60s, 100ms));
  b->calls.clear();
  EXPECT_EQ(code_of([&] { lock.acquire(); }), errc::timed_out);
  EXPECT_EQ(count_calls(*b, "watch_arm"), 1);
  EXPECT_EQ(count_calls(*b, "watch_disarm"), 1) << "an idle watch taxes the holder's renames";
  EXPECT_GT(count_calls(*b, "watch_wait"), 5);
  EXPECT_EQ(count_calls(*b, "sleep_for"), 0);
  b->calls.clear();
  EXPECT_EQ(code_of([&] { lock.acquire(); }), errc::timed_out);
  EXPECT_EQ(count_calls(*b, "watch_directory"), 0) << "the instance is kept between waits";
  EXPECT_EQ(count_calls(*b, "watch_arm"), 1);
}

TEST_F(RenameLockTest, FastReleasesSwitchWaitersToPollingForAWhile) {
  auto a = process(100), b = process(200);
  lock_handle h = lock_for(a, options(60s)).acquire();
  b->release_interval_us = 50;  // the lock cycles through empty critical sections
  rename_lock lock = lock_for(b, options(60s, 20ms));
  b->calls.clear();
  EXPECT_EQ(code_of([&] { lock.acquire(); }), errc::timed_out);
  EXPECT_EQ(count_calls(*b, "watch_wait"), 4) << "a first wake, then three quick ones";
  EXPECT_GT(count_calls(*b, "sleep_for"), 0) << "then it polls";
  EXPECT_EQ(count_calls(*b, "watch_disarm"), 1);
  b->calls.clear();
  EXPECT_EQ(code_of([&] { lock.acquire(); }), errc::timed_out);
  EXPECT_EQ(count_calls(*b, "watch_arm"), 0) << "the verdict is remembered";
  world->advance(100'000);
  b->calls.clear();
  EXPECT_EQ(code_of([&] { lock.acquire(); }), errc::timed_out);
  EXPECT_EQ(count_calls(*b, "watch_arm"), 1) << "and forgotten after 100 ms";
}

TEST_F(RenameLockTest, AWatchIsNotReusedAfterFork) {
  auto a = process(100), b = process(200);
  lock_handle h = lock_for(a, options(60s)).acquire();
  b->release_interval_us = 5000;
  rename_lock lock = lock_for(b, options(60s, 20ms));
  EXPECT_EQ(code_of([&] { lock.acquire(); }), errc::timed_out);
  b->simulate_fork();
  b->calls.clear();
  EXPECT_EQ(code_of([&] { lock.acquire(); }), errc::timed_out);
  EXPECT_EQ(count_calls(*b, "watch_directory"), 1) << "parent and child would share one queue";
}

// The line of waiters (lock_options::queue_waiters): one board per lock,
// beside its directory; words as in wait_line.hpp.
using tokenlock::detail::wait_line;

class WaitLineTest : public RenameLockTest {
 protected:
  std::string board_path() const { return dir.string() + ".wait"; }
  std::uint32_t* board() { return world->boards[board_path()].data(); }
  std::uint32_t now_ms() const { return static_cast<std::uint32_t>(world->steady_us / 1000); }
  // b's lock object after one wait (a held the lock until b opened the
  // board): the board stays mapped in it.
  rename_lock lock_that_has_waited(const std::shared_ptr<fake_os>& a,
                                   const std::shared_ptr<fake_os>& b) {
    rename_lock lock = lock_for(b, options(10s, 1s));
    lock_handle h = lock_for(a).acquire();
    b->when(op::create_wait_board, "", [&] { h.release(); });
    lock.acquire().release();
    return lock;
  }
  // Another waiter, not played here, at the head of the line; it last
  // looked `ago_ms` ago.
  void someone_at_the_head(std::uint32_t ago_ms) {
    board()[wait_line::magic_word] = wait_line::board_magic;
    board()[wait_line::head_word] = 4242;
    board()[wait_line::beat_word] = now_ms() - ago_ms;
  }
};

TEST_F(WaitLineTest, AWaiterAloneHeadsTheLineAndHandsItOnOnceItHasTheLock) {
  auto a = process(100), b = process(200);
  lock_handle h = lock_for(a).acquire();
  rename_lock lock = lock_for(b, options(10s, 1s));
  // Released while b creates the board: b heads the line, looks once more
  // after its pause, and takes the lock.
  b->when(op::create_wait_board, "", [&] { h.release(); });
  lock_handle mine = lock.acquire();
  EXPECT_TRUE(mine.owns());
  EXPECT_EQ(count_calls(*b, "open_wait_board " + board_path()), 1) << "a line to join?";
  EXPECT_EQ(count_calls(*b, "create_wait_board " + board_path()), 1);
  EXPECT_EQ(count_calls(*b, "board_wait"), 0) << "nobody to wait for: it looks itself";
  EXPECT_EQ(board()[wait_line::magic_word], wait_line::board_magic);
  EXPECT_EQ(board()[wait_line::head_word], 0u) << "the place is free again";
  EXPECT_EQ(board()[wait_line::turn_word], 1u);
  EXPECT_EQ(count_calls(*b, "board_wake " + board_path()), 1) << "the next sleeper is woken";
  EXPECT_EQ(entries().size(), 1u);
}

TEST_F(WaitLineTest, ANewcomerWithNoLineLooksAtOnceAndMakesTheBoardOnlyAfterSeeingAHolder) {
  auto a = process(100), b = process(200);
  lock_handle h = lock_for(a).acquire();
  b->calls.clear();
  EXPECT_EQ(code_of([&] { lock_for(b, options(10s, 5ms)).acquire(); }), errc::timed_out);
  const auto at = [&](const std::string& prefix) {
    return std::find_if(b->calls.begin(), b->calls.end(),
                        [&](const std::string& c) { return c.rfind(prefix, 0) == 0; }) -
           b->calls.begin();
  };
  ASSERT_EQ(count_calls(*b, "create_wait_board"), 1);
  EXPECT_LT(at("open_wait_board"), at("list_directory")) << "first: is there a line?";
  EXPECT_LT(at("list_directory"), at("create_wait_board")) << "then: who holds it?";
  EXPECT_LT(at("list_directory"), at("sleep_for")) << "it looked without waiting first";
  EXPECT_EQ(board()[wait_line::magic_word], wait_line::board_magic);
  EXPECT_TRUE(h.owns());
}

TEST_F(WaitLineTest, TheFirstAcquisitionOfAFreshLockLeavesNoBoard) {
  auto a = process(100), b = process(200);
  ASSERT_FALSE(fs::exists(dir));
  lock_for(a, options(10s, 1s)).acquire().release();
  // And a waiter that finds the lock free after all makes none either.
  lock_handle h = lock_for(a).acquire();
  b->when(op::open_wait_board, "", [&] { h.release(); });
  lock_for(b, options(10s, 1s)).acquire().release();
  EXPECT_EQ(count_calls(*a, "create_wait_board") + count_calls(*b, "create_wait_board"), 0);
  EXPECT_EQ(world->boards.count(board_path()), 0u);
  EXPECT_FALSE(fs::exists(board_path()));
}

TEST_F(WaitLineTest, ASleeperLeavesTheLockToALiveHeadUntilItsDeadline) {
  auto a = process(100), b = process(200);
  lock_handle h = lock_for(a).acquire();
  someone_at_the_head(0);
  b->calls.clear();
  const auto start = world->steady_us;
  const std::string msg = message_of([&] { lock_for(b, options(10s, 60ms)).acquire(); });
  EXPECT_NE(msg.find("timed out after 60 ms"), std::string::npos) << msg;
  EXPECT_NE(msg.find("held by pid 100"), std::string::npos) << "judged at the deadline: " << msg;
  EXPECT_EQ(world->steady_us - start, 60'000);
  // The head stays fresh for 110 ms (twice the default backoff_max and
  // 10 ms), past the budget: one nap covers it, with no wake-ups between.
  EXPECT_EQ(count_calls(*b, "board_wait"), 1);
  // The newcomer's first round renames (and checks for an NFS retransmit)
  // but leaves judging the holder to the head: the only listing is the
  // verdict after the nap.
  EXPECT_EQ(count_calls(*b, "list_directory"), 1);
  const auto wait_at = std::find_if(b->calls.begin(), b->calls.end(), [](const std::string& c) {
    return c.rfind("board_wait", 0) == 0;
  });
  const auto list_at = std::find_if(b->calls.begin(), b->calls.end(), [](const std::string& c) {
    return c.rfind("list_directory", 0) == 0;
  });
  EXPECT_LT(wait_at, list_at);
  EXPECT_EQ(count_exact_calls(*b, "status " + (dir / "lockfile").string()), 1);
  EXPECT_EQ(count_calls(*b, "sleep_for"), 0);
  EXPECT_EQ(count_calls(*b, "watch_"), 0) << "only the head watches";
  EXPECT_EQ(board()[wait_line::head_word], 4242u) << "a live head keeps its place";
  EXPECT_EQ(count_calls(*b, "board_wake"), 0);
  EXPECT_EQ(lock_for(a).holder()->token, h.path().filename().string());
}

TEST_F(WaitLineTest, ASleeperWakesWhenTheHeadsBeatGoesStaleAndTakesItsPlace) {
  auto a = process(100), b = process(200);
  lock_handle h = lock_for(a).acquire();
  // Stale after 110 ms without a beat; this one is 100 ms old.
  someone_at_the_head(100);
  b->calls.clear();
  EXPECT_EQ(code_of([&] { lock_for(b, options(10s, 50ms)).acquire(); }), errc::timed_out);
  ASSERT_GE(count_calls(*b, "board_wait"), 1);
  const auto first_wait = *std::find_if(b->calls.begin(), b->calls.end(), [](const std::string& c) {
    return c.rfind("board_wait", 0) == 0;
  });
  EXPECT_EQ(first_wait.substr(first_wait.rfind(' ') + 1), "11000")
      << "it sleeps until the beat is stale and a millisecond more: " << first_wait;
  EXPECT_EQ(count_calls(*b, "board_wait"), 1) << "then it heads the line";
  // As the head it judges the holder at once (the head it replaced may
  // have stopped with the holder), and again at the deadline.
  EXPECT_GE(count_calls(*b, "list_directory"), 2);
  EXPECT_EQ(board()[wait_line::head_word], 0u) << "it left the place when it gave up";
  EXPECT_EQ(count_calls(*b, "board_wake"), 1);
  EXPECT_TRUE(h.owns());
}

TEST_F(WaitLineTest, AWaiterHandedThePlaceLeavesTheNewHolderUnjudgedForALookInterval) {
  auto a = process(100), b = process(200);
  lock_handle h = lock_for(a).acquire();
  someone_at_the_head(0);
  // The head hands its place on while b sleeps: it has just taken the lock
  // (played by a's token), so the holder is alive.
  b->when(op::board_wait, board_path(), [&] {
    board()[wait_line::head_word] = 0;
    ++board()[wait_line::turn_word];
  });
  b->calls.clear();
  EXPECT_EQ(code_of([&] { lock_for(b, options(10s, 5ms)).acquire(); }), errc::timed_out);
  EXPECT_EQ(count_calls(*b, "board_wait"), 1);
  EXPECT_EQ(count_calls(*b, "list_directory"), 1) << "only the verdict at the deadline";
  EXPECT_GT(count_calls(*b, "sleep_for"), 0) << "it looked for the lock itself as the head";
  EXPECT_EQ(board()[wait_line::head_word], 0u);
  EXPECT_EQ(count_calls(*b, "board_wake"), 1) << "and handed the place on when it gave up";
}

TEST_F(WaitLineTest, AWaiterThatFindsNobodyAtTheHeadTakesOverADeadHolderOnItsNextRound) {
  auto a = process(100), b = process(200);
  lock_handle ha = lock_for(a, options(60s)).acquire();
  world->processes.erase(100);
  b->calls.clear();
  const auto start = world->steady_us;
  lock_handle hb = lock_for(b, options(60s, 1s)).acquire();
  EXPECT_TRUE(hb.owns());
  EXPECT_LT(world->steady_us - start, 1000) << "one backoff, not a look interval";
  EXPECT_EQ(count_exact_calls(*b, "list_directory " + dir.string()), 1);
  EXPECT_EQ(count_calls(*b, "board_wait"), 0);
  EXPECT_EQ(entries(), std::vector<std::string>{hb.token()});
}

TEST_F(WaitLineTest, AHandOffWakesTheSleeperWhichThenTakesTheLockAndPassesTheTurn) {
  auto a = process(100), b = process(200);
  lock_handle h = lock_for(a).acquire();
  someone_at_the_head(0);
  rename_lock lock = lock_for(b, options(10s, 1s));
  const auto start = world->steady_us;
  // The head gets the lock... and hands its place on; here the holder
  // releases at that moment too.
  b->when(op::board_wait, board_path(), [&] {
    board()[wait_line::head_word] = 0;
    ++board()[wait_line::turn_word];
    h.release();
  });
  lock_handle mine = lock.acquire();
  EXPECT_TRUE(mine.owns());
  EXPECT_LT(world->steady_us - start, 1000) << "woken at once, not after its backoff";
  EXPECT_EQ(count_calls(*b, "board_wait"), 1);
  EXPECT_EQ(board()[wait_line::head_word], 0u);
  EXPECT_EQ(board()[wait_line::turn_word], 2u) << "woken as a sleeper, it passes the turn on";
  EXPECT_EQ(count_calls(*b, "board_wake"), 1);
}

TEST_F(WaitLineTest, AHeadThatStoppedLookingIsReplaced) {
  auto a = process(100), b = process(200);
  lock_handle h = lock_for(a).acquire();
  // Default backoff_max is 50 ms: a head is gone after 110 ms without a beat.
  someone_at_the_head(111);
  b->calls.clear();
  EXPECT_EQ(code_of([&] { lock_for(b, options(10s, 20ms)).acquire(); }), errc::timed_out);
  EXPECT_EQ(count_calls(*b, "board_wait"), 0) << "it took the place at once";
  EXPECT_GT(count_calls(*b, "sleep_for"), 0);
  EXPECT_EQ(board()[wait_line::head_word], 0u) << "and left it when it gave up";
  EXPECT_EQ(count_calls(*b, "board_wake"), 1);
  EXPECT_TRUE(h.owns());
  EXPECT_EQ(entries().size(), 1u);
}

TEST_F(WaitLineTest, AHeadStillLookingWithinItsBeatIsNotReplaced) {
  auto a = process(100), b = process(200);
  lock_handle h = lock_for(a).acquire();
  someone_at_the_head(100);
  EXPECT_EQ(code_of([&] { lock_for(b, options(10s, 5ms)).acquire(); }), errc::timed_out);
  EXPECT_EQ(board()[wait_line::head_word], 4242u);
  EXPECT_GT(count_calls(*b, "board_wait"), 0);
}

TEST_F(WaitLineTest, AHeadWhoseBeatIsAheadOfThisClockIsReplacedAtOnce) {
  // The board outlived a reboot: its head word names a waiter killed at
  // shutdown, and the beat it left lies ahead of this boot's clock by the
  // difference of the two uptimes.
  auto a = process(100), b = process(200);
  lock_handle h = lock_for(a).acquire();
  someone_at_the_head(0);
  board()[wait_line::beat_word] = now_ms() + 1'000'000;
  b->calls.clear();
  EXPECT_EQ(code_of([&] { lock_for(b, options(10s, 20ms)).acquire(); }), errc::timed_out);
  EXPECT_EQ(count_calls(*b, "board_wait"), 0) << "it took the place at once";
  EXPECT_GT(count_calls(*b, "list_directory"), 0) << "and looked at the lock itself";
  EXPECT_EQ(board()[wait_line::head_word], 0u) << "and left it when it gave up";
  EXPECT_TRUE(h.owns());
}

// Whatever the board holds, a waiter takes a freed lock within a bound: a
// beat up to stale_head_after ahead holds a sleeper at most twice that, and
// a head that never hands on (a board that something keeps rewriting)
// sleeper_look_interval (waiting.hpp).
TEST_F(WaitLineTest, ABoardHoldsAWaiterFromAFreedLockNoLongerThanTheStaleTimeWhateverItsBeat) {
  auto a = process(100), b = process(200);
  const lock_options o = options(10s, 10s);
  const std::int64_t stale_us = tokenlock::detail::stale_head_after(o).count() * 1000;
  for (std::int64_t ahead_ms : {-1'000'000LL, -111LL, -110LL, -50LL, 0LL, 50LL, 109LL, 110LL,
                                111LL, 1'000'000LL, 0x7fffffffLL}) {
    SCOPED_TRACE("beat ahead by " + std::to_string(ahead_ms) + " ms");
    lock_handle h = lock_for(a).acquire();
    someone_at_the_head(0);
    board()[wait_line::beat_word] = static_cast<std::uint32_t>(now_ms() + ahead_ms);
    board()[wait_line::hungry_word] = 1;
    board()[wait_line::turn_word] = 0xfffffff0u;
    std::int64_t freed_at = 0;
    b->when(op::open_wait_board, "", [&] {
      h.release();
      freed_at = world->steady_us;
    });
    lock_handle mine = lock_for(b, o).acquire();
    ASSERT_TRUE(mine.owns());
    ASSERT_NE(freed_at, 0);
    EXPECT_LE(world->steady_us - freed_at, 2 * stale_us + 2000);
  }
}

TEST_F(WaitLineTest, ASleeperLooksForItselfWhenTheHeadNeverHandsOn) {
  // Another process keeps writing a head and a fresh beat and bumping the
  // turn, every 10 ms: the sleeper never gets the place, and must not wait
  // for it past sleeper_look_interval once the lock is free.
  auto a = process(100), b = process(200);
  const lock_options o = options(10s, 10s);
  lock_handle h = lock_for(a).acquire();
  someone_at_the_head(0);
  std::int64_t freed_at = 0;
  int scribbles = 0;
  std::function<void()> scribble = [&] {
    if (h.owns()) {
      h.release();
      freed_at = world->steady_us;
    }
    world->advance(10'000);
    board()[wait_line::head_word] = 4242;
    board()[wait_line::beat_word] = now_ms();
    ++board()[wait_line::turn_word];
    ++scribbles;
    b->when(op::board_wait, board_path(), scribble);
  };
  b->when(op::board_wait, board_path(), scribble);
  lock_handle mine = lock_for(b, o).acquire();
  ASSERT_TRUE(mine.owns());
  // The scribbler re-arms itself after each wait: its last arming is meant
  // to stay unused (scribbles counts the ones that fired).
  b->disarm();
  EXPECT_GT(scribbles, 10) << "it slept through the scribbles for a while";
  const std::int64_t bound_us = tokenlock::detail::sleeper_look_interval(o).count() * 1000;
  EXPECT_EQ(bound_us, 440'000) << "the documented bound for the default options";
  EXPECT_LE(world->steady_us - freed_at, bound_us + 10'000);
  EXPECT_EQ(board()[wait_line::head_word], 4242u) << "it never had the place";
}

TEST_F(WaitLineTest, WhereNoBoardCanBeMadeWaitersPollAndNoFileIsLeft) {
  // ENOTSUP: the filesystem is a network or FUSE one (posix_os.cpp).
  auto a = process(100), b = process(200);
  lock_handle h = lock_for(a).acquire();
  b->fail(op::create_wait_board, "", ENOTSUP);
  rename_lock lock = lock_for(b, options(10s, 20ms));
  EXPECT_EQ(code_of([&] { lock.acquire(); }), errc::timed_out);
  EXPECT_EQ(code_of([&] { lock.acquire(); }), errc::timed_out);
  EXPECT_EQ(count_calls(*b, "create_wait_board"), 1) << "the verdict is kept by the lock object";
  EXPECT_GT(count_calls(*b, "sleep_for"), 0);
  EXPECT_EQ(count_calls(*b, "board_"), 0);
  EXPECT_EQ(world->boards.count(board_path()), 0u);
  EXPECT_TRUE(h.owns());
}

TEST_F(WaitLineTest, AProcessThatWaitedBeforeJoinsAHungryLineInsteadOfTakingTheFreeLock) {
  auto a = process(100), b = process(200);
  rename_lock lock = lock_that_has_waited(a, b);
  someone_at_the_head(0);
  board()[wait_line::hungry_word] = 1;
  // The head gets the lock while b sleeps, and hands its place on.
  b->when(op::board_wait, board_path(), [&] {
    lock_handle theirs = lock_for(a).acquire();
    board()[wait_line::head_word] = 0;
    board()[wait_line::hungry_word] = 0;
    ++board()[wait_line::turn_word];
    theirs.release();
  });
  b->calls.clear();
  lock_handle mine = lock.acquire();
  EXPECT_TRUE(mine.owns());
  ASSERT_FALSE(b->calls.empty());
  EXPECT_EQ(b->calls.front().rfind("board_wait", 0), 0u)
      << "no rename past the hungry head: " << b->calls.front();
  EXPECT_EQ(count_calls(*b, "open_wait_board"), 0) << "the board was already mapped";
}

TEST_F(WaitLineTest, AProcessThatWaitedBeforeTakesTheFastPathWhileTheLineIsNotHungry) {
  auto a = process(100), b = process(200);
  rename_lock lock = lock_that_has_waited(a, b);
  someone_at_the_head(0);
  b->calls.clear();
  lock.acquire().release();
  EXPECT_EQ(b->calls.size(), 2u) << "two renames, nothing else";
  // Nor for a head that is gone, hungry or not.
  board()[wait_line::hungry_word] = 1;
  board()[wait_line::beat_word] = now_ms() - 111;
  b->calls.clear();
  lock.acquire().release();
  EXPECT_EQ(b->calls.size(), 2u);
}

TEST_F(WaitLineTest, AHeadPastItsPatienceMarksTheLineHungryAndPollsQuicklyUntilItLeaves) {
  auto a = process(100), b = process(200);
  lock_handle h = lock_for(a).acquire();
  lock_options o = options(10s, 30ms);
  o.wake_on_release = false;
  // Each look lists the directory; the last one is the verdict at the
  // deadline. The hook re-arms itself to see them all.
  std::vector<std::uint32_t> hungry_at_looks;
  std::function<void()> record = [&] {
    hungry_at_looks.push_back(board()[wait_line::hungry_word]);
    b->when(op::list_directory, dir.string(), record);
  };
  b->when(op::list_directory, dir.string(), record);
  EXPECT_EQ(code_of([&] { lock_for(b, o).acquire(); }), errc::timed_out);
  // The recorder re-arms itself after each look: its last arming is meant
  // to stay unused (hungry_at_looks holds the ones that fired).
  b->disarm();
  ASSERT_GE(hungry_at_looks.size(), 2u);
  EXPECT_EQ(hungry_at_looks.front(), 0u) << "not hungry when it first looked, as a new head";
  EXPECT_EQ(hungry_at_looks.back(), 1u) << "marked after 1 ms at the head";
  EXPECT_EQ(board()[wait_line::hungry_word], 0u) << "cleared when it gave up";
  EXPECT_EQ(board()[wait_line::head_word], 0u);
  // Once hungry it polls every backoff_min (100 us, with jitter), not on its
  // growing backoff: the others leave a freed lock to it.
  std::vector<long> sleeps = sleeps_of(*b);
  ASSERT_GE(sleeps.size(), 10u);
  for (std::size_t i = sleeps.size() - 5; i < sleeps.size() - 1; ++i)
    EXPECT_LE(sleeps[i], 125) << i;
  EXPECT_TRUE(h.owns());
}

TEST_F(WaitLineTest, WithoutABoardEachWaiterPollsOnItsOwn) {
  auto a = process(100), b = process(200), c = process(300);
  lock_handle h = lock_for(a).acquire();
  b->fail(op::open_wait_board, "", EACCES);
  EXPECT_EQ(code_of([&] { lock_for(b, options(10s, 20ms)).acquire(); }), errc::timed_out);
  EXPECT_EQ(count_calls(*b, "open_wait_board"), 1);
  EXPECT_GT(count_calls(*b, "sleep_for"), 0);
  EXPECT_EQ(count_calls(*b, "board_"), 0);
  // A board that holds something else is not used either.
  board()[wait_line::magic_word] = 0xdeadbeef;
  board()[wait_line::head_word] = 4242;
  board()[wait_line::beat_word] = now_ms();
  EXPECT_EQ(code_of([&] { lock_for(c, options(10s, 20ms)).acquire(); }), errc::timed_out);
  EXPECT_EQ(count_calls(*c, "board_"), 0);
  EXPECT_GT(count_calls(*c, "sleep_for"), 0);
  EXPECT_EQ(board()[wait_line::magic_word], 0xdeadbeefu) << "never overwritten";
  EXPECT_TRUE(h.owns());
}

TEST_F(WaitLineTest, QueueWaitersOffNeverOpensTheBoard) {
  auto a = process(100), b = process(200);
  lock_handle h = lock_for(a).acquire();
  lock_options o = options(10s, 20ms);
  o.queue_waiters = false;
  EXPECT_EQ(code_of([&] { lock_for(b, o).acquire(); }), errc::timed_out);
  EXPECT_EQ(count_calls(*b, "open_wait_board"), 0);
  EXPECT_GT(count_calls(*b, "sleep_for"), 0);
}

TEST_F(WaitLineTest, AnUncontendedLockNeverOpensTheBoard) {
  auto a = process(100);
  a->calls.clear();
  lock_for(a).acquire().release();
  lock_for(a).acquire().release();
  EXPECT_EQ(count_calls(*a, "open_wait_board"), 0) << "the fast path stays two renames";
  EXPECT_EQ(world->boards.count(board_path()), 0u);
}

TEST_F(RenameLockTest, TakesOverATokenWhoseLeaseEnded) {
  auto a = process(100, other_host), b = process(200);
  lock_handle ha = lock_for(a, options(1s)).acquire();
  world->advance(1'000'000 + 100'000 + 1);  // lease + skew allowance, and a tick
  auto info = lock_for(b).holder();
  ASSERT_TRUE(info);
  EXPECT_TRUE(info->stale);
  EXPECT_NE(info->reason.find("ended"), std::string::npos) << info->reason;
  auto hb = lock_for(b).try_acquire();
  ASSERT_TRUE(hb);
  EXPECT_EQ(entries(), std::vector<std::string>{hb->token()});
  EXPECT_EQ(code_of([&] { ha.release(); }), errc::lock_lost);
  EXPECT_EQ(entries(), std::vector<std::string>{hb->token()}) << "the new owner keeps its lock";
}

TEST_F(RenameLockTest, NeverTakesOverALiveOwnerOnAnotherHostBeforeItsLeaseEnds) {
  auto a = process(100, other_host), b = process(200);
  world->processes.erase(100);  // on our host that pid is free: irrelevant for another host
  lock_handle ha = lock_for(a, options(2s)).acquire();
  const std::int64_t expiry = ha.expires().time_since_epoch() / 1us;
  EXPECT_FALSE(lock_for(b).try_acquire().has_value());
  b->calls.clear();
  lock_handle hb = lock_for(b, options(10s, 5s)).acquire();
  EXPECT_GT(world->wall_us, expiry + 100'000) << "taken over only after lease + skew";
  EXPECT_LT(world->wall_us, expiry + 100'000 + 62'500) << "and promptly after that";
  for (auto& c : b->calls) EXPECT_EQ(c.find("signal_probe"), std::string::npos) << c;
  auto info = lock_for(b).holder();
  ASSERT_TRUE(info);
  EXPECT_EQ(info->pid, 200);
}

TEST_F(RenameLockTest, TakesOverATokenWhoseOwnerDied) {
  auto a = process(100), b = process(200);
  lock_handle ha = lock_for(a, options(60s)).acquire();
  world->processes.erase(100);
  const auto t0 = world->wall_us;
  auto info = lock_for(b).holder();
  ASSERT_TRUE(info);
  EXPECT_EQ(info->owner, tokenlock::owner_liveness::dead);
  EXPECT_NE(info->reason.find("no longer exists"), std::string::npos) << info->reason;
  auto hb = lock_for(b).try_acquire();
  ASSERT_TRUE(hb) << "dead-owner detection, not lease expiry";
  EXPECT_EQ(world->wall_us, t0);
}

TEST_F(RenameLockTest, TakesOverATokenWhoseOwnerIsAZombie) {
  auto a = process(100), b = process(200);
  lock_handle ha = lock_for(a, options(60s)).acquire();
  world->processes[100].state = 'Z';
  EXPECT_TRUE(lock_for(b).try_acquire().has_value());
}

TEST_F(RenameLockTest, TakesOverATokenWhosePidWasReused) {
  auto a = process(100), b = process(200);
  lock_handle ha = lock_for(a, options(60s)).acquire();
  world->processes[100].start_time = 999999;  // another process now has pid 100
  auto info = lock_for(b).holder();
  ASSERT_TRUE(info);
  EXPECT_TRUE(info->stale);
  EXPECT_NE(info->reason.find("another process"), std::string::npos) << info->reason;
  EXPECT_TRUE(lock_for(b).try_acquire().has_value());
}

TEST_F(RenameLockTest, CountsEpermAndHiddenProcAsAlive) {
  auto b = process(200);
  plant(token_name(world->wall_us + 60'000'000, "testhost-0000abcd", 300, 777));
  world->processes[300] = {'S', 0, EPERM, ENOENT};  // another user's process under hidepid
  auto info = lock_for(b).holder();
  ASSERT_TRUE(info);
  EXPECT_EQ(info->owner, tokenlock::owner_liveness::alive);
  EXPECT_FALSE(info->stale);
  EXPECT_FALSE(lock_for(b).try_acquire().has_value());
}

TEST_F(RenameLockTest, JudgesByKillAloneWhenTheTokenHasNoStartTime) {
  auto b = process(200);
  plant(token_name(world->wall_us + 60'000'000, "testhost-0000abcd", 300, 0));
  world->processes[300] = {'S', 12345, 0, 0};
  EXPECT_FALSE(lock_for(b).try_acquire().has_value());
  world->processes.erase(300);
  EXPECT_TRUE(lock_for(b).try_acquire().has_value());
}

TEST_F(RenameLockTest, IgnoresDeadOwnersWhenDetectionIsOff) {
  auto a = process(100), b = process(200);
  lock_handle ha = lock_for(a, options(60s)).acquire();
  world->processes.erase(100);
  lock_options o = options();
  o.detect_dead_owner = false;
  EXPECT_FALSE(lock_for(b, o).try_acquire().has_value());
}

TEST_F(RenameLockTest, TreatsAnImplausiblyLongLeaseAsStale) {
  auto b = process(200);
  plant(token_name(world->wall_us + 30LL * 24 * 3600 * 1'000'000, other_host, 300, 1));
  auto info = lock_for(b).holder();
  ASSERT_TRUE(info);
  EXPECT_TRUE(info->stale);
  EXPECT_NE(info->reason.find("implausibly far in the future"), std::string::npos) << info->reason;
  EXPECT_TRUE(lock_for(b).try_acquire().has_value());
}

TEST_F(RenameLockTest, TwoTakersOfOneStaleTokenExactlyOneWins) {
  auto a = process(100), b = process(200), c = process(300);
  lock_handle ha = lock_for(a, options(60s)).acquire();
  const std::string stale = ha.token();
  ha.detach();
  world->processes.erase(100);
  std::optional<lock_handle> hb;
  // C has judged the token stale; just before its takeover rename, B takes
  // the same token over.
  c->when(op::rename, stale, [&] { hb = lock_for(b).try_acquire(); });
  auto hc = lock_for(c).try_acquire();
  ASSERT_TRUE(hb && hb->owns()) << "B took it over first";
  EXPECT_FALSE(hc.has_value()) << "C's rename of the observed name must fail";
  EXPECT_EQ(entries(), std::vector<std::string>{hb->token()});
}

TEST_F(RenameLockTest, AnOwnerThatRefreshesWhileATakerDecidesKeepsTheLock) {
  auto a = process(100, other_host), b = process(200);
  lock_handle ha = lock_for(a, options(1s)).acquire();
  world->advance(2'000'000);  // A's lease has ended: B judges it stale
  b->when(op::rename, ha.token(), [&] { ha.refresh(); });
  EXPECT_FALSE(lock_for(b).try_acquire().has_value());
  EXPECT_TRUE(ha.owns());
  EXPECT_EQ(entries(), std::vector<std::string>{ha.token()});
  ha.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
}

TEST_F(RenameLockTest, ReleaseAndRefreshAfterATakeoverReportLockLost) {
  auto a = process(100, other_host), b = process(200);
  lock_handle ha = lock_for(a, options(1s)).acquire();
  world->advance(2'000'000);
  auto hb = lock_for(b).try_acquire();
  ASSERT_TRUE(hb);
  std::error_code ec;
  ha.refresh(ec);
  EXPECT_EQ(ec, errc::lock_lost);
  EXPECT_NE(tokenlock::last_error_message().find("taken over"), std::string::npos);
  EXPECT_FALSE(ha.owns());
  EXPECT_EQ(entries(), std::vector<std::string>{hb->token()});

  hb->release();
  lock_handle ha2 = lock_for(a, options(1s)).acquire();
  world->advance(2'000'000);
  auto hb2 = lock_for(b).try_acquire();
  ASSERT_TRUE(hb2);
  EXPECT_EQ(code_of([&] { ha2.release(); }), errc::lock_lost);
  EXPECT_EQ(entries(), std::vector<std::string>{hb2->token()});
}

TEST_F(RenameLockTest, ATakeoverClearsWhatTheDeadOwnerLeftInItsWorkspace) {
  auto a = process(100), b = process(200);
  lock_handle ha = lock_for(a).acquire();
  fs::ofstream(ha.path() / ".data.tmp.1") << "half";
  fs::create_directories(ha.path() / "sub");
  fs::ofstream(ha.path() / "sub" / "f") << "x";
  ha.detach();
  world->processes.erase(100);
  auto hb = lock_for(b).try_acquire();
  ASSERT_TRUE(hb);
  EXPECT_TRUE(fs::is_empty(hb->path()));
}

TEST_F(RenameLockTest, ReportsTokenMissingAfterTwoListingsAndChangesNothing) {
  fs::create_directories(dir);
  fs::ofstream(dir / "README") << "someone removed the token";
  auto a = process(100);
  auto before = snapshot(tmp.path());
  std::error_code ec;
  lock_for(a).acquire(ec);
  EXPECT_EQ(ec, errc::token_missing);
  EXPECT_NE(tokenlock::last_error_message().find(dir.string()), std::string::npos);
  EXPECT_EQ(snapshot(tmp.path()), before);
  int listings = 0;
  for (auto& c : a->calls) listings += c.rfind("list_directory", 0) == 0;
  EXPECT_GE(listings, 2) << "never concluded from one listing";
}

TEST_F(RenameLockTest, ATransientlyMissingTokenIsNotConcludedFromOneListing) {
  auto a = process(100), b = process(200);
  lock_handle ha = lock_for(a).acquire();
  const std::string t = ha.token();
  // The token vanishes from the first listing only (a rename racing readdir).
  b->when(op::list_directory, dir.string(), [&] {
    fs::rename(dir / t, dir / "moving");
    b->when(op::list_directory, dir.string(), [&] { fs::rename(dir / "moving", dir / t); });
  });
  std::error_code ec;
  EXPECT_FALSE(lock_for(b).try_acquire(ec).has_value());
  EXPECT_FALSE(ec) << tokenlock::last_error_message();
  EXPECT_EQ(entries(), std::vector<std::string>{t});
}

TEST_F(RenameLockTest, ReportsTwoTokensAsCorruptAndChangesNothing) {
  // Two held tokens: the fast path fails and the listing shows both. (With a
  // free "lockfile" among them the fast path would simply take it: it never
  // lists, see docs/protocol.md.)
  plant(token_name(world->wall_us + 60'000'000, other_host, 300, 1, 1));
  plant(token_name(world->wall_us + 60'000'000, other_host, 301, 1, 2));
  auto a = process(100);
  auto before = snapshot(tmp.path());
  EXPECT_EQ(code_of([&] { lock_for(a).acquire(); }), errc::lock_corrupt);
  EXPECT_EQ(code_of([&] { lock_for(a).holder(); }), errc::lock_corrupt);
  std::string msg = message_of([&] { lock_for(a).acquire(); });
  EXPECT_NE(msg.find("holds 2 tokens"), std::string::npos) << msg;
  EXPECT_EQ(snapshot(tmp.path()), before);
}

TEST_F(RenameLockTest, ReportsAMalformedTokenAsCorrupt) {
  plant("lockfile.notanumber.x.y.z.w");
  auto a = process(100);
  auto before = snapshot(tmp.path());
  EXPECT_EQ(code_of([&] { lock_for(a).acquire(); }), errc::lock_corrupt);
  EXPECT_EQ(snapshot(tmp.path()), before);
}

TEST_F(RenameLockTest, TreatsAnNfsRetransmitOfASuccessfulRenameAsAcquired) {
  auto a = process(100);
  lock_for(a).acquire().release();
  // The server performed the rename, but the reply was lost and the
  // retransmission failed with ENOENT.
  a->before = [](op called, const std::string& from, const std::string& to) {
    if (called == op::rename) fs::rename(from, to);
  };
  a->fail(op::rename, "/lockfile", ENOENT);
  lock_handle h = lock_for(a).acquire();
  EXPECT_TRUE(h.owns());
  EXPECT_EQ(entries(), std::vector<std::string>{h.token()});
}

TEST_F(RenameLockTest, ALoserOfTheCreationRaceCleansUpAndSeesTheWinner) {
  auto a = process(100), b = process(200);
  std::optional<lock_handle> hb;
  a->when(op::rename, ".init.", [&] { hb = lock_for(b).try_acquire(); });
  EXPECT_FALSE(lock_for(a).try_acquire().has_value());
  ASSERT_TRUE(hb && hb->owns());
  EXPECT_EQ(entries(), std::vector<std::string>{hb->token()});
  EXPECT_TRUE(init_leftovers().empty());
}

TEST_F(RenameLockTest, ALoserOfTheCreationRaceOverSftpSeesTheWinnerDespiteEPERM) {
  // sshfs reports a directory renamed onto a non-empty one as EPERM.
  auto a = process(100), b = process(200);
  std::optional<lock_handle> hb;
  a->when(op::rename, ".init.", [&] { hb = lock_for(b).try_acquire(); });
  a->fail(op::rename, ".init.", EPERM);
  std::error_code ec;
  EXPECT_FALSE(lock_for(a).try_acquire(ec).has_value());
  EXPECT_FALSE(ec) << tokenlock::last_error_message();
  ASSERT_TRUE(hb && hb->owns());
  EXPECT_EQ(entries(), std::vector<std::string>{hb->token()});
  EXPECT_TRUE(init_leftovers().empty());
}

// ---- legacy tokens: "lockfile<seconds>" of the deployed rename lock -------------

class LegacyTokenTest : public RenameLockTest {
 protected:
  // What such a script leaves while it holds the lock: the directory layout
  // is tokenlock's, the token name its own.
  std::string plant_legacy(std::int64_t seconds) {
    fs::create_directories(dir);
    const std::string name = "lockfile" + std::to_string(seconds);
    fs::create_directories(dir / name);
    return name;
  }
  std::int64_t now_s() const { return world->wall_us / 1'000'000; }
};

TEST_F(LegacyTokenTest, IsWaitedForAndDescribedNotReportedAsAMissingToken) {
  auto a = process(100);
  const std::string legacy = plant_legacy(now_s());
  std::error_code ec;
  EXPECT_FALSE(lock_for(a).try_acquire(ec).has_value());
  EXPECT_FALSE(ec) << tokenlock::last_error_message();
  const auto timed_out = code_of([&] { lock_for(a, options(10s, 500ms)).acquire(); });
  EXPECT_EQ(timed_out, errc::timed_out);
  auto info = lock_for(a).holder();
  ASSERT_TRUE(info.has_value());
  EXPECT_TRUE(info->legacy);
  EXPECT_FALSE(info->stale);
  EXPECT_EQ(info->token, legacy);
  EXPECT_EQ(info->pid, 0);
  EXPECT_TRUE(info->host_tag.empty());
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::seconds>(info->expires.time_since_epoch()).count(),
            now_s() + 60);
  EXPECT_NE(info->reason.find("legacy rename lock"), std::string::npos) << info->reason;
  EXPECT_EQ(entries(), std::vector<std::string>{legacy});
  EXPECT_EQ(count_calls(*a, "signal_probe"), 0) << "it names no owner to ask about";
}

TEST_F(LegacyTokenTest, IsTakenOverAfterTheLegacyTimeoutAndSkewNotBefore) {
  auto a = process(100);
  world->wall_us = now_s() * 1'000'000;  // on a whole second, as the name is
  const std::string legacy = plant_legacy(now_s());
  lock_options o = options();
  o.legacy_timeout = 60s;  // skew_allowance is 100 ms
  world->advance(60'000'000 + 100'000);
  EXPECT_FALSE(lock_for(a, o).try_acquire().has_value()) << "at timeout + skew exactly";
  EXPECT_EQ(entries(), std::vector<std::string>{legacy});
  world->advance(1);
  auto h = lock_for(a, o).try_acquire();
  ASSERT_TRUE(h.has_value()) << tokenlock::last_error_message();
  EXPECT_EQ(entries(), std::vector<std::string>{h->token()});
  h->release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
}

TEST_F(LegacyTokenTest, ItsTimeoutIsAnOption) {
  auto a = process(100);
  plant_legacy(now_s() - 10);
  lock_options o = options();
  EXPECT_FALSE(lock_for(a, o).try_acquire().has_value()) << "10 s old: within 60 s";
  o.legacy_timeout = 5s;
  EXPECT_TRUE(lock_for(a, o).try_acquire().has_value()) << "10 s old: past 5 s";
}

TEST_F(LegacyTokenTest, OneDatedFarInTheFutureIsStale) {
  auto a = process(100);
  plant_legacy(now_s() + 3 * 24 * 3600);  // max_lease is a day
  auto info = lock_for(a).holder();
  ASSERT_TRUE(info.has_value());
  EXPECT_TRUE(info->stale);
  EXPECT_NE(info->reason.find("implausibly far in the future"), std::string::npos) << info->reason;
  EXPECT_TRUE(lock_for(a).try_acquire().has_value());
}

TEST_F(LegacyTokenTest, CanBeBrokenWhenStaleOrForcedButNeverAdopted) {
  auto a = process(100);
  const std::string legacy = plant_legacy(now_s());
  EXPECT_EQ(code_of([&] { lock_for(a).take_over(legacy, false); }), errc::busy);
  EXPECT_EQ(entries(), std::vector<std::string>{legacy});
  EXPECT_EQ(code_of([&] { lock_for(a).adopt(legacy); }), errc::bad_argument)
      << "not a token tokenlock handed out";
  lock_handle h = lock_for(a).take_over(legacy, true);
  EXPECT_EQ(entries(), std::vector<std::string>{h.token()});
  h.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
}

TEST_F(LegacyTokenTest, NamesThoseScriptsDoNotWriteAreNotJudged) {
  auto a = process(100);
  fs::create_directories(dir / "lockfile01795425884");
  EXPECT_EQ(code_of([&] { lock_for(a).acquire(); }), errc::token_missing);
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile01795425884"});
}

// ---- what a creator killed mid-way leaves --------------------------------------

// "data.lock.init.<expiry>.<owner>" beside the lock, with "lockfile" inside:
// what a creator killed between its mkdir and its rename leaves.
std::string plant_init(const fs::path& parent, const std::string& token) {
  const std::string name = "data.lock.init." + token.substr(std::string("lockfile.").size());
  fs::create_directories(parent / name / "lockfile");
  return (parent / name).string();
}

TEST_F(RenameLockTest, TheCreationDirectoryIsNamedForItsCreatorAndLease) {
  auto a = process(100);
  std::string made;
  std::function<void(op, const std::string&, const std::string&)> watch =
      [&](op called, const std::string& path, const std::string&) {
        if (called == op::make_directory && path.find(".init.") != std::string::npos)
          made = path;
        else
          a->before = watch;  // cleared before each run: re-armed until found
      };
  a->before = watch;
  lock_for(a).acquire().release();
  const std::string prefix = (tmp / "data.lock.init.").string();
  ASSERT_EQ(made.rfind(prefix, 0), 0u) << made;
  tokenlock::detail::held_token t;  // its host tag points into `as_token`
  const std::string as_token = "lockfile." + made.substr(prefix.size());
  ASSERT_EQ(tokenlock::detail::classify_name(as_token, &t),
            tokenlock::detail::name_kind::held)
      << made;
  EXPECT_EQ(t.pid, 100);
  EXPECT_EQ(t.start_time, 5100u);
  EXPECT_EQ(t.host_tag, "testhost-0000abcd");
  EXPECT_EQ(t.expiry_us, world->wall_us + 10'000'000);
  EXPECT_TRUE(init_leftovers().empty());
}

TEST_F(RenameLockTest, TheNextCreatorRemovesWhatADeadCreatorLeftAndNothingOfTheLiving) {
  auto live = process(200), c = process(300);
  const std::int64_t later = world->wall_us + 10'000'000;
  const std::string dead_here = plant_init(tmp.path(), token_name(later, "testhost-0000abcd", 100, 5100));
  const std::string live_here = plant_init(tmp.path(), token_name(later, "testhost-0000abcd", 200, 5200));
  const std::string elsewhere = plant_init(tmp.path(), token_name(later, other_host, 100, 5100));
  const std::string reused_pid =
      plant_init(tmp.path(), token_name(later, "testhost-0000abcd", 200, 4200));
  fs::create_directories(tmp / "other.lock.init.0000000000000001");
  lock_handle h = lock_for(c).acquire();
  EXPECT_EQ(entries(), std::vector<std::string>{h.token()});
  EXPECT_FALSE(fs::exists(dead_here)) << "its creator no longer exists";
  EXPECT_FALSE(fs::exists(reused_pid)) << "its pid belongs to a newer process";
  EXPECT_TRUE(fs::exists(live_here)) << "its creator is still at work";
  EXPECT_TRUE(fs::exists(elsewhere)) << "another host's creator, within its lease";
  EXPECT_TRUE(fs::exists(tmp / "other.lock.init.0000000000000001")) << "another lock's";
}

TEST_F(RenameLockTest, ATakeoverRemovesACreationLeftoverWhoseLeaseEnded) {
  auto a = process(100), b = process(200);
  lock_handle ha = lock_for(a, options(1s)).acquire();
  const std::string stalled =
      plant_init(tmp.path(), token_name(world->wall_us + 1'000'000, other_host, 7, 7));
  lock_for(a, options(1s)).try_acquire();  // a fast path sweeps nothing
  ASSERT_TRUE(fs::exists(stalled));
  world->advance(1'000'000 + 100'000 + 1);
  lock_handle hb = lock_for(b).acquire();  // takes the expired token over
  EXPECT_EQ(entries(), std::vector<std::string>{hb.token()});
  EXPECT_FALSE(fs::exists(stalled));
  EXPECT_TRUE(init_leftovers().empty());
}

TEST_F(RenameLockTest, ACreationLeftoverWithoutAnOwnerGoesOnlyWhenOlderThanAnyLease) {
  auto a = process(100), b = process(200);
  lock_options o = options(1s);
  o.max_lease = 60s;
  const fs::path old = tmp / "data.lock.init.0123456789abcdef";
  fs::create_directories(old / "lockfile");
  const std::time_t wall_s = static_cast<std::time_t>(world->wall_us / 1'000'000);
  fs::last_write_time(old, wall_s - 30);
  lock_handle ha = lock_for(a, o).acquire();  // creates the directory: sweeps
  EXPECT_TRUE(fs::exists(old)) << "younger than max_lease + skew";
  fs::last_write_time(old, wall_s - 61);
  world->advance(1'000'000 + 100'000 + 1);
  lock_handle hb = lock_for(b, o).acquire();  // a takeover: sweeps
  EXPECT_FALSE(fs::exists(old));
  EXPECT_EQ(entries(), std::vector<std::string>{hb.token()});
}

TEST_F(RenameLockTest, ACreatorWhoseDirectoryWasSweptMeanwhileStartsOver) {
  // Stalled past its lease, its directory was judged a leftover and
  // removed before its rename: the rename finds nothing, and it creates again.
  auto a = process(100);
  a->fail(op::rename, ".init.", ENOENT);
  std::error_code ec;
  auto h = lock_for(a).try_acquire(ec);
  EXPECT_FALSE(ec) << tokenlock::last_error_message();
  ASSERT_TRUE(h && h->owns());
  EXPECT_EQ(entries(), std::vector<std::string>{h->token()});
  EXPECT_TRUE(init_leftovers().empty());
}

// Even when a lookup still finds our name: on GlusterFS a second rename
// through a stale name would move the new owner's token.
TEST_F(RenameLockTest, AReleaseWhoseTokenIsGoneReportsLockLostWithoutRenamingAgain) {
  auto a = process(100), b = process(200);
  lock_handle h = lock_for(a, options(1s)).acquire();
  world->advance(1'000'000 + 100'000 + 1);
  lock_handle hb = lock_for(b).acquire();  // takes the expired token over
  a->calls.clear();
  std::error_code ec;
  h.release(ec);
  EXPECT_EQ(ec, errc::lock_lost);
  EXPECT_EQ(count_calls(*a, "rename"), 1);
  EXPECT_EQ(entries(), std::vector<std::string>{hb.token()});
}

TEST_F(RenameLockTest, AForkedChildNeverReleasesItsParentsToken) {
  auto a = process(100);
  auto h = std::make_unique<lock_handle>(lock_for(a).acquire());
  const std::string t = h->token();
  a->simulate_fork();
  EXPECT_FALSE(h->owns());
  EXPECT_EQ(code_of([&] { h->refresh(); }), errc::not_owner);
  EXPECT_EQ(code_of([&] { h->release(); }), errc::not_owner);
  h.reset();  // the destructor must not release either
  EXPECT_EQ(entries(), std::vector<std::string>{t});
}

TEST_F(RenameLockTest, HandlesReleaseOnDestructionAndOnMoveAssignment) {
  auto a = process(100);
  {
    lock_handle h = lock_for(a).acquire();
    lock_handle moved = std::move(h);
    EXPECT_FALSE(h.owns());
    EXPECT_TRUE(moved.owns());
  }
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  lock_handle h1 = lock_for(a).acquire();
  h1 = lock_handle();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  lock_handle empty;
  empty.release();  // no-op
  EXPECT_EQ(code_of([&] { empty.refresh(); }), errc::not_owner);
}

TEST_F(RenameLockTest, RejectsBadArgumentsWithoutTouchingTheDisk) {
  auto a = process(100);
  auto before = snapshot(tmp.path());
  std::error_code ec;
  tokenlock::detail::with_os::lock(fs::path(), options(), a).acquire(ec);
  EXPECT_EQ(ec, errc::bad_argument);
  tokenlock::detail::with_os::lock("/", options(), a).acquire(ec);
  EXPECT_EQ(ec, errc::bad_argument);
  EXPECT_EQ(code_of([&] { lock_for(a, options(0ms)).acquire(); }), errc::bad_argument);
  lock_options o = options();
  o.wait = -1ms;
  EXPECT_EQ(code_of([&] { lock_for(a, o).acquire(); }), errc::bad_argument);
  o = options(48h);
  EXPECT_EQ(code_of([&] { lock_for(a, o).acquire(); }), errc::bad_argument);
  o = options();
  o.dir_mode = 010000;
  EXPECT_EQ(code_of([&] { lock_for(a, o).acquire(); }), errc::bad_argument);
  o = options();
  o.backoff_min = 0us;
  EXPECT_EQ(code_of([&] { lock_for(a, o).acquire(); }), errc::bad_argument);
  o = options();
  o.backoff_min = 10ms;
  o.backoff_max = 5ms;
  EXPECT_EQ(code_of([&] { lock_for(a, o).acquire(); }), errc::bad_argument);
  lock_handle h = lock_for(a).acquire();
  EXPECT_EQ(code_of([&] { h.refresh(0ms); }), errc::bad_argument);
  h.release();
  EXPECT_FALSE(fs::exists(tmp / "x"));
  (void)before;
}

TEST_F(RenameLockTest, AcquiresOnBehalfOfAnotherProcess) {
  auto a = process(100), b = process(200);
  world->processes[4242] = {'S', 777, 0, 0};  // the shell that will own the lock
  lock_options o = options(60s);
  o.owner_pid = 4242;
  lock_handle h = lock_for(a, o).acquire();
  tokenlock::detail::held_token t;
  ASSERT_EQ(tokenlock::detail::classify_name(h.token(), &t), tokenlock::detail::name_kind::held);
  EXPECT_EQ(t.pid, 4242);
  EXPECT_EQ(t.start_time, 777u);
  const std::string token = h.detach();
  EXPECT_FALSE(h.owns());
  EXPECT_EQ(entries(), std::vector<std::string>{token}) << "detach leaves the token held";
  EXPECT_FALSE(lock_for(b).try_acquire().has_value()) << "held while the owner lives";
  world->processes.erase(4242);
  EXPECT_TRUE(lock_for(b).try_acquire().has_value()) << "abandoned once the owner is gone";
  o.owner_pid = 999;  // no such process
  EXPECT_EQ(code_of([&] { lock_for(a, o).acquire(); }), std::errc::no_such_file_or_directory);
}

TEST_F(RenameLockTest, AdoptsATokenToReleaseOrRefreshItElsewhere) {
  auto a = process(100), b = process(200);
  const std::string token = lock_for(a).acquire().detach();
  lock_handle h = lock_for(b).adopt(token);
  EXPECT_TRUE(h.owns());
  world->advance(1'000'000);
  h.refresh();
  EXPECT_NE(h.token(), token);
  EXPECT_EQ(tokenlock::detail::owner_part(h.token()), tokenlock::detail::owner_part(token))
      << "the owner stays the process that acquired it";
  const std::string refreshed = h.token();
  h.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_EQ(code_of([&] { lock_for(b).adopt(refreshed); }), errc::lock_lost);
  EXPECT_EQ(code_of([&] { lock_for(b).adopt("lockfile"); }), errc::bad_argument);
  EXPECT_EQ(code_of([&] { lock_for(b).adopt("../../etc/passwd"); }), errc::bad_argument);
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
}

TEST_F(RenameLockTest, TakesOverExactlyTheNamedStaleTokenAndNothingElse) {
  auto a = process(100), b = process(200);
  lock_handle ha = lock_for(a, options(60s)).acquire();
  const std::string live = ha.token();
  auto before = snapshot(tmp.path());
  std::string msg = message_of([&] { lock_for(b).take_over(live); });
  EXPECT_EQ(code_of([&] { lock_for(b).take_over(live); }), errc::busy);
  EXPECT_NE(msg.find("not stale"), std::string::npos) << msg;
  EXPECT_EQ(snapshot(tmp.path()), before);
  // A stale token that is no longer there: nothing else is touched.
  const std::string other = token_name(world->wall_us - 1, "testhost-0000abcd", 100, 5100);
  EXPECT_EQ(code_of([&] { lock_for(b).take_over(other); }), errc::lock_lost);
  EXPECT_EQ(snapshot(tmp.path()), before);
  // Forced, or once stale, it is taken over.
  lock_handle hb = lock_for(b).take_over(live, true);
  EXPECT_TRUE(hb.owns());
  EXPECT_EQ(entries(), std::vector<std::string>{hb.token()});
  EXPECT_EQ(code_of([&] { ha.release(); }), errc::lock_lost);
  hb.release();
  lock_handle hc = lock_for(a, options(60s)).acquire();
  world->processes.erase(100);
  lock_handle hd = lock_for(b).take_over(hc.token());
  EXPECT_TRUE(hd.owns());
}

// ---- errno paths: a clear message, and nothing changed ---------------------

struct errno_case {
  const char* name;
  op call;
  const char* substring;  // of the failing call's first path
  int err;
  const char* hint;       // expected in the message
  bool existing;          // lock directory exists (with a free token) beforehand
};

class ErrnoPathTest : public RenameLockTest, public ::testing::WithParamInterface<errno_case> {};

TEST_P(ErrnoPathTest, GivesAClearErrorAndChangesNothing) {
  const errno_case& c = GetParam();
  auto a = process(100);
  if (c.existing) lock_for(a).acquire().release();
  a->fail(c.call, c.substring, c.err, -1);
  auto before = snapshot(tmp.path());
  std::error_code ec;
  lock_handle h = lock_for(a).acquire(ec);
  EXPECT_EQ(ec, std::error_code(c.err, std::generic_category()));
  EXPECT_FALSE(h.owns());
  const std::string& msg = tokenlock::last_error_message();
  EXPECT_NE(msg.find(dir.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::error_code(c.err, std::generic_category()).message()), std::string::npos)
      << msg;
  EXPECT_NE(msg.find(c.hint), std::string::npos) << msg;
  EXPECT_EQ(snapshot(tmp.path()), before);
  EXPECT_TRUE(init_leftovers().empty());
}

INSTANTIATE_TEST_SUITE_P(
    Errno, ErrnoPathTest,
    ::testing::Values(
        errno_case{"EACCES", op::rename, "/lockfile", EACCES, "needs write and search permission", true},
        errno_case{"EROFS", op::rename, "/lockfile", EROFS, "read-only filesystem", true},
        errno_case{"ENAMETOOLONG", op::rename, "/lockfile", ENAMETOOLONG, "shorter lock directory path", true},
        errno_case{"EIO_opening", op::open_directory, "data.lock", EIO, "cannot open", false},
        errno_case{"ENOSPC_on_creation", op::make_directory, ".init.", ENOSPC, "free some space", false},
        errno_case{"ENOSPC_on_token", op::make_directory, "/lockfile", ENOSPC, "free some space", false},
        errno_case{"EACCES_on_creation", op::make_directory, ".init.", EACCES, "needs write and search permission", false},
        errno_case{"EIO_on_sync", op::sync_directory, ".init.", EIO, "cannot sync", false},
        errno_case{"EXDEV_on_placing", op::rename, ".init.", EXDEV, "cannot rename", false},
        // No lock directory appeared: a real permission problem, not a race.
        errno_case{"EPERM_on_placing", op::rename, ".init.", EPERM, "forbids this rename", false}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(RenameLockTest, NamesTheOwnerOfATokenInAStickyDirectory) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give the token to another user";
  auto a = process(100), b = process(200);
  lock_handle ha = lock_for(a).acquire();
  const std::string t = ha.token();
  ha.detach();
  world->processes.erase(100);  // dead: B will try to take the token over
  // Shared with a group on purpose (a sticky directory writable by every
  // user is refused before any rename: TrustTest).
  fs::permissions(dir, fs::perms(01775));
  ASSERT_EQ(::chown((dir / t).c_str(), 33, 33), 0);
  // The kernel lets root rename anything; for uid 1000 it would say EPERM.
  b->fail(op::rename, t, EPERM, -1);
  auto before = snapshot(tmp.path());
  lock_options shared;
  shared.dir_mode = 0775;
  std::string msg = message_of([&] { lock_for(b, shared).acquire(); });
  EXPECT_NE(msg.find("is sticky and the token belongs to uid 33"), std::string::npos) << msg;
  EXPECT_NE(msg.find("use a non-sticky directory shared by the users that lock"), std::string::npos);
  EXPECT_NE(msg.find("take over"), std::string::npos) << msg;
  EXPECT_EQ(snapshot(tmp.path()), before);
}

TEST_F(RenameLockTest, ReportsAPathThroughAFileAsNotADirectory) {
  fs::ofstream(tmp / "file") << "x";
  auto a = process(100);
  auto before = snapshot(tmp.path());
  std::error_code ec;
  tokenlock::detail::with_os::lock(tmp / "file" / "x.lock", options(), a).acquire(ec);
  EXPECT_EQ(ec, std::errc::not_a_directory);
  EXPECT_NE(tokenlock::last_error_message().find("is not a directory"), std::string::npos)
      << tokenlock::last_error_message();
  EXPECT_EQ(snapshot(tmp.path()), before);
}

TEST_F(RenameLockTest, ReportsAMissingParentDirectory) {
  auto a = process(100);
  std::error_code ec;
  tokenlock::detail::with_os::lock(tmp / "no" / "x.lock", options(), a).acquire(ec);
  EXPECT_EQ(ec, std::errc::no_such_file_or_directory);
  EXPECT_NE(tokenlock::last_error_message().find("parent directory"), std::string::npos);
  EXPECT_FALSE(fs::exists(tmp / "no"));
}

TEST_F(RenameLockTest, AReleaseThatFailsKeepsOwnership) {
  auto a = process(100);
  lock_handle h = lock_for(a).acquire();
  a->fail(op::rename, h.token(), EIO);
  std::error_code ec;
  h.release(ec);
  EXPECT_EQ(ec, std::errc::io_error);
  EXPECT_TRUE(h.owns()) << "still ours: the caller may retry";
  h.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
}

}  // namespace
