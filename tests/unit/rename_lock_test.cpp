// The protocol of docs/protocol.md over the OS seam: real renames in a
// temporary directory, with processes, hosts, clocks and faults played by
// fake_os. How a busy lock is waited for is tested in waiting_test.cpp.
#include <algorithm>
#include <functional>
#include <gtest/gtest.h>

#include <cerrno>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/filesystem.hpp>

#include "lockdir/lock_directory.hpp"
#include "lock_fixture.hpp"
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

using tokenlock::testing::code_of;
using tokenlock::testing::count_calls;
using tokenlock::testing::message_of;
using tokenlock::testing::other_host;
using tokenlock::testing::RenameLockTest;

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

// Once the lock exists no creator comes again to sweep; a waiter that
// finds a live holder has time to spare, and about one in
// leftover_sweep_every does it, taking only leftovers of creators that are
// gone.
TEST_F(RenameLockTest, AWaiterThatFindsTheLockHeldSweepsCreationLeftoversNowAndThen) {
  auto a = process(100), b = process(200);
  const std::int64_t later = world->wall_us + 10'000'000;
  lock_handle ha = lock_for(a).acquire();
  const std::string dead = plant_init(tmp.path(), token_name(later, "testhost-0000abcd", 300, 5300));
  const std::string live = plant_init(tmp.path(), token_name(later, "testhost-0000abcd", 100, 5100));
  std::uint64_t next = 1;  // never a multiple of leftover_sweep_every
  b->random = [&] { return next += tokenlock::detail::leftover_sweep_every; };
  EXPECT_FALSE(lock_for(b).try_acquire());
  EXPECT_TRUE(fs::exists(dead)) << "not this time";
  next = 0;  // always a multiple
  EXPECT_FALSE(lock_for(b).try_acquire());
  EXPECT_FALSE(fs::exists(dead)) << "its creator no longer exists";
  EXPECT_TRUE(fs::exists(live)) << "its creator is still at work";
  EXPECT_EQ(entries(), std::vector<std::string>{ha.token()}) << "the holder is untouched";
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