// The contract of tokenlock::lock and tokenlock::handle (tokenlock/lock.hpp),
// written once and run on every backend through tokenlock::open_lock: a
// lock directory always, Redis and etcd against real servers the tests
// start (skipped, with the reason, where they cannot run). Where the
// backends differ by design (a lock directory has no fences and names its
// grants by token, an etcd lease keeps the TTL it was granted), a case
// checks each one's side of it through the interface instead of skipping.
// Each case also checks, through the backend's store, that nothing is left
// behind (records(), written()).
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>

#include <unistd.h>

#include <boost/filesystem.hpp>
#include <gtest/gtest.h>

#include "child.hpp"
#include "contract_fixture.hpp"
#include "tokenlock/etcd_lock.hpp"
#include "tokenlock/keep_alive.hpp"
#include "tokenlock/open_lock.hpp"
#include "tokenlock/redis_lock.hpp"
#include "tokenlock/rename_lock.hpp"

namespace {

using namespace std::chrono_literals;
using namespace tokenlock::contract;
using tokenlock::errc;
using tokenlock::handle;
using tokenlock::lock_backend;

// The concrete calls keep their own handle types; the interface's give
// tokenlock::handle.
static_assert(std::is_same_v<decltype(std::declval<tokenlock::rename_lock&>().acquire()),
                             tokenlock::lock_handle>);
static_assert(std::is_same_v<decltype(std::declval<tokenlock::redis_lock&>().acquire()),
                             tokenlock::redis_handle>);
static_assert(std::is_same_v<decltype(std::declval<tokenlock::lock&>().acquire()), handle>);
static_assert(!std::is_copy_constructible_v<handle> && std::is_nothrow_move_constructible_v<handle>);

TYPED_TEST_SUITE(LockContract, backends, backend_names);

TYPED_TEST(LockContract, AcquireHoldsUntilRelease) {
  auto lock = this->open();
  EXPECT_EQ(lock->backend(), TypeParam::kind);
  EXPECT_FALSE(lock->holder().has_value());
  handle h = lock->acquire();
  ASSERT_TRUE(h.owns());
  EXPECT_FALSE(h.id().empty());
  EXPECT_EQ(h.lease(), 10s);
  const auto now = std::chrono::system_clock::now();
  EXPECT_GT(h.expires(), now + 5s);
  EXPECT_LT(h.expires(), now + 15s);
  EXPECT_FALSE(this->free_now());
  EXPECT_EQ(this->records(), 1);
  h.release();
  EXPECT_FALSE(h.owns());
  EXPECT_EQ(this->records(), 0) << "the release left its grant behind";
  EXPECT_TRUE(this->free_now());
  EXPECT_FALSE(lock->holder().has_value());
}

TYPED_TEST(LockContract, AnotherNameIsAnotherLock) {
  handle h = this->open()->acquire();
  handle other = this->open(0ms, "-elsewhere")->acquire();
  EXPECT_TRUE(h.owns());
  EXPECT_TRUE(other.owns());
  EXPECT_NE(h.id(), other.id());
}

TYPED_TEST(LockContract, TryAcquireOnAHeldLockIsNulloptAndAcquireIsBusyNamingTheHolder) {
  handle held = this->open()->acquire();
  std::error_code ec;
  std::optional<handle> none = this->open()->try_acquire(ec);
  EXPECT_FALSE(ec) << tokenlock::last_error_message();
  EXPECT_FALSE(none.has_value());
  EXPECT_FALSE(this->open()->try_acquire().has_value());

  const auto busy = error_of([&](std::error_code& e) { this->open(0ms)->acquire(e); });
  EXPECT_EQ(busy.first, errc::busy);
  // The holder named: by its pid, or by its owner id, which holds the pid (etcd).
  const std::string named = TypeParam::kind == lock_backend::etcd
                                ? "held by " + held.id()
                                : "held by pid " + std::to_string(::getpid());
  EXPECT_NE(busy.second.find(named), std::string::npos) << busy.second;
  EXPECT_EQ(this->records(), 1) << "the refused attempts left something behind";
  ASSERT_TRUE(held.owns());
  held.refresh();  // still ours, untouched by the attempts
  const std::optional<std::uint64_t> fence = held.fence();
  held.release();
  std::optional<handle> got = this->open()->try_acquire();
  ASSERT_TRUE(got.has_value());
  if (this->has_fences()) {
    EXPECT_GT(got->fence().value(), fence.value());
  }
}

// A waiter gives up at its budget, neither before nor long after, says
// how long it waited, and leaves nothing behind.
TYPED_TEST(LockContract, AWaitNeverOutlastsItsBudget) {
  handle held = this->open()->acquire();
  auto waiter = this->open(300ms);
  const auto start = std::chrono::steady_clock::now();
  const auto e = error_of([&](std::error_code& ec) { waiter->acquire(ec); });
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(e.first, errc::timed_out) << e.second;
  // "waited 300 ms" (servers), "timed out after 300 ms" (a lock directory).
  EXPECT_NE(e.second.find(this->on_a_server() ? "waited 300 ms" : "after 300 ms"), std::string::npos)
      << e.second;
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 2s);
  EXPECT_THROW(this->open(300ms)->acquire(), tokenlock::lock_error);
  EXPECT_EQ(this->records(), 1);
  held.refresh();
}

// What wakes a waiter is the release, not its budget.
TYPED_TEST(LockContract, AWaiterIsWokenByTheReleaseNotByItsBudget) {
  handle h = this->open()->acquire();
  auto waiter = this->open(8s);
  std::thread releaser([&] {
    // Released once the waiter is in line: what wakes it must be the release.
    EXPECT_TRUE(this->waiter_in_line()) << "the waiter never lined up";
    h.release();
  });
  const auto start = std::chrono::steady_clock::now();
  handle g = waiter->acquire();
  const auto took = std::chrono::steady_clock::now() - start;
  releaser.join();
  EXPECT_TRUE(g.owns());
  EXPECT_LT(took, 6s) << "the wake-up was missed: the waiter ran into its budget";
  g.release();
  EXPECT_EQ(this->records(), 0);
}

// A holder that never releases (killed, or detached here) keeps the lock
// until its lease ends, and no longer.
TYPED_TEST(LockContract, ACrashedHoldersLockFreesWhenItsLeaseEnds) {
  const auto lease = TypeParam::short_lease;
  handle crashed = this->open_leased(lease)->acquire();
  crashed.detach();  // never released, as after kill -9
  const auto start = std::chrono::steady_clock::now();
  handle g = this->open_leased(30s, 10s)->acquire();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(g.owns());
  EXPECT_GE(took, lease / 2) << "taken before the lease ended";
  EXPECT_LT(took, lease + 2700ms) << "waited well past the lease";
  EXPECT_EQ(this->records(), 1);
}

// After its lease, a grant nobody refreshed no longer holds the lock: the
// servers drop it, a lock directory reports it stale (taken over by the
// next acquire).
TYPED_TEST(LockContract, HolderAfterTheLeaseEndedIsNoneOrStale) {
  const auto lease = TypeParam::short_lease;
  handle h = this->open_leased(lease)->acquire();
  const std::string id = h.detach();
  auto lock = this->open();
  ASSERT_TRUE(eventually(
      [&] {
        const std::optional<tokenlock::lock_holder> who = lock->holder();
        return !who || who->stale;
      },
      lease + 5s))
      << "the grant outlived its lease";
  const std::optional<tokenlock::lock_holder> who = lock->holder();
  if (TypeParam::kind == lock_backend::directory) {
    ASSERT_TRUE(who.has_value());  // the token stays until someone takes it over
    EXPECT_EQ(who->id, id);
    EXPECT_TRUE(who->stale);
    EXPECT_LT(who->expires, std::chrono::system_clock::now());
    EXPECT_NE(who->reason.find("lease"), std::string::npos) << who->reason;
  } else {
    EXPECT_FALSE(who.has_value()) << who->id;
  }
  EXPECT_TRUE(this->free_now());
}

TYPED_TEST(LockContract, RefreshRenewsTheLease) {
  handle h = this->open()->acquire();
  const auto before = h.expires();
  h.refresh();
  EXPECT_GE(h.expires(), before);
  h.refresh(h.lease());
  EXPECT_TRUE(h.owns());
  EXPECT_EQ(this->open()->holder()->id, h.id());  // a directory's token name moves with it
  h.release();
  EXPECT_TRUE(this->free_now());
}

TYPED_TEST(LockContract, BreakOwnerLosesTheLockForItsHolder) {
  handle h = this->open()->acquire();
  auto other = this->open();
  other->break_owner(h.id());
  EXPECT_FALSE(other->holder().has_value());
  EXPECT_EQ(this->records(), 0);
  std::error_code ec;
  h.refresh(ec);
  EXPECT_EQ(ec, errc::lock_lost) << tokenlock::last_error_message();
  EXPECT_FALSE(h.owns());
  EXPECT_TRUE(this->free_now());
}

// Breaking the holder's grant hands the lock to the waiter in line; the
// broken holder learns at release that it lost the lock, and its release
// does not touch the new grant.
TYPED_TEST(LockContract, BreakingTheHoldersGrantWakesAWaiterAndTheHolderLearnsItLost) {
  handle h = this->open()->acquire();
  auto waiting = this->open(60s);
  std::error_code waiter_ec;
  handle got;
  std::thread waiter([&] { got = waiting->acquire(waiter_ec); });
  EXPECT_TRUE(this->waiter_in_line()) << "the waiter never lined up";
  this->open()->break_owner(h.id());
  waiter.join();
  ASSERT_FALSE(waiter_ec) << tokenlock::last_error_message();
  EXPECT_TRUE(got.owns());
  if (this->has_fences()) {
    EXPECT_GT(got.fence().value(), h.fence().value());
  }
  std::error_code ec;
  h.release(ec);
  EXPECT_EQ(ec, errc::lock_lost);
  EXPECT_FALSE(h.owns());
  got.refresh();  // the old holder's release did not touch the new grant
  EXPECT_EQ(this->records(), 1);
  got.release();
  EXPECT_EQ(this->records(), 0);
}

TYPED_TEST(LockContract, BreakOwnerOfAnEarlierGrantChangesNothing) {
  handle first = this->open()->acquire();
  const std::string old_id = first.id();
  first.release();
  handle now = this->open()->acquire();
  std::error_code ec;
  this->open()->break_owner(old_id, ec);
  EXPECT_EQ(ec, errc::lock_lost) << tokenlock::last_error_message();
  EXPECT_THROW(this->open()->break_owner(old_id), tokenlock::lock_error);
  ASSERT_TRUE(now.owns());
  now.refresh();  // still ours
  EXPECT_EQ(this->open()->holder()->id, now.id());
  EXPECT_EQ(this->records(), 1);
}

// A free lock has no grant to break: lock_lost, naming the id, nothing made.
TYPED_TEST(LockContract, BreakOwnerOfAFreeLockChangesNothing) {
  handle first = this->open()->acquire();
  const std::string old_id = first.id();
  first.release();
  const auto e = error_of([&](std::error_code& ec) { this->open()->break_owner(old_id, ec); });
  EXPECT_EQ(e.first, errc::lock_lost) << e.second;
  EXPECT_NE(e.second.find(old_id), std::string::npos) << e.second;
  if (this->on_a_server()) {
    EXPECT_NE(e.second.find("(it is free)"), std::string::npos) << e.second;
  }
  if (TypeParam::kind == lock_backend::etcd) {
    EXPECT_NE(e.second.find("nothing was deleted"), std::string::npos) << e.second;
  }
  EXPECT_FALSE(this->open()->holder().has_value());
  EXPECT_EQ(this->records(), 0);
  EXPECT_TRUE(this->free_now());
}

// The id of a grant that is not the holder's (an earlier grant's id, one
// character longer): adopt and break_owner are lock_lost and touch
// nothing; the holder's own id works.
TYPED_TEST(LockContract, AdoptAndBreakActOnlyOnTheNamedOwner) {
  handle h = this->open()->acquire();
  const std::string owner = h.detach();
  auto other = this->open();
  for (const std::string& wrong : {owner + "x", owner.substr(0, owner.size() - 1)}) {
    const auto adopted = error_of([&](std::error_code& ec) { other->adopt(wrong, ec); });
    const auto broken = error_of([&](std::error_code& ec) { other->break_owner(wrong, ec); });
    if (TypeParam::kind == lock_backend::directory) {
      // Not the name of a token this lock holds (rename_lock.hpp).
      EXPECT_TRUE(adopted.first == errc::lock_lost || adopted.first == errc::bad_argument)
          << adopted.second;
      EXPECT_TRUE(broken.first == errc::lock_lost || broken.first == errc::bad_argument)
          << broken.second;
    } else {
      EXPECT_EQ(adopted.first, errc::lock_lost) << adopted.second;
      EXPECT_EQ(broken.first, errc::lock_lost) << broken.second;
    }
    EXPECT_NE(broken.second.find(wrong), std::string::npos) << broken.second;
    if (this->on_a_server()) {  // and who holds it
      EXPECT_NE(broken.second.find(owner + " does"), std::string::npos) << broken.second;
    }
    if (TypeParam::kind == lock_backend::etcd) {
      EXPECT_NE(broken.second.find("nothing was deleted"), std::string::npos) << broken.second;
    }
    EXPECT_EQ(this->records(), 1);
    ASSERT_TRUE(other->holder().has_value());
    EXPECT_EQ(other->holder()->id, owner) << "the holder's grant was touched";
  }
  handle adopted = other->adopt(owner);
  adopted.refresh();
  other->break_owner(adopted.detach());  // a directory's token name moved with the refresh
  EXPECT_FALSE(other->holder().has_value());
  EXPECT_EQ(this->records(), 0);
}

// An id that cannot be one is a bad argument of adopt and break_owner,
// nothing is touched, and the holder keeps the lock.
TYPED_TEST(LockContract, AnEmptyIdIsABadArgumentAndTouchesNothing) {
  handle h = this->open()->acquire();
  auto lock = this->open();
  const std::string says = TypeParam::kind == lock_backend::directory
                               ? "\"\" is not a held token (lockfile.<expiry>."
                               : "the owner id is empty";
  const auto adopted = error_of([&](std::error_code& ec) { lock->adopt("", ec); });
  EXPECT_EQ(adopted.first, errc::bad_argument) << adopted.second;
  EXPECT_NE(adopted.second.find(says), std::string::npos) << adopted.second;
  const auto broken = error_of([&](std::error_code& ec) { lock->break_owner("", ec); });
  EXPECT_EQ(broken.first, errc::bad_argument) << broken.second;
  EXPECT_NE(broken.second.find(says), std::string::npos) << broken.second;
  EXPECT_THROW(lock->adopt(""), tokenlock::lock_error);
  EXPECT_EQ(lock->holder()->id, h.id());
  EXPECT_EQ(this->records(), 1);
  h.release();
}

TYPED_TEST(LockContract, AdoptTakesOverADetachedGrantById) {
  handle h = this->open()->acquire();
  const std::string id = h.detach();
  EXPECT_FALSE(h.owns());
  EXPECT_FALSE(this->free_now()) << "detach gives nothing back";
  handle adopted = this->open()->adopt(id);
  ASSERT_TRUE(adopted.owns());
  EXPECT_EQ(adopted.id(), id);
  adopted.release();
  EXPECT_TRUE(this->free_now());

  std::error_code ec;
  handle gone = this->open()->adopt(id, ec);
  EXPECT_EQ(ec, errc::lock_lost) << tokenlock::last_error_message();
  EXPECT_FALSE(gone.owns());
  EXPECT_TRUE(this->free_now());
}

// A grant adopted by another lock object is the same grant (fence, lease,
// expiry); once the adopter releases it, the original learns it lost it.
TYPED_TEST(LockContract, AnAdoptedGrantIsReleasedByAnotherLockObject) {
  handle h = this->open()->acquire();
  handle adopted = this->open()->adopt(h.id());
  EXPECT_EQ(adopted.fence(), h.fence());
  EXPECT_EQ(adopted.lease(), h.lease());
  EXPECT_GT(adopted.expires(), std::chrono::system_clock::now());
  adopted.refresh();
  adopted.release();
  EXPECT_EQ(this->records(), 0);
  const auto e = error_of([&](std::error_code& ec) { h.release(ec); });
  EXPECT_EQ(e.first, errc::lock_lost) << e.second;
  EXPECT_NE(e.second.find("lease ended"), std::string::npos) << e.second;
  EXPECT_FALSE(h.owns());
  EXPECT_TRUE(this->free_now());
}

// A grant's id crosses processes: a child adopts it, refreshes and
// releases it; the parent's handle then finds it gone.
TYPED_TEST(LockContract, AGrantsIdIsAdoptedInAnotherProcess) {
  handle h = this->open()->acquire();
  const std::string id = h.id();
  int status = -1;
  const std::string said = tokenlock::testing::run_in_child(
      [&] {
        handle theirs = this->open()->adopt(id);
        theirs.refresh();
        theirs.release();
        return std::string(theirs.owns() ? "still owned" : "released");
      },
      status);
  EXPECT_EQ(status, 0) << said;
  EXPECT_EQ(said, "released");
  EXPECT_TRUE(this->free_now());
  std::error_code ec;
  h.refresh(ec);
  EXPECT_EQ(ec, errc::lock_lost) << tokenlock::last_error_message();
}

// A handle inherited by fork(2) owns nothing in the child: it can neither
// refresh nor release, and its destruction there gives nothing back.
TYPED_TEST(LockContract, AForkedChildOwnsNothing) {
  handle h = this->open()->acquire();
  int status = -1;
  const std::string said = tokenlock::testing::run_in_child(
      [&] {
        std::string out = h.owns() ? "owns " : "- ";
        std::error_code ec;
        h.refresh(ec);
        out += ec == errc::not_owner ? "refresh:not_owner " : "refresh:" + ec.message() + " ";
        h.release(ec);
        out += ec == errc::not_owner ? "release:not_owner" : "release:" + ec.message();
        { handle gone = std::move(h); }
        return out;
      },
      status);
  EXPECT_EQ(status, 0) << said;
  EXPECT_EQ(said, "- refresh:not_owner release:not_owner");
  ASSERT_TRUE(h.owns());
  h.refresh();  // the child gave nothing back
  EXPECT_EQ(this->open()->holder()->id, h.id());
  h.release();
  EXPECT_TRUE(this->free_now());
}

// Released once, the handle owns nothing: a second release does nothing,
// a refresh is not_owner.
TYPED_TEST(LockContract, ReleaseTwiceIsHarmlessAndRefreshAfterReleaseIsNotOwner) {
  handle h = this->open()->acquire();
  h.release();
  handle next = this->open()->acquire();
  std::error_code ec;
  h.release(ec);
  EXPECT_FALSE(ec) << tokenlock::last_error_message();
  h.refresh(ec);
  EXPECT_EQ(ec, errc::not_owner) << tokenlock::last_error_message();
  EXPECT_TRUE(next.owns());
  next.refresh();  // untouched by the released handle
  EXPECT_EQ(this->records(), 1);
}

TYPED_TEST(LockContract, HolderNamesTheGrant) {
  auto lock = this->open();
  handle h = lock->acquire();
  std::optional<tokenlock::lock_holder> who = this->open()->holder();
  ASSERT_TRUE(who.has_value());
  EXPECT_EQ(who->id, h.id());
  EXPECT_EQ(who->owner, tokenlock::owner_liveness::alive);  // this very process
  EXPECT_FALSE(who->stale) << who->reason;
  EXPECT_FALSE(who->reason.empty());
  EXPECT_EQ(who->fence, h.fence());
  const auto now = std::chrono::system_clock::now();
  EXPECT_GT(who->expires, now + 5s);
  EXPECT_LT(who->expires, now + 15s);
}

// Fences strictly increase from grant to grant (lock.hpp, Fences); a lock
// directory has none, and says so with std::nullopt.
TYPED_TEST(LockContract, FenceIncreasesWhereTheBackendHasOne) {
  auto lock = this->open();
  std::uint64_t last = 0;
  for (int i = 0; i < 3; ++i) {
    handle h = lock->acquire();
    ASSERT_TRUE(h.owns());
    EXPECT_EQ(this->records(), 1);
    const std::optional<tokenlock::lock_holder> who = lock->holder();
    ASSERT_TRUE(who.has_value());
    EXPECT_EQ(who->id, h.id());
    EXPECT_EQ(who->fence, h.fence());
    EXPECT_GT(who->expires, std::chrono::system_clock::now());
    if (!this->has_fences()) {
      EXPECT_FALSE(h.fence().has_value());
    } else {
      ASSERT_TRUE(h.fence().has_value());
      EXPECT_GT(*h.fence(), last);
      last = *h.fence();
    }
    h.release();
    EXPECT_FALSE(h.owns());
    EXPECT_EQ(this->records(), 0);
  }
  EXPECT_FALSE(lock->holder().has_value());
}

// A refresh keeps the grant: its fence, its id on a server, the holder.
TYPED_TEST(LockContract, RefreshKeepsTheFence) {
  handle h = this->open()->acquire();
  const std::optional<std::uint64_t> fence = h.fence();
  const std::string id = h.id();
  h.refresh();
  EXPECT_EQ(h.fence(), fence);
  if (this->has_fences()) {
    EXPECT_EQ(h.id(), id);  // a lock directory's token name moves with a refresh
  }
  EXPECT_EQ(this->open()->holder()->fence, fence);
  EXPECT_EQ(this->records(), 1);
}

// A handle moved (try_acquire's optional, a container, a return) is the
// same grant: its release and refresh act on the lock, and the one moved
// from owns nothing.
TYPED_TEST(LockContract, AMovedHandleReleasesAndRefreshesTheSameGrant) {
  std::optional<handle> h = this->open()->try_acquire();
  ASSERT_TRUE(h.has_value());
  handle moved = std::move(*h);
  EXPECT_FALSE(h->owns());  // NOLINT(bugprone-use-after-move): the moved-from state is the contract
  ASSERT_TRUE(moved.owns());
  moved.refresh();
  handle assigned;
  assigned = std::move(moved);
  EXPECT_FALSE(moved.owns());  // NOLINT(bugprone-use-after-move)
  assigned.release();
  EXPECT_FALSE(this->open()->holder().has_value()) << "the moved handle's release left the lock held";
  EXPECT_TRUE(this->free_now());
}

TYPED_TEST(LockContract, MovesKeepOneOwnerAndTheDestructorReleases) {
  auto lock = this->open();
  {
    handle h = lock->acquire();
    handle moved = std::move(h);
    EXPECT_FALSE(h.owns());  // NOLINT(bugprone-use-after-move): the moved-from state is the contract
    EXPECT_TRUE(h.id().empty());
    EXPECT_TRUE(moved.owns());
    EXPECT_FALSE(this->free_now());
  }
  EXPECT_TRUE(this->free_now());

  // Assigning over a held handle gives its grant back first.
  handle a = lock->acquire();
  auto second = this->open(0ms, "-second");
  handle b = second->acquire();
  a = std::move(b);
  EXPECT_TRUE(this->free_now());
  EXPECT_FALSE(second->try_acquire().has_value());
}

TYPED_TEST(LockContract, AnEmptyHandleOwnsNothing) {
  handle h;
  EXPECT_FALSE(h.owns());
  EXPECT_FALSE(h.fence().has_value());
  EXPECT_TRUE(h.id().empty());
  EXPECT_EQ(h.as<typename TypeParam::native>(), nullptr);
  std::error_code ec;
  h.release(ec);
  EXPECT_FALSE(ec);
  h.refresh(ec);
  EXPECT_EQ(ec, errc::not_owner);
  EXPECT_NE(tokenlock::last_error_message().find("does not hold"), std::string::npos);
}

TYPED_TEST(LockContract, AsReachesTheBackendsOwnHandle) {
  handle h = this->open()->acquire();
  auto* native = h.as<typename TypeParam::native>();
  ASSERT_NE(native, nullptr);
  EXPECT_TRUE(native->owns());
  EXPECT_EQ(h.as<tokenlock::lock_handle>() != nullptr, TypeParam::kind == lock_backend::directory);
  EXPECT_EQ(h.as<tokenlock::etcd_handle>() != nullptr, TypeParam::kind == lock_backend::etcd);
  native->release();
  EXPECT_FALSE(h.owns());
  EXPECT_TRUE(this->free_now());
}

TYPED_TEST(LockContract, AHandleOutlivesItsLock) {
  handle h = this->open()->acquire();  // the lock is gone after this line
  ASSERT_TRUE(h.owns());
  h.refresh();
  EXPECT_FALSE(this->free_now());
  h.release();
  EXPECT_TRUE(this->free_now());
}

// A refresh with another lease: a lock directory and Redis take it (the
// grant then ends at now + that lease); an etcd lease keeps the TTL it was
// granted, so a longer one is refused and a shorter one renews that TTL.
TYPED_TEST(LockContract, RefreshWithALongerLeaseWhereTheBackendCan) {
  handle h = this->open_leased(2s)->acquire();
  const std::optional<std::uint64_t> fence = h.fence();
  std::error_code ec;
  h.refresh(40s, ec);
  if (TypeParam::kind == lock_backend::etcd) {
    EXPECT_EQ(ec, errc::bad_argument);
    EXPECT_NE(tokenlock::last_error_message().find("keeps the TTL"), std::string::npos)
        << tokenlock::last_error_message();
    EXPECT_EQ(h.lease(), 2s);
    h.refresh(1s);  // shorter: renews the TTL it has
    EXPECT_EQ(h.lease(), 2s);
  } else {
    ASSERT_FALSE(ec) << tokenlock::last_error_message();
    EXPECT_EQ(h.lease(), 40s);
    const auto now = std::chrono::system_clock::now();
    EXPECT_GT(h.expires(), now + 30s);
    EXPECT_GT(this->open()->holder()->expires, now + 30s) << "the store kept the old lease";
    h.refresh(5s);
    EXPECT_EQ(h.lease(), 5s);
    EXPECT_LT(this->open()->holder()->expires, std::chrono::system_clock::now() + 6s);
  }
  EXPECT_TRUE(h.owns());
  EXPECT_EQ(h.fence(), fence);
  EXPECT_EQ(this->open()->holder()->id, h.id());
}

// A lease must be more than 0 and at most 24 hours (open_options): other
// leases are refused by acquire, writing nothing, and by refresh, leaving
// the grant as it was.
TYPED_TEST(LockContract, ALeaseAbove24HoursZeroOrNegativeIsABadArgument) {
  for (const std::chrono::milliseconds lease :
       {std::chrono::milliseconds(24h + 1ms), 0ms, -5ms, std::chrono::milliseconds(1000h)}) {
    const auto e = error_of([&](std::error_code& ec) { this->open_leased(lease)->acquire(ec); });
    EXPECT_EQ(e.first, errc::bad_argument) << lease.count() << ": " << e.second;
    EXPECT_NE(e.second.find(this->refused_lease_says(lease, false)), std::string::npos)
        << e.second;
  }
  EXPECT_EQ(this->written(), 0) << "a refused acquire wrote something";
  handle h = this->open_leased(24h)->acquire();
  EXPECT_GE(this->written(), 1);  // the look into the store sees a grant
  EXPECT_GT(this->open()->holder()->expires, std::chrono::system_clock::now() + 23h);
  for (const std::chrono::milliseconds lease : {std::chrono::milliseconds(24h + 1ms), 0ms, -1ms}) {
    const auto e = error_of([&](std::error_code& ec) { h.refresh(lease, ec); });
    EXPECT_EQ(e.first, errc::bad_argument) << lease.count() << ": " << e.second;
    EXPECT_NE(e.second.find(this->refused_lease_says(lease, true)), std::string::npos)
        << e.second;
    EXPECT_TRUE(h.owns()) << "a refused refresh gave up the grant";
  }
  const std::optional<tokenlock::lock_holder> who = this->open()->holder();
  ASSERT_TRUE(who.has_value());
  EXPECT_EQ(who->fence, h.fence());
  EXPECT_LE(who->expires, std::chrono::system_clock::now() + 24h) << "a refused refresh lengthened it";
  h.refresh(1h);  // shorter: an etcd lease renews the TTL it has
  const auto ends = this->open()->holder()->expires;
  if (TypeParam::kind == lock_backend::etcd) {
    EXPECT_EQ(h.lease(), 24h);
    EXPECT_GT(ends, std::chrono::system_clock::now() + 23h);
  } else {
    EXPECT_EQ(h.lease(), 1h);
    EXPECT_LE(ends, std::chrono::system_clock::now() + 1h);
  }
  h.release();
  EXPECT_FALSE(this->open()->holder().has_value());
}

// keep_alive (keep_alive.hpp) keeps a short lease through several
// refreshes, past several leases, and stops cleanly.
TYPED_TEST(LockContract, KeepAliveHoldsAGrantPastSeveralLeases) {
  handle h = this->open_leased(TypeParam::short_lease)->acquire();
  std::mutex m;
  std::condition_variable cv;
  int ok = 0;
  tokenlock::keep_alive_options ko;
  ko.on_refresh = [&](const std::error_code& ec) {
    std::lock_guard<std::mutex> g(m);
    if (!ec) ++ok;
    cv.notify_all();
  };
  tokenlock::keep_alive keeper(h, ko);
  {
    std::unique_lock<std::mutex> g(m);
    // Six refreshes at a third of the lease: two leases long.
    ASSERT_TRUE(cv.wait_for(g, 30s, [&] { return ok >= 6; })) << "refreshes: " << ok;
  }
  EXPECT_FALSE(keeper.lost()) << keeper.last_message();
  EXPECT_FALSE(this->open()->try_acquire().has_value()) << "the lease ran out";
  EXPECT_FALSE(keeper.stop()) << keeper.last_message();
  EXPECT_GE(keeper.refreshes(), 6u);
  h.release();
  EXPECT_TRUE(this->free_now());
}

// A holder whose process is gone (same host) is stale, and break_owner
// then frees the lock.
TYPED_TEST(LockContract, AHolderWhoseProcessIsGoneIsStale) {
  int status = -1;
  const std::string id = tokenlock::testing::run_in_child(
      [&] { return this->open_leased(60s)->acquire().detach(); }, status);
  ASSERT_EQ(status, 0) << id;
  auto lock = this->open();
  const std::optional<tokenlock::lock_holder> who = lock->holder();
  ASSERT_TRUE(who.has_value());
  EXPECT_EQ(who->id, id);
  EXPECT_EQ(who->owner, tokenlock::owner_liveness::dead) << who->reason;
  EXPECT_TRUE(who->stale) << who->reason;
  EXPECT_GT(who->expires, std::chrono::system_clock::now() + 30s) << "stale by its process, not its lease";
  lock->break_owner(who->id);
  EXPECT_FALSE(lock->holder().has_value());
  EXPECT_EQ(this->records(), 0);
}

TYPED_TEST(LockContract, SpecNamesTheLockAndOpensItAgain) {
  auto lock = this->open();
  const std::string spec = lock->spec();
  EXPECT_NE(spec.find(this->name_), std::string::npos) << spec;
  handle h = lock->acquire();
  EXPECT_FALSE(tokenlock::open_lock(spec)->try_acquire().has_value()) << spec;
}

}  // namespace
