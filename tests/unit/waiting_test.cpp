// How a busy rename-token lock is waited for (waiting.hpp): first each
// part of the waiter on its own (backoff and budget, when to look at the
// holder, the directory watch, the place in the line of waiters), then the
// whole wait through a lock, over fake_os: played processes, clocks, watches
// and wait boards.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <cerrno>

#include <boost/filesystem.hpp>

#include "lock_fixture.hpp"
#include "lockdir/waiting.hpp"
#include "wait/wait_backoff.hpp"
#include "wait/wait_line.hpp"
#include "wait/wait_look.hpp"
#include "wait/wait_place.hpp"
#include "wait/wait_watch.hpp"

namespace fs = boost::filesystem;
using namespace std::chrono_literals;
using tokenlock::errc;
using tokenlock::lock_handle;
using tokenlock::lock_options;
using tokenlock::rename_lock;
using tokenlock::detail::backoff;
using tokenlock::detail::board_keeper;
using tokenlock::detail::fast_release_detector;
using tokenlock::detail::immediate_retries;
using tokenlock::detail::lock_paths;
using tokenlock::detail::look_policy;
using tokenlock::detail::place_in_line;
using tokenlock::detail::release_watch;
using tokenlock::detail::wait_budget;
using tokenlock::detail::wait_line;
using tokenlock::detail::watch_keeper;
using tokenlock::testing::fake_os;
using tokenlock::testing::fake_world;
using tokenlock::testing::op;

namespace {

using tokenlock::testing::code_of;
using tokenlock::testing::count_calls;
using tokenlock::testing::count_exact_calls;
using tokenlock::testing::message_of;
using tokenlock::testing::RenameLockTest;
using tokenlock::testing::sleeps_of;

// ---- Backoff and budget (wait_backoff.hpp) ----

lock_options backoff_options(std::chrono::microseconds min, std::chrono::microseconds max) {
  lock_options o;
  o.backoff_min = min;
  o.backoff_max = max;
  return o;
}

TEST(BackoffTest, StartsAtBackoffMinAndDoublesUpToBackoffMax) {
  backoff delay(lock_options{});  // 100 us doubling to 50 ms
  std::vector<long> pauses;
  for (int i = 0; i < 12; ++i) pauses.push_back(static_cast<long>(delay.next(0).count()));
  // With no jitter each pause is three quarters of its step.
  EXPECT_EQ(pauses, (std::vector<long>{75, 150, 300, 600, 1200, 2400, 4800, 9600, 19200, 37500,
                                       37500, 37500}));
}

TEST(BackoffTest, JitterSpansAQuarterOfTheStepEitherSide) {
  long lowest = std::numeric_limits<long>::max(), highest = 0;
  for (std::uint64_t r = 0; r < 200; ++r) {
    backoff delay(lock_options{});
    const long p = static_cast<long>(delay.next(r).count());
    lowest = std::min(lowest, p);
    highest = std::max(highest, p);
  }
  EXPECT_EQ(lowest, 75);
  EXPECT_EQ(highest, 125);
  backoff delay(lock_options{});
  EXPECT_EQ(delay.next(50).count(), 125) << "random modulo half the step, plus 1";
  EXPECT_EQ(delay.next(101).count(), 150) << "the second step is 200 us: 150 + 101 % 101";
  EXPECT_EQ(backoff(lock_options{}).next(std::numeric_limits<std::uint64_t>::max()).count(),
            75 + static_cast<long>(std::numeric_limits<std::uint64_t>::max() % 51));
}

TEST(BackoffTest, TheStepStopsAtBackoffMaxAndTheJitterAtAQuarterOfIt) {
  backoff delay(backoff_options(2ms, 8ms));
  std::vector<long> lowest, highest;
  for (int i = 0; i < 5; ++i) lowest.push_back(static_cast<long>(delay.next(0).count()));
  backoff widest(backoff_options(2ms, 8ms));
  // random = half the step is the largest jitter: 1000, 2000, then 4000.
  for (std::uint64_t r : {1000u, 2000u, 4000u, 4000u, 4000u})
    highest.push_back(static_cast<long>(widest.next(r).count()));
  EXPECT_EQ(lowest, (std::vector<long>{1500, 3000, 6000, 6000, 6000}));
  EXPECT_EQ(highest, (std::vector<long>{2500, 5000, 10000, 10000, 10000}));
}

TEST(BackoffTest, AMaxBelowTheMinIsRaisedToIt) {
  backoff delay(backoff_options(4ms, 1ms));
  EXPECT_EQ(delay.next(0).count(), 3000);
  EXPECT_EQ(delay.next(0).count(), 3000) << "no step beyond backoff_min";
}

TEST(WaitBudgetTest, EndsAtTheWaitOptionAndCutsTheLastPauseThere) {
  lock_options o;
  o.wait = 300ms;
  const wait_budget budget(1'000'000, o, true);
  EXPECT_TRUE(budget.waits());
  EXPECT_EQ(budget.deadline(), 1'300'000);
  EXPECT_FALSE(budget.spent(1'299'999));
  EXPECT_TRUE(budget.spent(1'300'000));
  EXPECT_EQ(budget.cap(50ms, 1'000'000).count(), 50'000) << "a pause well within the budget";
  EXPECT_EQ(budget.cap(50ms, 1'280'000).count(), 20'000) << "the last one ends at the deadline";
}

TEST(WaitBudgetTest, ASingleRoundOrAZeroWaitHasNoBudget) {
  lock_options o;
  o.wait = 300ms;
  const wait_budget single(1'000'000, o, false);
  EXPECT_FALSE(single.waits()) << "busy, not timed_out";
  EXPECT_TRUE(single.spent(1'000'000));
  o.wait = 0ms;
  const wait_budget none(1'000'000, o, true);
  EXPECT_FALSE(none.waits());
  EXPECT_TRUE(none.spent(1'000'000));
}

TEST(ImmediateRetriesTest, RoundsThatEndInAgainRetryAtOnceFifteenTimesInARow) {
  immediate_retries retries;
  for (int i = 1; i < immediate_retries::max_in_a_row; ++i)
    EXPECT_TRUE(retries.retry_at_once(true)) << i;
  EXPECT_FALSE(retries.retry_at_once(true)) << "the sixteenth waits like a busy round";
  EXPECT_TRUE(retries.retry_at_once(true)) << "and the count starts again";
}

TEST(ImmediateRetriesTest, ABusyRoundWaitsAndStartsTheCountAgain) {
  immediate_retries retries;
  for (int i = 1; i < immediate_retries::max_in_a_row - 1; ++i) retries.retry_at_once(true);
  EXPECT_FALSE(retries.retry_at_once(false));
  for (int i = 1; i < immediate_retries::max_in_a_row; ++i)
    EXPECT_TRUE(retries.retry_at_once(true)) << i;
}

// ---- When to look at the holder (wait_look.hpp) ----

TEST(LookPolicyTest, TheFirstRoundLooksThenAtMostOnceAnInterval) {
  look_policy looks(false);
  const std::int64_t deadline = 10'000'000;
  EXPECT_FALSE(looks.has_looked());
  EXPECT_TRUE(looks.due(1'000'000, deadline));
  EXPECT_TRUE(looks.has_looked());
  EXPECT_FALSE(looks.due(1'000'001, deadline));
  EXPECT_FALSE(looks.due(1'000'000 + look_policy::interval_us - 1, deadline));
  EXPECT_TRUE(looks.due(1'000'000 + look_policy::interval_us, deadline));
  EXPECT_FALSE(looks.due(1'000'000 + look_policy::interval_us + 1, deadline))
      << "the interval counts from the last look";
}

TEST(LookPolicyTest, AWaiterThatLinesUpLeavesItsFirstLookToTheHead) {
  look_policy looks(true);
  EXPECT_FALSE(looks.due(1'000'000, 10'000'000));
  EXPECT_FALSE(looks.has_looked());
  EXPECT_TRUE(looks.due(1'000'001, 10'000'000)) << "nobody looked yet: the next round does";
}

TEST(LookPolicyTest, TheLastRoundBeforeTheDeadlineAlwaysLooks) {
  look_policy looks(false);
  EXPECT_TRUE(looks.due(1'000'000, 1'000'001));
  EXPECT_TRUE(looks.due(1'000'001, 1'000'001)) << "a verdict is never stale";
  look_policy deferred(true);
  EXPECT_TRUE(deferred.due(1'000'000, 1'000'000)) << "not even a deferred first round";
}

TEST(LookPolicyTest, AHandedOnPlaceWaitsAnIntervalBeforeJudgingTheNewHolder) {
  look_policy looks(true);
  EXPECT_FALSE(looks.due(1'000'000, 10'000'000));
  looks.judged_by_head(1'005'000);
  EXPECT_TRUE(looks.has_looked());
  EXPECT_FALSE(looks.due(1'006'000, 10'000'000));
  EXPECT_TRUE(looks.due(1'005'000 + look_policy::interval_us, 10'000'000));
}

TEST(LookPolicyTest, ASleeperThatWokeOnItsOwnLooksOnItsNextRound) {
  look_policy looks(false);
  EXPECT_TRUE(looks.due(1'000'000, 10'000'000));
  looks.look_next_round();
  EXPECT_TRUE(looks.due(1'000'001, 10'000'000));
  look_policy never(true);
  never.due(1'000'000, 10'000'000);
  never.look_next_round();
  EXPECT_TRUE(never.due(1'000'001, 10'000'000));
}

// ---- The directory watch (wait_watch.hpp) ----

TEST(FastReleaseDetectorTest, ThreeQuickWakesAfterAFirstOneSwitchToPolling) {
  fast_release_detector releases;
  EXPECT_FALSE(releases.woke(1'000'000)) << "the first wake has nothing to follow";
  EXPECT_FALSE(releases.woke(1'000'100));
  EXPECT_FALSE(releases.woke(1'000'200));
  EXPECT_TRUE(releases.woke(1'000'300));
}

TEST(FastReleaseDetectorTest, ASlowReleaseStartsTheCountAgain) {
  fast_release_detector releases;
  releases.woke(1'000'000);
  releases.woke(1'000'100);
  releases.woke(1'000'200);
  EXPECT_FALSE(releases.woke(1'000'200 + fast_release_detector::fast_release_us))
      << "exactly the limit apart is not fast";
  EXPECT_FALSE(releases.woke(1'000'500));
  EXPECT_FALSE(releases.woke(1'000'600));
  EXPECT_TRUE(releases.woke(1'000'700));
}

class ReleaseWatchTest : public ::testing::Test {
 protected:
  std::shared_ptr<fake_world> world = std::make_shared<fake_world>();
  fake_os sys{world, 200, 5200};
  watch_keeper keeper;
  const std::string dir = "/played/data.lock";
};

TEST_F(ReleaseWatchTest, AWatchIsTakenOnceAWaitAndDisarmedWhenItEnds) {
  sys.release_interval_us = 5000;
  {
    release_watch watch(sys, keeper, dir, tokenlock::detail::free_token, true);
    EXPECT_FALSE(watch.attached()) << "nothing before the first pause";
    watch.attach();
    watch.attach();
    ASSERT_TRUE(watch.attached());
    EXPECT_EQ(count_calls(sys, "watch_directory"), 1);
    watch.pause(20ms);
    EXPECT_EQ(count_exact_calls(sys, "watch_wait 20000"), 1);
    EXPECT_EQ(count_calls(sys, "sleep_for"), 0);
  }
  EXPECT_EQ(count_calls(sys, "watch_disarm"), 1) << "an idle watch taxes the holder's renames";
  release_watch next(sys, keeper, dir, tokenlock::detail::free_token, true);
  next.attach();
  EXPECT_TRUE(next.attached());
  EXPECT_EQ(count_calls(sys, "watch_directory"), 1) << "the instance is kept between waits";
  EXPECT_EQ(count_calls(sys, "watch_arm"), 2);
}

TEST_F(ReleaseWatchTest, FastReleasesGiveTheWatchUpForPollingAndTheLockRemembersIt) {
  sys.release_interval_us = 50;
  release_watch watch(sys, keeper, dir, tokenlock::detail::free_token, true);
  watch.attach();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(watch.attached()) << i;
    watch.pause(1ms);
  }
  EXPECT_FALSE(watch.attached()) << "a first wake, then three quick ones";
  EXPECT_EQ(count_calls(sys, "watch_disarm"), 1);
  watch.attach();
  EXPECT_FALSE(watch.attached()) << "not taken again in this wait";
  watch.pause(1ms);
  EXPECT_EQ(count_exact_calls(sys, "sleep_for 1000"), 1) << "it polls";
  release_watch soon(sys, keeper, dir, tokenlock::detail::free_token, true);
  soon.attach();
  EXPECT_FALSE(soon.attached()) << "the next wait polls from its start";
  world->advance(watch_keeper::remember_fast_us);
  release_watch later(sys, keeper, dir, tokenlock::detail::free_token, true);
  later.attach();
  EXPECT_TRUE(later.attached()) << "and the verdict is forgotten after 100 ms";
}

TEST_F(ReleaseWatchTest, AWatchPutAwayWhileSleepingInTheLineIsTakenAgainAfterwards) {
  sys.release_interval_us = 5000;
  release_watch watch(sys, keeper, dir, tokenlock::detail::free_token, true);
  watch.attach();
  watch.put_away();
  EXPECT_FALSE(watch.attached());
  EXPECT_EQ(count_calls(sys, "watch_disarm"), 1);
  watch.attach();
  EXPECT_TRUE(watch.attached());
  EXPECT_EQ(count_calls(sys, "watch_directory"), 1) << "the same instance";
  EXPECT_EQ(count_calls(sys, "watch_arm"), 2);
}

TEST_F(ReleaseWatchTest, WithoutWakeOnReleaseOrAWatchAPauseIsASleep) {
  sys.release_interval_us = 5000;
  release_watch unwanted(sys, keeper, dir, tokenlock::detail::free_token, false);
  unwanted.attach();
  EXPECT_FALSE(unwanted.attached());
  EXPECT_EQ(count_calls(sys, "watch_"), 0);
  unwanted.pause(3ms);
  sys.release_interval_us = -1;  // none available: NFS, or no inotify
  release_watch none(sys, keeper, dir, tokenlock::detail::free_token, true);
  none.attach();
  EXPECT_FALSE(none.attached());
  none.pause(2ms);
  EXPECT_EQ(sleeps_of(sys), (std::vector<long>{3000, 2000}));
}

TEST_F(ReleaseWatchTest, AKeptWatchIsNotReusedAfterFork) {
  sys.release_interval_us = 5000;
  keeper.give_back(sys, keeper.take(sys, dir));
  sys.simulate_fork();
  EXPECT_TRUE(keeper.take(sys, dir) != nullptr);
  EXPECT_EQ(count_calls(sys, "watch_directory"), 2) << "parent and child would share one queue";
}

// ---- The place in the line of waiters (wait_place.hpp) ----

TEST(StaleHeadTest, TheBoundsFollowBackoffMaxAsDocumented) {
  lock_options o;
  EXPECT_EQ(tokenlock::detail::stale_head_after(o), 110ms);
  EXPECT_EQ(tokenlock::detail::sleeper_look_interval(o), 440ms);
  for (auto max : {1ms, 8ms, 50ms, 1000ms}) {
    o.backoff_max = max;
    EXPECT_EQ(tokenlock::detail::sleeper_look_interval(o), 8 * max + 40ms) << max.count();
  }
}

class PlaceInLineTest : public RenameLockTest {
 protected:
  PlaceInLineTest() { tokenlock::detail::make_lock_paths(dir, paths); }
  lock_paths paths;
  tokenlock::detail::lock_board_site site{paths};
  lock_options o = options(10s, 1s);
  board_keeper boards_a, boards_b;
  std::uint32_t* board() { return world->boards[paths.board_path].data(); }
  std::uint32_t now_ms() const { return static_cast<std::uint32_t>(world->steady_us / 1000); }
};

TEST_F(PlaceInLineTest, ANewcomerMakesNoBoardUntilItHasSeenAHolder) {
  auto b = process(200);
  place_in_line place(*b, o, boards_b, site);
  EXPECT_FALSE(place.join(false)) << "no board yet: it looks before it waits";
  EXPECT_FALSE(place.usable());
  EXPECT_EQ(world->boards.count(paths.board_path), 0u);
  EXPECT_TRUE(place.join(true));
  EXPECT_TRUE(place.usable());
  EXPECT_EQ(board()[wait_line::magic_word], wait_line::board_magic);
  EXPECT_EQ(count_calls(*b, "open_wait_board"), 1);
  EXPECT_EQ(count_calls(*b, "create_wait_board"), 1);
  EXPECT_TRUE(place.join(true));
  EXPECT_EQ(count_calls(*b, "create_wait_board"), 1) << "joined once";
}

TEST_F(PlaceInLineTest, WithoutQueueWaitersOrABoardThereIsNoLineToUse) {
  auto b = process(200);
  o.queue_waiters = false;
  place_in_line off(*b, o, boards_b, site);
  EXPECT_TRUE(off.join(true));
  EXPECT_FALSE(off.usable());
  EXPECT_EQ(count_calls(*b, "open_wait_board") + count_calls(*b, "create_wait_board"), 0);
  o.queue_waiters = true;
  b->fail(op::create_wait_board, "", ENOTSUP);  // a network or FUSE filesystem
  place_in_line refused(*b, o, boards_b, site);
  EXPECT_TRUE(refused.join(true)) << "settled: it polls on its own";
  EXPECT_FALSE(refused.usable());
  place_in_line again(*b, o, boards_b, site);
  EXPECT_TRUE(again.join(true));
  EXPECT_EQ(count_calls(*b, "create_wait_board"), 1) << "the lock object keeps the verdict";
}

TEST_F(PlaceInLineTest, ALoneWaiterHeadsTheLineAndASecondSleepsUntilTheFirstHandsItOn) {
  auto a = process(100), b = process(200);
  std::uint32_t turn = 0;
  {
    std::optional<place_in_line> first(std::in_place, *a, o, boards_a, site);
    ASSERT_TRUE(first->join(true));
    ASSERT_TRUE(first->claim_head(turn));
    EXPECT_EQ(board()[wait_line::beat_word], now_ms()) << "the head beats as it claims";
    place_in_line second(*b, o, boards_b, site);
    ASSERT_TRUE(second.join(false)) << "the board exists now";
    EXPECT_FALSE(second.claim_head(turn)) << "a live head keeps its place";
    EXPECT_EQ(turn, 0u);
    // The head leaves (it took the lock) while the second sleeps.
    b->when(op::board_wait, paths.board_path, [&] { first.reset(); });
    const auto start = world->steady_us;
    EXPECT_EQ(second.sleep(turn, start + 1'000'000), wait_line::place::handed_on);
    EXPECT_EQ(world->steady_us, start) << "woken at once by the hand-off";
    EXPECT_EQ(count_calls(*a, "board_wake"), 1);
    EXPECT_TRUE(second.claim_head(turn)) << "the sleeper heads the line now";
  }
  EXPECT_EQ(board()[wait_line::head_word], 0u) << "and left it in turn";
  EXPECT_EQ(board()[wait_line::turn_word], 2u);
}

TEST_F(PlaceInLineTest, ASleeperTakesThePlaceOfAHeadThatStoppedBeating) {
  auto a = process(100), b = process(200);
  place_in_line head(*a, o, boards_a, site), sleeper(*b, o, boards_b, site);
  std::uint32_t turn = 0;
  ASSERT_TRUE(head.join(true));
  ASSERT_TRUE(head.claim_head(turn));
  ASSERT_TRUE(sleeper.join(false));
  ASSERT_FALSE(sleeper.claim_head(turn));
  const auto start = world->steady_us;
  // The head neither beats nor hands on (stopped): stale after 110 ms.
  EXPECT_EQ(sleeper.sleep(turn, start + 1'000'000), wait_line::place::taken);
  EXPECT_EQ(world->steady_us - start, 111'000) << "one nap, until the beat is stale and 1 ms";
  EXPECT_EQ(count_exact_calls(*b, "board_wait " + paths.board_path + " 0 111000"), 1);
  EXPECT_FALSE(head.claim_head(turn)) << "the stopped head lost its place";
}

TEST_F(PlaceInLineTest, ASleeperWakesAtItsDeadlineOrItsOwnLookWhateverTheBoardHolds) {
  auto b = process(200);
  place_in_line sleeper(*b, o, boards_b, site);
  ASSERT_TRUE(sleeper.join(true));
  // Something keeps writing a fresh head and bumping the turn every 10 ms.
  std::function<void()> scribble = [&] {
    world->advance(10'000);
    board()[wait_line::head_word] = 4242;
    board()[wait_line::beat_word] = now_ms();
    ++board()[wait_line::turn_word];
    b->when(op::board_wait, paths.board_path, scribble);
  };
  board()[wait_line::head_word] = 4242;
  board()[wait_line::beat_word] = now_ms();
  std::uint32_t turn = 0;
  ASSERT_FALSE(sleeper.claim_head(turn));
  b->when(op::board_wait, paths.board_path, scribble);
  auto start = world->steady_us;
  EXPECT_EQ(sleeper.sleep(turn, start + 10'000'000), wait_line::place::none);
  EXPECT_GE(world->steady_us - start, 440'000) << "sleeper_look_interval";
  EXPECT_LE(world->steady_us - start, 450'000);
  ASSERT_FALSE(sleeper.claim_head(turn));
  start = world->steady_us;
  EXPECT_EQ(sleeper.sleep(turn, start + 25'000), wait_line::place::none);
  EXPECT_GE(world->steady_us - start, 25'000) << "or the deadline, if that comes first";
  EXPECT_LE(world->steady_us - start, 30'000);
  // The scribbler re-arms itself after each wait: its last arming is meant
  // to stay unused.
  b->disarm();
}

TEST_F(PlaceInLineTest, ANewHeadBacksOffFromBackoffMinAndMarksTheLineHungryAfterItsPatience) {
  auto a = process(100);
  std::uint32_t turn = 0;
  {
    place_in_line head(*a, o, boards_a, site);
    ASSERT_TRUE(head.join(true));
    ASSERT_TRUE(head.claim_head(turn));
    const auto first = head.head_pause(world->steady_us).count();
    EXPECT_GE(first, 75);
    EXPECT_LE(first, 125);
    EXPECT_EQ(head.poll_pause(50ms, false), 50ms) << "not hungry: its own backoff";
    world->advance(place_in_line::head_patience_us - 1);
    head.head_pause(world->steady_us);
    EXPECT_EQ(board()[wait_line::hungry_word], 0u);
    world->advance(1);
    head.head_pause(world->steady_us);
    EXPECT_EQ(board()[wait_line::hungry_word], 1u) << "1 ms at the head";
    EXPECT_EQ(head.poll_pause(50ms, false), o.backoff_min) << "a hungry head that polls";
    EXPECT_EQ(head.poll_pause(50ms, true), 50ms) << "a watching one is woken anyway";
  }
  EXPECT_EQ(board()[wait_line::hungry_word], 0u) << "cleared when it left";
  EXPECT_EQ(board()[wait_line::head_word], 0u);
}

TEST_F(PlaceInLineTest, OnlyAProcessThatMappedTheBoardSeesAHungryLineAhead) {
  auto a = process(100), b = process(200);
  place_in_line head(*a, o, boards_a, site);
  std::uint32_t turn = 0;
  ASSERT_TRUE(head.join(true));
  ASSERT_TRUE(head.claim_head(turn));
  head.head_pause(world->steady_us);
  world->advance(place_in_line::head_patience_us);
  head.head_pause(world->steady_us);
  ASSERT_EQ(board()[wait_line::hungry_word], 1u);
  place_in_line newcomer(*b, o, boards_b, site);
  EXPECT_FALSE(newcomer.hungry_line_ahead(world->steady_us)) << "never waited: the fast path";
  EXPECT_EQ(count_calls(*b, "open_wait_board"), 0) << "and no system call for it";
  ASSERT_TRUE(newcomer.join(false));
  place_in_line returning(*b, o, boards_b, site);
  EXPECT_TRUE(returning.hungry_line_ahead(world->steady_us));
  world->advance(111'000);
  EXPECT_FALSE(returning.hungry_line_ahead(world->steady_us)) << "a head that stopped beating";
}

// ---- The whole wait, through a lock ----

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

// A waiter leaves its first look to a later round (a head may look for
// it), so a budget spent during that first round, on a loaded machine,
// must not end the wait with a verdict on a lock nobody looked at: a lock
// directory that does not exist yet was reported busy (counter.cgi's 503
// for a new id with TOKENLOCK_COUNTER_WAIT_MS=5, seen under load).
TEST_F(RenameLockTest, ABudgetSpentBeforeAnyLookStillLooksOnceAndCreatesAMissingLock) {
  auto a = process(100);
  a->when(op::open_directory, "data.lock", [&] { world->advance(10'000); });
  lock_handle h = lock_for(a, options(60s, 5ms)).acquire();
  EXPECT_TRUE(h.owns());
  EXPECT_EQ(entries().size(), 1u);
  h.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
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

}  // namespace
