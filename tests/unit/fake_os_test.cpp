// The test double itself: a fault or when() that a test arms and its code
// never reaches is reported, so that such a test cannot pass by accident.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <memory>

#include "fake_os.hpp"
#include "temp_dir.hpp"

using tokenlock::testing::fake_os;
using tokenlock::testing::fake_world;
using tokenlock::testing::op;
using tokenlock::testing::op_from_name;
using tokenlock::testing::op_name;
using tokenlock::testing::temp_dir;

namespace {

std::unique_ptr<fake_os> a_process() {
  return std::make_unique<fake_os>(std::make_shared<fake_world>(), 100, 1);
}

TEST(FakeOs, AFaultThatNeverFiredFailsTheTest) {
  EXPECT_NONFATAL_FAILURE(
      {
        auto sys = a_process();
        sys->fail(op::rename, "/lockfile", EIO);
      },
      "a fault armed on rename of paths containing \"/lockfile\" never fired");
}

TEST(FakeOs, AFaultThatFiredFewerTimesThanArmedFailsTheTest) {
  temp_dir tmp;
  EXPECT_NONFATAL_FAILURE(
      {
        auto sys = a_process();
        sys->fail(op::make_directory, "x", EACCES, 2);
        EXPECT_EQ(sys->make_directory((tmp / "x").string(), 0755).value(), EACCES);
      },
      "1 call(s) left");
}

TEST(FakeOs, AnEveryCallFaultMustFireOnce) {
  EXPECT_NONFATAL_FAILURE(
      {
        auto sys = a_process();
        sys->fail(op::sync_directory, "", EIO, -1);
      },
      "never fired");
}

TEST(FakeOs, AWhenThatNeverFiredFailsTheTest) {
  EXPECT_NONFATAL_FAILURE(
      {
        auto sys = a_process();
        sys->when(op::list_directory, "/nowhere", [] {});
      },
      "when(list_directory, \"/nowhere\") never fired");
}

TEST(FakeOs, AWhenReplacedBeforeItFiredFailsTheTest) {
  temp_dir tmp;
  EXPECT_NONFATAL_FAILURE(
      {
        auto sys = a_process();
        sys->when(op::rename, "/first", [] {});
        bool ran = false;
        sys->when(op::make_directory, "z", [&] { ran = true; });
        EXPECT_FALSE(sys->make_directory((tmp / "z").string(), 0755));
        EXPECT_TRUE(ran);
      },
      "when(rename, \"/first\") never fired before another when() replaced it");
}

TEST(FakeOs, FiredFaultsAndDisarmedOnesPass) {
  temp_dir tmp;
  auto sys = a_process();
  sys->fail(op::make_directory, "y", EACCES);
  EXPECT_EQ(sys->make_directory((tmp / "y").string(), 0755).value(), EACCES);
  bool ran = false;
  sys->when(op::make_directory, "y", [&] { ran = true; });
  EXPECT_FALSE(sys->make_directory((tmp / "y").string(), 0755));
  EXPECT_TRUE(ran);
  sys->fail(op::rename, "never", EIO);
  sys->disarm();  // the point of this test: a disarmed fault is no failure
}

TEST(FakeOs, OpNamesGoBothWays) {
  for (op o : {op::rename, op::create_wait_board, op::board_wake})
    EXPECT_EQ(op_from_name(op_name(o)), o);
  EXPECT_FALSE(op_from_name("renmae").has_value());
}

}  // namespace
