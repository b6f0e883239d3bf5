// The contract of shared holders and semaphores (docs/protocol.md, Shared
// locks and semaphores), written once and run on every backend through
// tokenlock::open_lock: readers hold together, a writer alone; a semaphore
// of N admits N; a shared grant has no fence; holders() lists everyone;
// every release leaves nothing behind.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "contract_fixture.hpp"
#include "inspect.hpp"
#include "temp_dir.hpp"
#include "tokenlock/update.hpp"

namespace {

using namespace std::chrono_literals;
using namespace tokenlock::contract;
using tokenlock::errc;
using tokenlock::handle;
using tokenlock::lock_mode;

template <class Backend>
class SharedContract : public LockContract<Backend> {
 protected:
  // A lock on the same spec held in `mode`, with `slots` for a semaphore.
  std::unique_ptr<tokenlock::lock> open_mode(lock_mode mode, std::uint32_t slots = 0,
                                             std::chrono::milliseconds wait = 0ms) {
    tokenlock::open_options o;
    o.wait = wait;
    o.lease = 10s;
    o.mode = mode;
    o.slots = slots;
    return this->open_with(o);
  }
  std::unique_ptr<tokenlock::lock> reader() { return open_mode(lock_mode::shared); }
  tokenlock::testing::temp_dir files_;
};

TYPED_TEST_SUITE(SharedContract, backends, backend_names);

TYPED_TEST(SharedContract, ReadersHoldTogetherAndAWriterAlone) {
  std::vector<handle> readers;
  for (int i = 0; i < 4; ++i) {
    std::optional<handle> h = this->reader()->try_acquire();
    ASSERT_TRUE(h && h->owns()) << "reader " << i << " was kept out by the others";
    EXPECT_EQ(h->mode(), lock_mode::shared);
    EXPECT_FALSE(h->fence()) << "a shared grant fences nothing";
    readers.push_back(std::move(*h));
  }
  EXPECT_FALSE(this->open()->try_acquire()) << "a writer beside readers";
  std::vector<tokenlock::lock_holder> all = this->open()->holders();
  int shared = 0;
  for (const auto& h : all) shared += h.mode == lock_mode::shared && !h.waiting_writer;
  EXPECT_EQ(shared, 4);
  for (auto& h : readers) h.release();
  std::optional<handle> writer = this->open()->try_acquire();
  ASSERT_TRUE(writer && writer->owns()) << "the last reader out did not free the lock";
  EXPECT_EQ(writer->mode(), lock_mode::exclusive);
  EXPECT_FALSE(this->reader()->try_acquire()) << "a reader beside a writer";
  writer->release();
  EXPECT_TRUE(this->open()->holders().empty());
  EXPECT_TRUE(this->free_now());
}

TYPED_TEST(SharedContract, ASemaphoreAdmitsItsSlotsAndNoMore) {
  std::vector<handle> held;
  for (int i = 0; i < 3; ++i) {
    std::optional<handle> h = this->open_mode(lock_mode::shared, 3)->try_acquire();
    ASSERT_TRUE(h && h->owns()) << "slot " << i;
    held.push_back(std::move(*h));
  }
  EXPECT_FALSE(this->open_mode(lock_mode::shared, 3)->try_acquire()) << "a fourth of 3 slots";
  std::error_code ec;
  this->open_mode(lock_mode::shared, 5)->acquire(ec);
  EXPECT_EQ(ec, make_error_code(errc::busy)) << "a semaphore of another size joined";
  held.front().release();
  std::optional<handle> again = this->open_mode(lock_mode::shared, 3)->try_acquire();
  ASSERT_TRUE(again && again->owns()) << "a released slot was not free";
  again->release();
  for (auto& h : held) h.release();
  EXPECT_TRUE(this->free_now());
}

TYPED_TEST(SharedContract, ARefreshedShareIsStillHeldAndReleased) {
  handle a = this->reader()->acquire();
  handle b = this->reader()->acquire();
  b.refresh();
  EXPECT_TRUE(b.owns());
  EXPECT_GT(b.expires(), std::chrono::system_clock::now() + 5s);
  EXPECT_FALSE(this->open()->try_acquire());
  a.release();
  EXPECT_FALSE(this->open()->try_acquire()) << "the refreshed share was lost";
  b.release();
  EXPECT_TRUE(this->free_now());
}

TYPED_TEST(SharedContract, AFencedUpdateUnderASharedLockWritesNothing) {
  const boost::filesystem::path target = this->files_ / "data";
  tokenlock::testing::spit(target, "before\n");
  auto readers = this->reader();
  std::error_code ec;
  tokenlock::update_file(target, *readers, [](const std::optional<std::string>&) {
    return std::string("after\n");
  }, {}, ec);
  EXPECT_EQ(ec, make_error_code(errc::bad_argument));
  EXPECT_EQ(tokenlock::testing::slurp(target), "before\n");
  EXPECT_TRUE(tokenlock::testing::temp_files_below(this->files_.path()).empty());
  EXPECT_TRUE(this->free_now()) << "the refused update kept its lock";
}

}  // namespace
