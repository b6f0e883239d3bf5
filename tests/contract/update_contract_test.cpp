// The contract of update_file, increment_counter, commit_file and
// keep_alive (tokenlock/update.hpp, tokenlock/keep_alive.hpp) on
// tokenlock::lock and tokenlock::handle, written once and run on every
// backend: a lock directory fences its commits through its token, Redis
// and etcd through the fence directory beside the target.
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "contract_fixture.hpp"
#include "inspect.hpp"
#include "temp_dir.hpp"
#include "tokenlock/etcd_lock.hpp"
#include "tokenlock/keep_alive.hpp"
#include "tokenlock/redis_lock.hpp"
#include "tokenlock/rename_lock.hpp"
#include "tokenlock/update.hpp"

namespace {

using namespace std::chrono_literals;
using namespace tokenlock::contract;
using tokenlock::errc;
using tokenlock::handle;
using tokenlock::testing::slurp;
using tokenlock::testing::spit;
using tokenlock::testing::temp_files_below;

// Which locks update_file takes without ambiguity: every backend's lock
// lvalue binds to tokenlock::lock&, and a rename_lock, even const or a
// temporary, keeps binding to the `const rename_lock&` forms (an exact
// match beats the conversion to its base).
template <class L, class = void>
struct updates_with : std::false_type {};
template <class L>
struct updates_with<L, std::void_t<decltype(tokenlock::update_file(
                           std::declval<const boost::filesystem::path&>(), std::declval<L>(),
                           std::declval<const tokenlock::update_function&>()))>>
    : std::true_type {};
template <class L, class = void>
struct counts_with : std::false_type {};
template <class L>
struct counts_with<L, std::void_t<decltype(tokenlock::increment_counter(
                          std::declval<const boost::filesystem::path&>(), std::declval<L>()))>>
    : std::true_type {};
static_assert(updates_with<tokenlock::rename_lock&>::value);
static_assert(updates_with<const tokenlock::rename_lock&>::value);
static_assert(updates_with<tokenlock::rename_lock&&>::value);
static_assert(updates_with<tokenlock::redis_lock&>::value);
static_assert(updates_with<tokenlock::etcd_lock&>::value);
static_assert(updates_with<tokenlock::lock&>::value);
static_assert(!updates_with<const tokenlock::lock&>::value);  // acquiring changes a lock
static_assert(counts_with<tokenlock::rename_lock&&>::value && counts_with<tokenlock::lock&>::value &&
              counts_with<tokenlock::redis_lock&>::value && counts_with<tokenlock::etcd_lock&>::value);
static_assert(std::is_constructible_v<tokenlock::keep_alive, handle&> &&
              std::is_constructible_v<tokenlock::keep_alive, tokenlock::lock_handle&> &&
              std::is_constructible_v<tokenlock::keep_alive, tokenlock::redis_handle&> &&
              std::is_constructible_v<tokenlock::keep_alive, tokenlock::etcd_handle&>);

template <class Backend>
class UpdateContract : public LockContract<Backend> {
 protected:
  std::string target(const std::string& name) const { return (files_ / name).string(); }

  // Temporary files left anywhere below the targets (their fence
  // directories included) and, for a lock directory, in its workspace.
  std::vector<std::string> leftovers() const {
    std::vector<std::string> found = temp_files_below(files_.path());
    if constexpr (Backend::kind == tokenlock::lock_backend::directory) {
      for (auto& f : temp_files_below(this->backend_.dir.path())) found.push_back(f);
    }
    return found;
  }

  // Past the end of a lease of `lease` begun at `start`, by half a lease:
  // waited for with a bound, looking every 50 ms.
  static void wait_past_lease(std::chrono::steady_clock::time_point start,
                              std::chrono::milliseconds lease) {
    const auto until = start + lease + lease / 2;
    while (std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(50ms);
  }

  tokenlock::testing::temp_dir files_;
};

TYPED_TEST_SUITE(UpdateContract, backends, backend_names);

TYPED_TEST(UpdateContract, UpdateFileWritesAndReturns) {
  auto lock = this->open();
  const std::string file = this->target("data");
  std::vector<std::optional<std::string>> seen;
  auto append = [&](const std::optional<std::string>& current) {
    seen.push_back(current);
    EXPECT_FALSE(this->free_now()) << "the function runs under the lock";
    return current.value_or("") + "x\n";
  };
  EXPECT_TRUE(tokenlock::update_file(file, *lock, append).fenced);
  std::error_code ec;
  EXPECT_TRUE(tokenlock::update_file(file, *lock, append, {}, ec).fenced);
  EXPECT_FALSE(ec) << tokenlock::last_error_message();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_FALSE(seen[0].has_value());
  EXPECT_EQ(seen[1], std::optional<std::string>("x\n"));
  EXPECT_EQ(slurp(file), "x\nx\n");
  EXPECT_TRUE(this->free_now());
  EXPECT_TRUE(this->leftovers().empty());
}

TYPED_TEST(UpdateContract, IncrementCounterCounts) {
  auto lock = this->open();
  const std::string file = this->target("hits");
  for (std::uint64_t i = 1; i <= 3; ++i) EXPECT_EQ(tokenlock::increment_counter(file, *lock), i);
  std::error_code ec;
  EXPECT_EQ(tokenlock::increment_counter(file, *lock, 10, {}, ec), 13u);
  EXPECT_FALSE(ec) << tokenlock::last_error_message();
  EXPECT_EQ(tokenlock::read_counter(file), std::optional<std::uint64_t>(13));
  EXPECT_EQ(slurp(file), "13\n");
  if (this->has_fences()) {
    // The servers' commits are fenced through one entry beside the target,
    // f.<fence>, whatever the number of commits.
    const std::vector<std::string> fence = tokenlock::testing::entries(file + ".fence");
    ASSERT_EQ(fence.size(), 1u);
    EXPECT_EQ(fence[0].rfind("f.", 0), 0u) << fence[0];
  }

  // Not a counter: refused, the file left as it is.
  spit(file, "lots\n");
  EXPECT_EQ(tokenlock::increment_counter(file, *lock, 1, {}, ec), 0u);
  EXPECT_EQ(ec, errc::corrupt_data) << tokenlock::last_error_message();
  EXPECT_EQ(slurp(file), "lots\n");
  EXPECT_TRUE(this->free_now());
  EXPECT_TRUE(this->leftovers().empty());
}

TYPED_TEST(UpdateContract, CommitFileCommitsUnderAHeldHandle) {
  const std::string file = this->target("data");
  handle h = this->open()->acquire();
  tokenlock::commit_file(h, file, "one\n");
  EXPECT_EQ(slurp(file), "one\n");
  std::error_code ec;
  tokenlock::commit_file(h, file, "two\n", {}, ec);
  EXPECT_FALSE(ec) << tokenlock::last_error_message();
  EXPECT_EQ(slurp(file), "two\n");
  EXPECT_TRUE(h.owns()) << "a commit leaves the lock held";
  EXPECT_FALSE(this->free_now());
  h.release();
  EXPECT_TRUE(this->free_now());
  EXPECT_TRUE(this->leftovers().empty());

  // A released handle and an empty one commit nothing.
  tokenlock::commit_file(h, file, "late\n", {}, ec);
  EXPECT_EQ(ec, errc::lock_lost) << tokenlock::last_error_message();
  tokenlock::commit_file(handle(), file, "none\n", {}, ec);
  EXPECT_EQ(ec, errc::bad_argument) << tokenlock::last_error_message();
  EXPECT_EQ(slurp(file), "two\n");
  EXPECT_TRUE(this->leftovers().empty());
}

// Our grant broken, and a newer holder's update committed: our commit
// writes nothing, whichever way it is fenced.
TYPED_TEST(UpdateContract, CommitFileAfterATakeoverIsLockLost) {
  const std::string file = this->target("data");
  spit(file, "old\n");
  handle h = this->open()->acquire();
  auto other = this->open(5s);
  other->break_owner(h.id());
  tokenlock::update_file(file, *other, [](const std::optional<std::string>& current) {
    return current.value_or("") + "newer\n";
  });
  std::error_code ec;
  tokenlock::commit_file(h, file, "stale\n", {}, ec);
  EXPECT_EQ(ec, errc::lock_lost) << tokenlock::last_error_message();
  EXPECT_NE(tokenlock::last_error_message().find(file), std::string::npos)
      << tokenlock::last_error_message();
  EXPECT_THROW(tokenlock::commit_file(h, file, "stale\n"), tokenlock::lock_error);
  EXPECT_EQ(slurp(file), "old\nnewer\n");
  EXPECT_TRUE(this->leftovers().empty());
  EXPECT_TRUE(this->free_now());
}

// Taken over while the update function runs (the holder stalled past its
// lease): the stale update writes nothing, the newer one stays.
TYPED_TEST(UpdateContract, UpdateFileTakenOverBeforeItsCommitWritesNothing) {
  const std::string file = this->target("data");
  spit(file, "old\n");
  auto lock = this->open();
  auto other = this->open(5s);
  std::error_code ec;
  tokenlock::update_file(
      file, *lock,
      [&](const std::optional<std::string>& current) {
        other->break_owner(other->holder()->id);
        tokenlock::update_file(file, *other, [](const std::optional<std::string>& now) {
          return now.value_or("") + "newer\n";
        });
        return current.value_or("") + "stale\n";
      },
      {}, ec);
  EXPECT_EQ(ec, errc::lock_lost) << tokenlock::last_error_message();
  EXPECT_EQ(slurp(file), "old\nnewer\n");
  EXPECT_TRUE(this->leftovers().empty());
  EXPECT_TRUE(this->free_now());
}

// What a commit refused for a lease that ended says, by backend.
template <class Backend>
std::string refused_commit_says() {
  if (Backend::kind == tokenlock::lock_backend::directory)
    return "the lock was taken over before the commit";
  return "a newer holder took the fence before our commit";
}

// A holder stalls in its update function past its lease (the lease ends,
// nobody breaks it); the next holder waits it out, takes the lock and
// commits; the stalled commit is refused and the newer data stays.
TYPED_TEST(UpdateContract, AnUpdateStalledPastItsLeaseIsRefusedAtItsCommit) {
  const std::string file = this->target("data");
  spit(file, "0\n");
  std::mutex m;
  std::condition_variable cv;
  bool in_function = false, newer_done = false;
  std::error_code stalled_ec;
  std::string stalled_message;
  auto stalled_lock = this->open_leased(TypeParam::short_lease);
  std::thread stalled([&] {
    tokenlock::update_file(
        file, *stalled_lock,
        [&](const std::optional<std::string>&) {
          std::unique_lock<std::mutex> g(m);
          in_function = true;
          cv.notify_all();
          cv.wait(g, [&] { return newer_done; });
          return std::string("stalled\n");
        },
        {}, stalled_ec);
    stalled_message = tokenlock::last_error_message();  // per thread
  });
  {
    std::unique_lock<std::mutex> g(m);
    cv.wait(g, [&] { return in_function; });
  }
  // Waits out the stalled lease; a lock directory's skew allowance 0 (the
  // stalled holder is on this host): the lease ends when it says.
  tokenlock::open_options o;
  o.lease = 30s;
  o.wait = TypeParam::short_lease + 10s;
  o.directory.skew_allowance = 0ms;
  auto newer = this->open_with(o);
  EXPECT_NO_THROW(tokenlock::update_file(
      file, *newer, [](const std::optional<std::string>&) { return std::string("newer\n"); }));
  {
    std::lock_guard<std::mutex> g(m);
    newer_done = true;
  }
  cv.notify_all();
  stalled.join();
  EXPECT_EQ(stalled_ec, errc::lock_lost) << stalled_message;
  EXPECT_NE(stalled_message.find(refused_commit_says<TypeParam>()), std::string::npos)
      << stalled_message;
  EXPECT_EQ(slurp(file), "newer\n");
  EXPECT_TRUE(this->leftovers().empty());
  EXPECT_TRUE(this->free_now());
}

TYPED_TEST(UpdateContract, AThrowingFunctionWritesNothingAndFreesTheLock) {
  const std::string file = this->target("data");
  spit(file, "old\n");
  auto lock = this->open();
  auto thrower = [](const std::optional<std::string>&) -> std::string {
    throw std::runtime_error("no new contents");
  };
  EXPECT_THROW(tokenlock::update_file(file, *lock, thrower), std::runtime_error);
  EXPECT_TRUE(this->free_now());
  std::error_code ec;
  EXPECT_THROW(tokenlock::update_file(file, *lock, thrower, {}, ec), std::runtime_error);
  EXPECT_EQ(slurp(file), "old\n");
  EXPECT_TRUE(this->free_now());
  EXPECT_TRUE(this->leftovers().empty());
}

TYPED_TEST(UpdateContract, KeepAliveOverAHandleKeepsTheLockPastItsLease) {
  auto lock = this->open_leased(2s);
  handle h = lock->acquire();
  const auto start = std::chrono::steady_clock::now();
  tokenlock::keep_alive keeper(h);
  this->wait_past_lease(start, h.lease());
  EXPECT_FALSE(keeper.lost()) << keeper.last_message();
  EXPECT_GE(keeper.refreshes(), 3u);
  EXPECT_FALSE(this->open()->try_acquire().has_value()) << "the lease ended";
  EXPECT_FALSE(keeper.stop()) << keeper.last_message();
  ASSERT_TRUE(h.owns());
  h.release();
  EXPECT_TRUE(this->free_now());
}

// update_options::keep_alive: a function that runs for more than two
// leases commits, and nobody else got the lock meanwhile.
TYPED_TEST(UpdateContract, UpdateOptionsKeepAliveCarriesAnUpdatePastSeveralLeases) {
  const std::string file = this->target("data");
  spit(file, "0\n");
  auto lock = this->open_leased(2s);
  auto other = this->open();
  tokenlock::update_options u;
  u.keep_alive = true;
  int looks = 0, taken = 0;
  const auto result = tokenlock::update_file(
      file, *lock,
      [&](const std::optional<std::string>& current) {
        // Two and a half leases of 2 s. A sleep paces the looks; what is
        // checked is that no look got the lock.
        const auto until = std::chrono::steady_clock::now() + 5s;
        while (std::chrono::steady_clock::now() < until) {
          ++looks;
          if (other->try_acquire()) ++taken;
          std::this_thread::sleep_for(250ms);
        }
        return current.value_or("") + "kept\n";
      },
      u);
  EXPECT_TRUE(result.fenced);
  EXPECT_GE(looks, 10);
  EXPECT_EQ(taken, 0) << "another lock got the lock while the update ran";
  EXPECT_EQ(slurp(file), "0\nkept\n");
  EXPECT_EQ(this->records(), 0);
  EXPECT_TRUE(this->free_now());
  EXPECT_TRUE(this->leftovers().empty());
}

}  // namespace
