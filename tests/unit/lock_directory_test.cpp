// The slow path of the lock on its own (lock_directory.hpp): what a look at
// the lock directory concludes, how a held token is judged, how a missing
// directory is created, and how creation leftovers are swept. Over fake_os:
// real directories in a temporary directory, with processes, hosts and
// clocks played.
#include <chrono>
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <cerrno>

#include <boost/filesystem.hpp>

#include "lockdir/lock_directory.hpp"
#include "lock_fixture.hpp"
#include "lockdir/token_name.hpp"

namespace fs = boost::filesystem;
using namespace std::chrono_literals;
using tokenlock::errc;
using tokenlock::lock_options;
using tokenlock::detail::judgement;
using tokenlock::detail::lock_paths;
using tokenlock::detail::observation;
using tokenlock::detail::open_dir;
using tokenlock::owner_liveness;
using tokenlock::testing::fake_os;
using tokenlock::testing::op;
using tokenlock::testing::snapshot;

namespace {

using tokenlock::testing::count_calls;
using tokenlock::testing::other_host;
using tokenlock::testing::RenameLockTest;
using tokenlock::testing::sleeps_of;

constexpr const char* this_host = "testhost-0000abcd";

class LockDirectoryTest : public RenameLockTest {
 protected:
  LockDirectoryTest() { tokenlock::detail::make_lock_paths(dir, paths); }
  lock_paths paths;

  // The lock directory as the lock opens it (null: missing).
  std::shared_ptr<const open_dir> opened(const std::shared_ptr<fake_os>& p) {
    std::shared_ptr<const open_dir> d;
    EXPECT_FALSE(tokenlock::detail::lock_directory_fd(p, paths, paths.share, "acquire", d));
    return d;
  }
  // observe() on the directory as it is now; its failure, if any.
  tokenlock::detail::failure look(const std::shared_ptr<fake_os>& p, observation& out) {
    const std::shared_ptr<const open_dir> d = opened(p);
    return tokenlock::detail::observe(*p, paths, d.get(), "acquire", out);
  }
  judgement judged(fake_os& p, const std::string& name, const lock_options& o = options()) {
    tokenlock::detail::held_token t;
    const auto kind = tokenlock::detail::classify_name(name, &t);
    return tokenlock::detail::judge(p, o, tokenlock::detail::observed(name, t, kind));
  }
  std::int64_t later() const { return world->wall_us + 10'000'000; }
  // A creation directory as a creator of `token`'s owner would leave it.
  std::string plant_init(const std::string& token) {
    const std::string name = paths.init_prefix + token.substr(std::string("lockfile.").size());
    fs::create_directories(tmp / name / "lockfile");
    return (tmp / name).string();
  }
};

// ---- observe ----

TEST_F(LockDirectoryTest, AMissingDirectoryIsObservedAsMissing) {
  auto a = process(100);
  observation obs;
  obs.kind = observation::held;
  EXPECT_FALSE(look(a, obs));
  EXPECT_EQ(obs.kind, observation::missing);
  EXPECT_EQ(count_calls(*a, "list_directory"), 0) << "nothing to list";
}

TEST_F(LockDirectoryTest, AFreeTokenIsObservedFromOneListing) {
  plant("lockfile");
  auto a = process(100);
  observation obs;
  EXPECT_FALSE(look(a, obs));
  EXPECT_EQ(obs.kind, observation::free);
  EXPECT_EQ(count_calls(*a, "list_directory"), 1);
  EXPECT_TRUE(sleeps_of(*a).empty());
}

TEST_F(LockDirectoryTest, AHeldTokenIsObservedWithItsOwnerAndLease) {
  const std::string token = token_name(later(), other_host, 4242, 77);
  plant(token);
  auto a = process(100);
  observation obs;
  EXPECT_FALSE(look(a, obs));
  ASSERT_EQ(obs.kind, observation::held);
  EXPECT_EQ(obs.token.name, token);
  EXPECT_EQ(obs.token.expiry_us, later());
  EXPECT_EQ(obs.token.host_tag, other_host);
  EXPECT_EQ(obs.token.pid, 4242);
  EXPECT_EQ(obs.token.start_time, 77u);
  EXPECT_FALSE(obs.token.legacy);
  EXPECT_EQ(count_calls(*a, "list_directory"), 1);
}

TEST_F(LockDirectoryTest, AnEmptyDirectoryIsObservedAsEmptyAtOnce) {
  fs::create_directories(dir);
  auto a = process(100);
  observation obs;
  EXPECT_FALSE(look(a, obs));
  EXPECT_EQ(obs.kind, observation::empty);
  EXPECT_EQ(count_calls(*a, "list_directory"), 1) << "nothing to confirm: creation fills it";
}

TEST_F(LockDirectoryTest, ADirectoryRemovedUnderItsDescriptorIsObservedAsMissing) {
  plant("lockfile");
  auto a = process(100);
  a->fail(op::list_directory, dir.string(), ENOENT);
  observation obs;
  EXPECT_FALSE(look(a, obs));
  EXPECT_EQ(obs.kind, observation::missing);
}

TEST_F(LockDirectoryTest, TwoTokensAreCorruptOnlyWhenASecondListingAgrees) {
  const std::string token = token_name(later(), this_host, 100, 5100);
  plant("lockfile");
  plant(token);
  auto a = process(100);
  const auto before = snapshot(tmp.path());
  observation obs;
  tokenlock::detail::failure f = look(a, obs);
  ASSERT_TRUE(f);
  EXPECT_EQ(f.code, errc::lock_corrupt);
  EXPECT_NE(f.message.find("holds 2 tokens"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find(dir.string()), std::string::npos) << f.message;
  EXPECT_EQ(count_calls(*a, "list_directory"), 2);
  EXPECT_EQ(sleeps_of(*a), std::vector<long>{2000}) << "a moment between the listings";
  EXPECT_EQ(snapshot(tmp.path()), before) << "tokenlock never repairs a lock by itself";
}

TEST_F(LockDirectoryTest, TwoTokensInOneListingAreAReaddirArtefactWhenTheNextShowsOne) {
  const std::string token = token_name(later(), this_host, 100, 5100);
  plant("lockfile");
  plant(token);
  auto a = process(100);
  // The second listing sees the rename that was under way in the first.
  a->when(op::list_directory, dir.string(), [&] {
    a->when(op::list_directory, dir.string(), [&] { fs::remove(dir / "lockfile"); });
  });
  observation obs;
  EXPECT_FALSE(look(a, obs));
  ASSERT_EQ(obs.kind, observation::held);
  EXPECT_EQ(obs.token.name, token);
  EXPECT_EQ(count_calls(*a, "list_directory"), 2);
}

TEST_F(LockDirectoryTest, NoTokenIsReportedMissingAfterTwoListingsAndChangesNothing) {
  plant("notes");
  auto a = process(100);
  const auto before = snapshot(tmp.path());
  observation obs;
  tokenlock::detail::failure f = look(a, obs);
  ASSERT_TRUE(f);
  EXPECT_EQ(f.code, errc::token_missing);
  EXPECT_NE(f.message.find("notes"), std::string::npos) << f.message;
  EXPECT_EQ(count_calls(*a, "list_directory"), 2);
  EXPECT_EQ(snapshot(tmp.path()), before);
}

TEST_F(LockDirectoryTest, AMalformedTokenNameIsCorruptAndNamed) {
  plant("lockfile");
  plant("lockfile.garbage");
  auto a = process(100);
  const auto before = snapshot(tmp.path());
  observation obs;
  tokenlock::detail::failure f = look(a, obs);
  ASSERT_TRUE(f);
  EXPECT_EQ(f.code, errc::lock_corrupt);
  EXPECT_NE(f.message.find("not a valid token: lockfile.garbage"), std::string::npos)
      << f.message;
  EXPECT_EQ(snapshot(tmp.path()), before);
}

TEST_F(LockDirectoryTest, AListingThatFailsReportsItsErrno) {
  plant("lockfile");
  auto a = process(100);
  a->fail(op::list_directory, dir.string(), EACCES);
  observation obs;
  tokenlock::detail::failure f = look(a, obs);
  ASSERT_TRUE(f);
  EXPECT_EQ(f.code, std::errc::permission_denied);
  EXPECT_NE(f.message.find("cannot list the lock directory"), std::string::npos) << f.message;
}

// ---- judge ----

TEST_F(LockDirectoryTest, ALeaseIsStaleOnlyOnceItEndedByMoreThanTheSkew) {
  auto a = process(100);
  const std::int64_t skew = 100'000;
  const judgement within = judged(*a, token_name(world->wall_us - skew, other_host, 7, 7));
  EXPECT_FALSE(within.stale) << within.reason;
  const judgement ended = judged(*a, token_name(world->wall_us - skew - 1, other_host, 7, 7));
  EXPECT_TRUE(ended.stale);
  EXPECT_NE(ended.reason.find("ended 0.1 s ago"), std::string::npos) << ended.reason;
  EXPECT_FALSE(ended.same_host);
}

TEST_F(LockDirectoryTest, ALeaseBeyondTheProtocolsMaximumIsImplausibleAndStale) {
  auto a = process(100);
  const std::int64_t max_us = std::chrono::microseconds(tokenlock::protocol_max_lease).count();
  const std::int64_t skew = 100'000;
  EXPECT_FALSE(judged(*a, token_name(world->wall_us + max_us + skew, other_host, 7, 7)).stale);
  const judgement j = judged(*a, token_name(world->wall_us + max_us + skew + 1, other_host, 7, 7));
  EXPECT_TRUE(j.stale);
  EXPECT_NE(j.reason.find("implausibly far in the future"), std::string::npos) << j.reason;
  EXPECT_NE(j.reason.find("more than the maximum lease of 86400 s from now"), std::string::npos)
      << j.reason;
}

TEST_F(LockDirectoryTest, AnOwnerOnAnotherHostIsJudgedByItsLeaseAlone) {
  auto a = process(100);
  const judgement j = judged(*a, token_name(later(), other_host, 100, 5100));
  EXPECT_FALSE(j.stale);
  EXPECT_FALSE(j.same_host);
  EXPECT_EQ(j.owner, owner_liveness::unknown);
  EXPECT_NE(j.reason.find("on host " + std::string(other_host)), std::string::npos) << j.reason;
  EXPECT_EQ(count_calls(*a, "signal_probe") + count_calls(*a, "read_process_status"), 0)
      << "its pids are not ours to probe";
}

TEST_F(LockDirectoryTest, ALiveOwnerOnThisHostKeepsItsToken) {
  auto a = process(100), owner = process(300);
  const judgement j = judged(*a, token_name(later(), this_host, 300, 5300));
  EXPECT_FALSE(j.stale);
  EXPECT_TRUE(j.same_host);
  EXPECT_EQ(j.owner, owner_liveness::alive);
  EXPECT_NE(j.reason.find("held by pid 300 on this host"), std::string::npos) << j.reason;
}

TEST_F(LockDirectoryTest, ADeadOwnerOnThisHostIsStaleBeforeItsLeaseEnds) {
  auto a = process(100);
  const judgement j = judged(*a, token_name(later(), this_host, 300, 5300));
  EXPECT_TRUE(j.stale);
  EXPECT_EQ(j.owner, owner_liveness::dead);
  EXPECT_NE(j.reason.find("no longer exists"), std::string::npos) << j.reason;
  EXPECT_EQ(count_calls(*a, "read_process_status"), 0) << "kill(2) said enough";
}

TEST_F(LockDirectoryTest, AZombieOwnerIsStale) {
  auto a = process(100), owner = process(300);
  world->processes[300].state = 'Z';
  const judgement j = judged(*a, token_name(later(), this_host, 300, 5300));
  EXPECT_TRUE(j.stale);
  EXPECT_EQ(j.owner, owner_liveness::dead);
  EXPECT_NE(j.reason.find("zombie"), std::string::npos) << j.reason;
}

TEST_F(LockDirectoryTest, AReusedPidIsStaleUnlessTheTokenHasNoStartTime) {
  auto a = process(100), newer = process(300);  // start time 5300
  const judgement j = judged(*a, token_name(later(), this_host, 300, 4300));
  EXPECT_TRUE(j.stale);
  EXPECT_EQ(j.owner, owner_liveness::dead);
  EXPECT_NE(j.reason.find("start time 5300, token says 4300"), std::string::npos) << j.reason;
  EXPECT_FALSE(judged(*a, token_name(later(), this_host, 300, 0)).stale)
      << "without a start time, kill(2) alone decides";
}

TEST_F(LockDirectoryTest, AnOwnerWeCannotProbeOrReadCountsAsAlive) {
  auto a = process(100), owner = process(300);
  world->processes[300].probe_error = EPERM;  // another user's
  world->processes[300].proc_error = ENOENT;  // hidepid
  const judgement j = judged(*a, token_name(later(), this_host, 300, 4300));
  EXPECT_FALSE(j.stale);
  EXPECT_EQ(j.owner, owner_liveness::alive);
}

TEST_F(LockDirectoryTest, WithoutDeadOwnerDetectionOnlyTheLeaseCounts) {
  auto a = process(100);
  lock_options o = options();
  o.detect_dead_owner = false;
  const judgement j = judged(*a, token_name(later(), this_host, 300, 5300), o);
  EXPECT_FALSE(j.stale);
  EXPECT_EQ(j.owner, owner_liveness::unknown);
  EXPECT_EQ(count_calls(*a, "signal_probe"), 0);
}

// ---- create_lock_directory ----

TEST_F(LockDirectoryTest, CreatesTheDirectoryWithItsFreeTokenAndLeavesNothingBeside) {
  auto a = process(100);
  EXPECT_FALSE(tokenlock::detail::create_lock_directory(*a, paths, options()));
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(init_leftovers().empty());
  EXPECT_EQ(count_calls(*a, "sync_directory"), 2) << "the filled directory, then its parent";
}

TEST_F(LockDirectoryTest, ALostCreationRaceIsSuccessAndLeavesTheWinnerAlone) {
  auto a = process(100);
  const std::string winner = token_name(later(), other_host, 7, 7);
  a->when(op::rename, ".init.", [&] { plant(winner); });
  EXPECT_FALSE(tokenlock::detail::create_lock_directory(*a, paths, options()));
  EXPECT_EQ(entries(), std::vector<std::string>{winner});
  EXPECT_TRUE(init_leftovers().empty()) << "the loser removed its own directory";
}

TEST_F(LockDirectoryTest, ACreatorWhoseDirectoryWasSweptStartsOverWithoutAFailure) {
  auto a = process(100);
  a->fail(op::rename, ".init.", ENOENT);
  EXPECT_FALSE(tokenlock::detail::create_lock_directory(*a, paths, options()));
  EXPECT_FALSE(fs::exists(dir)) << "the caller looks again, and creates again";
  EXPECT_TRUE(init_leftovers().empty());
}

TEST_F(LockDirectoryTest, ACreationThatFailsReportsItAndLeavesNothingBehind) {
  auto a = process(100);
  a->fail(op::rename, ".init.", EACCES);
  tokenlock::detail::failure f = tokenlock::detail::create_lock_directory(*a, paths, options());
  ASSERT_TRUE(f);
  EXPECT_EQ(f.code, std::errc::permission_denied);
  EXPECT_NE(f.message.find("to the lock directory"), std::string::npos) << f.message;
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_TRUE(init_leftovers().empty());
}

TEST_F(LockDirectoryTest, AMissingParentIsReportedWithTheFix) {
  auto a = process(100);
  lock_paths deeper;
  ASSERT_FALSE(tokenlock::detail::make_lock_paths(tmp / "no" / "x.lock", deeper));
  tokenlock::detail::failure f = tokenlock::detail::create_lock_directory(*a, deeper, options());
  ASSERT_TRUE(f);
  EXPECT_EQ(f.code, std::errc::no_such_file_or_directory);
  EXPECT_NE(f.message.find("parent directory of the lock directory must exist"),
            std::string::npos)
      << f.message;
  EXPECT_FALSE(fs::exists(tmp / "no"));
}

// ---- sweep_creation_leftovers ----

TEST_F(LockDirectoryTest, TheSweepRemovesLeftoversOfDeadOrStalledCreatorsOnly) {
  auto a = process(100), live = process(300);
  const std::string dead = plant_init(token_name(later(), this_host, 200, 5200));
  const std::string working = plant_init(token_name(later(), this_host, 300, 5300));
  const std::string stalled = plant_init(token_name(world->wall_us - 1'000'000, other_host, 7, 7));
  const std::string remote = plant_init(token_name(later(), other_host, 7, 7));
  fs::create_directories(tmp / "other.lock.init.0000000000000001");
  EXPECT_EQ(tokenlock::detail::sweep_creation_leftovers(*a, paths, options()), 2u);
  EXPECT_FALSE(fs::exists(dead)) << "its creator no longer exists";
  EXPECT_FALSE(fs::exists(stalled)) << "its lease ended";
  EXPECT_TRUE(fs::exists(working)) << "its creator is still at work";
  EXPECT_TRUE(fs::exists(remote)) << "another host's creator, within its lease";
  EXPECT_TRUE(fs::exists(tmp / "other.lock.init.0000000000000001")) << "another lock's";
}

TEST_F(LockDirectoryTest, TheSweepRemovesANonceOnlyLeftoverWhenOlderThanAnyLease) {
  auto a = process(100);
  lock_options o = options(1s);
  o.max_lease = 60s;
  const fs::path old = tmp / (paths.init_prefix + "0123456789abcdef");
  fs::create_directories(old / "lockfile");
  const std::time_t wall_s = static_cast<std::time_t>(world->wall_us / 1'000'000);
  fs::last_write_time(old, wall_s - 60);
  EXPECT_EQ(tokenlock::detail::sweep_creation_leftovers(*a, paths, o), 0u);
  EXPECT_TRUE(fs::exists(old)) << "younger than max_lease + skew";
  fs::last_write_time(old, wall_s - 61);
  EXPECT_EQ(tokenlock::detail::sweep_creation_leftovers(*a, paths, o), 1u);
  EXPECT_FALSE(fs::exists(old));
}

TEST_F(LockDirectoryTest, TheSweepLeavesWhatIsNoCreationDirectory) {
  auto a = process(100);
  const fs::path odd = tmp / (paths.init_prefix + "not-a-nonce");
  const fs::path file = tmp / (paths.init_prefix + "0123456789abcdef");
  fs::create_directories(odd);
  fs::ofstream(file) << "x";
  const std::time_t wall_s = static_cast<std::time_t>(world->wall_us / 1'000'000);
  fs::last_write_time(odd, wall_s - 100'000);
  fs::last_write_time(file, wall_s - 100'000);
  const auto before = snapshot(tmp.path());
  EXPECT_EQ(tokenlock::detail::sweep_creation_leftovers(*a, paths, options()), 0u);
  EXPECT_EQ(snapshot(tmp.path()), before);
}

TEST_F(LockDirectoryTest, TheSweepOfAParentItCannotListRemovesNothing) {
  auto a = process(100);
  const std::string dead = plant_init(token_name(later(), this_host, 200, 5200));
  a->fail(op::list_directory, tmp.path().string(), EACCES);
  EXPECT_EQ(tokenlock::detail::sweep_creation_leftovers(*a, paths, options()), 0u);
  EXPECT_TRUE(fs::exists(dead));
}

}  // namespace
