// The contract of tokenlock::lock and tokenlock::handle (tokenlock/lock.hpp),
// written once and run on every backend through tokenlock::open_lock: a
// lock directory always, Redis and etcd against real servers the tests
// start (skipped, with the reason, where they cannot run).
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include <unistd.h>

#include <gtest/gtest.h>

#include "contract_fixture.hpp"
#include "tokenlock/etcd_lock.hpp"
#include "tokenlock/open_lock.hpp"
#include "tokenlock/redis_lock.hpp"
#include "tokenlock/rename_lock.hpp"

namespace {

using namespace std::chrono_literals;
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

using namespace tokenlock::contract;

TYPED_TEST_SUITE(LockContract, backends, backend_names);

TYPED_TEST(LockContract, AcquireHoldsUntilRelease) {
  auto lock = this->open();
  EXPECT_EQ(lock->backend(), TypeParam::kind);
  handle h = lock->acquire();
  ASSERT_TRUE(h.owns());
  EXPECT_FALSE(h.id().empty());
  EXPECT_EQ(h.lease(), 10s);
  const auto now = std::chrono::system_clock::now();
  EXPECT_GT(h.expires(), now + 5s);
  EXPECT_LT(h.expires(), now + 15s);
  EXPECT_FALSE(this->free_now());
  h.release();
  EXPECT_FALSE(h.owns());
  EXPECT_TRUE(this->free_now());
  EXPECT_FALSE(lock->holder().has_value());
}

TYPED_TEST(LockContract, TryAcquireOnAHeldLockIsNulloptAndBusyAndTimedOut) {
  handle held = this->open()->acquire();
  std::error_code ec;
  std::optional<handle> none = this->open()->try_acquire(ec);
  EXPECT_FALSE(ec) << tokenlock::last_error_message();
  EXPECT_FALSE(none.has_value());

  handle busy = this->open(0ms)->acquire(ec);
  EXPECT_EQ(ec, errc::busy);
  EXPECT_FALSE(busy.owns());

  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(
      {
        try {
          this->open(300ms)->acquire();
        } catch (const tokenlock::lock_error& e) {
          EXPECT_EQ(e.code(), errc::timed_out) << e.what();
          throw;
        }
      },
      tokenlock::lock_error);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);
  EXPECT_TRUE(held.owns());
  held.refresh();  // still ours, untouched by the attempts
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
  std::error_code ec;
  h.refresh(ec);
  EXPECT_EQ(ec, errc::lock_lost) << tokenlock::last_error_message();
  EXPECT_FALSE(h.owns());
  EXPECT_TRUE(this->free_now());
}

TYPED_TEST(LockContract, BreakOwnerOfAnEarlierGrantChangesNothing) {
  handle first = this->open()->acquire();
  const std::string old_id = first.id();
  first.release();
  handle now = this->open()->acquire();
  std::error_code ec;
  this->open()->break_owner(old_id, ec);
  EXPECT_EQ(ec, errc::lock_lost) << tokenlock::last_error_message();
  ASSERT_TRUE(now.owns());
  now.refresh();  // still ours
  EXPECT_EQ(this->open()->holder()->id, now.id());
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

TYPED_TEST(LockContract, FenceIncreasesWhereTheBackendHasOne) {
  handle a = this->open()->acquire();
  const std::optional<std::uint64_t> first = a.fence();
  a.release();
  handle b = this->open()->acquire();
  if (TypeParam::kind == lock_backend::directory) {
    EXPECT_FALSE(first.has_value());  // lock.hpp, Fences
    EXPECT_FALSE(b.fence().has_value());
    return;
  }
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(b.fence().has_value());
  EXPECT_GT(*b.fence(), *first);
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

TYPED_TEST(LockContract, RefreshWithALongerLeaseWhereTheBackendCan) {
  handle h = this->open()->acquire();
  std::error_code ec;
  h.refresh(20s, ec);
  if (TypeParam::kind == lock_backend::etcd) {
    // An etcd lease keeps its TTL (lock.hpp): refused, nothing changed.
    EXPECT_EQ(ec, errc::bad_argument);
    EXPECT_NE(tokenlock::last_error_message().find("keeps the TTL"), std::string::npos)
        << tokenlock::last_error_message();
    EXPECT_EQ(h.lease(), 10s);
    h.refresh(5s);  // shorter: renews the TTL it has
  } else {
    EXPECT_FALSE(ec) << tokenlock::last_error_message();
    EXPECT_GT(h.expires(), std::chrono::system_clock::now() + 15s);
  }
  EXPECT_TRUE(h.owns());
  EXPECT_EQ(this->open()->holder()->id, h.id());
}

TYPED_TEST(LockContract, SpecNamesTheLockAndOpensItAgain) {
  auto lock = this->open();
  const std::string spec = lock->spec();
  EXPECT_NE(spec.find(this->name_), std::string::npos) << spec;
  handle h = lock->acquire();
  EXPECT_FALSE(tokenlock::open_lock(spec)->try_acquire().has_value()) << spec;
}

}  // namespace
