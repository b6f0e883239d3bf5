// The clock offset estimate of <tokenlock/clock.hpp>: against a played file
// server (fake_os stamps files with a clock of its own and plays the round
// trips), with injected faults, and for real on a local directory.
#include <algorithm>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>

#include <boost/filesystem.hpp>

#include "doctor/clock_offset.hpp"
#include "fake_os.hpp"
#include "inspect.hpp"
#include "temp_dir.hpp"
#include "lockdir/token_name.hpp"
#include "tokenlock/tokenlock.hpp"

namespace fs = boost::filesystem;
using namespace std::chrono_literals;
using tokenlock::clock_offset;
using tokenlock::clock_offset_options;
using tokenlock::testing::entries;
using tokenlock::testing::fake_os;
using tokenlock::testing::op;
using tokenlock::testing::op_name;
using tokenlock::testing::fake_world;
using tokenlock::testing::temp_dir;

namespace {

class ClockOffsetTest : public ::testing::Test {
 protected:
  temp_dir tmp;
  std::string dir = tmp.path().string();
  std::shared_ptr<fake_world> world = std::make_shared<fake_world>();
  fake_os sys{world, 100, 5100};
  std::function<std::int64_t(int)> delay_;
  int writes_ = 0, stats_ = 0;

  // A played time that is not a whole second: a played server that stamps
  // in ticks then stamps whole seconds no more often than a real one.
  ClockOffsetTest() { world->wall_us = 1'800'000'000'123'457; }

  // The file server's clock runs `offset_us` ahead of ours and stamps in
  // multiples of `granule_us`; every write and every fstat takes
  // `half_trip_us` of played time, so a round trip is twice that.
  void server(std::int64_t offset_us, std::int64_t granule_us, std::int64_t half_trip_us) {
    world->server_clock_offset_us = offset_us;
    world->server_stamp_granularity_us = granule_us;
    play_round_trips([half_trip_us](int) { return half_trip_us; });
  }
  // Before the n-th write and the n-th fstat (n from 0), `delay(n)` of
  // played time passes.
  void play_round_trips(std::function<std::int64_t(int)> delay) {
    delay_ = std::move(delay);
    writes_ = stats_ = 0;
    arm();
  }
  void arm() {
    sys.before = [this](op called, const std::string&, const std::string&) {
      if (called == op::write) world->advance(delay_(writes_++));
      if (called == op::file_status_of) world->advance(delay_(stats_++));
      arm();
    };
  }
  clock_offset measure(clock_offset_options o = {}) {
    clock_offset out;
    auto f = tokenlock::detail::estimate_clock_offset(sys, dir, o, out);
    EXPECT_FALSE(f) << f.message;
    return out;
  }
  std::vector<std::string> calls_of(const std::string& op) const {
    std::vector<std::string> out;
    for (const auto& c : sys.calls)
      if (c.rfind(op + " ", 0) == 0) out.push_back(c);
    return out;
  }
};

TEST_F(ClockOffsetTest, FindsTheFileServersOffsetWithinItsUncertainty) {
  for (std::int64_t offset_us : {2'500'000LL, -3'000'000LL, 0LL, 737LL}) {
    server(offset_us, 4'000, 150);
    const clock_offset c = measure();
    EXPECT_LE(std::llabs(c.offset.count() - offset_us), c.uncertainty.count())
        << "offset " << offset_us << " estimated " << c.offset.count() << " ± "
        << c.uncertainty.count();
    EXPECT_EQ(c.round_trip, 300us);
    EXPECT_EQ(c.granularity, 10ms) << "a kernel tick is assumed, not whole seconds";
    EXPECT_LE(c.uncertainty, 5ms + 150us + 1us) << "half the tick, half the round trip, the truncation";
    EXPECT_EQ(c.exceeds(1s), std::llabs(offset_us) > 1'000'000) << offset_us;
    EXPECT_EQ(c.within(1s), std::llabs(offset_us) < 1'000'000) << offset_us;
    EXPECT_TRUE(entries(dir).empty()) << "the probe file is removed";
  }
}

TEST_F(ClockOffsetTest, KeepsTheSampleWithTheShortestRoundTrip) {
  world->server_clock_offset_us = 1'234'567;
  // A slow first round trip (a server busy for 400 ms), then fast ones:
  // the slow one would bound the stamp 400 times worse.
  play_round_trips([](int n) -> std::int64_t { return n == 0 ? 200'000 : n == 2 ? 50 : 500; });
  const clock_offset c = measure(clock_offset_options{4});
  EXPECT_EQ(c.round_trip, 100us);
  EXPECT_LE(std::llabs(c.offset.count() - 1'234'567), c.uncertainty.count());
  EXPECT_EQ(calls_of("write").size(), 4u);
  EXPECT_EQ(calls_of("file_status_of").size(), 4u);
}

TEST_F(ClockOffsetTest, StampsInWholeSecondsWidenTheUncertaintyToHalfASecond) {
  server(3'700'000, 1'000'000, 100);  // sshfs: SFTP carries whole seconds
  clock_offset c = measure();
  EXPECT_EQ(c.granularity, 1s);
  EXPECT_GE(c.uncertainty, 500ms);
  EXPECT_LE(std::llabs(c.offset.count() - 3'700'000), c.uncertainty.count());
  EXPECT_TRUE(c.exceeds(1s));
  world->server_clock_offset_us = 1'200'000;  // beyond 1 s, but not surely
  c = measure();
  EXPECT_LE(std::llabs(c.offset.count() - 1'200'000), c.uncertainty.count());
  EXPECT_FALSE(c.exceeds(1s)) << "too coarse to be sure";
  EXPECT_FALSE(c.within(1s)) << "too coarse to be sure";
  // Samples within one second of a server that stamps whole seconds all
  // carry one stamp, even half the time: that is no sign of FAT.
  server(1'876'543, 1'000'000, 100);
  c = measure();
  EXPECT_EQ(c.granularity, 1s);
  EXPECT_LE(std::llabs(c.offset.count() - 1'876'543), c.uncertainty.count());
  // FAT stamps even seconds: told once the stamps differ (slow round trips
  // spread the samples over several seconds).
  server(0, 2'000'000, 700'000);
  c = measure();
  EXPECT_EQ(c.granularity, 2s);
  EXPECT_LE(std::llabs(c.offset.count()), c.uncertainty.count());
}

TEST_F(ClockOffsetTest, ProbesWithOneDotFileThatNothingElseClaims) {
  server(0, 1, 10);
  measure();
  const auto creates = calls_of("create_exclusive");
  ASSERT_EQ(creates.size(), 1u) << "one file for all samples";
  // std::regex is avoided: GCC 12 warns inside it under ASan.
  const std::string prefix = "create_exclusive " + dir + "/.tokenlock-clock.";
  EXPECT_EQ(creates[0].rfind(prefix, 0), 0u) << creates[0];
  const std::string nonce = creates[0].substr(std::min(prefix.size(), creates[0].size()));
  EXPECT_EQ(nonce.size(), 16u) << creates[0];
  EXPECT_EQ(nonce.find_first_not_of("0123456789abcdef"), std::string::npos) << creates[0];
  const std::string name = creates[0].substr(creates[0].rfind('/') + 1);
  EXPECT_EQ(tokenlock::detail::classify_name(name), tokenlock::detail::name_kind::other)
      << "never taken for a token in a lock directory";
  EXPECT_EQ(calls_of("remove_file"), std::vector<std::string>{"remove_file " + dir + "/" + name});
  EXPECT_EQ(sys.open_descriptors(), 0u);
}

TEST_F(ClockOffsetTest, EveryFailureNamesTheDirectoryTheStepAndTheCauseAndLeavesNothing) {
  struct fault {
    op o;
    int err;
    const char* step;
  };
  for (const fault& f : {fault{op::create_exclusive, EACCES, "cannot create the probe file"},
                         fault{op::write, ENOSPC, "cannot write to the probe file"},
                         fault{op::file_status_of, EIO, "cannot read the modification time"},
                         fault{op::close, EIO, "cannot close the probe file"}}) {
    fake_os s(world, 101, 5101);
    s.fail(f.o, ".tokenlock-clock.", f.err);
    clock_offset out;
    auto failure = tokenlock::detail::estimate_clock_offset(s, dir, {}, out);
    EXPECT_EQ(failure.code, std::error_code(f.err, std::generic_category())) << op_name(f.o);
    EXPECT_NE(failure.message.find("estimate clock offset in " + dir), std::string::npos)
        << failure.message;
    EXPECT_NE(failure.message.find(f.step), std::string::npos) << failure.message;
    EXPECT_NE(failure.message.find(std::strerror(f.err)), std::string::npos) << failure.message;
    EXPECT_TRUE(entries(dir).empty()) << op_name(f.o) << ": the probe file is removed";
    EXPECT_EQ(s.open_descriptors(), 0u) << op_name(f.o);
  }
}

TEST_F(ClockOffsetTest, APermissionErrorSaysWhatTheUserNeeds) {
  sys.fail(op::create_exclusive, ".tokenlock-clock.", EACCES);
  clock_offset out;
  auto f = tokenlock::detail::estimate_clock_offset(sys, dir, {}, out);
  EXPECT_NE(f.message.find("needs write and search permission on " + dir), std::string::npos)
      << f.message;
}

TEST_F(ClockOffsetTest, AProbeFileThatCannotBeRemovedIsNamed) {
  sys.fail(op::remove_file, ".tokenlock-clock.", EBUSY);
  clock_offset out;
  auto f = tokenlock::detail::estimate_clock_offset(sys, dir, {}, out);
  EXPECT_EQ(f.code, std::errc::device_or_resource_busy);
  const auto left = entries(dir);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_NE(f.message.find("cannot remove the probe file " + dir + "/" + left[0]),
            std::string::npos)
      << f.message;
  EXPECT_NE(f.message.find("remove it by hand"), std::string::npos) << f.message;
  // After an earlier failure, the leftover is named too.
  fake_os s(world, 101, 5101);
  s.fail(op::write, ".tokenlock-clock.", EIO);
  s.fail(op::remove_file, ".tokenlock-clock.", EBUSY);
  f = tokenlock::detail::estimate_clock_offset(s, dir, {}, out);
  EXPECT_EQ(f.code, std::errc::io_error) << "the first failure is the one reported";
  EXPECT_NE(f.message.find("; and cannot remove the probe file"), std::string::npos) << f.message;
}

TEST_F(ClockOffsetTest, AFilesystemWithoutModificationTimesIsNotSupported) {
  world->server_clock_offset_us = 0;
  world->wall_us = 0;  // the played server stamps 1970-01-01T00:00:00Z: no time at all
  clock_offset out;
  auto f = tokenlock::detail::estimate_clock_offset(sys, dir, {}, out);
  EXPECT_EQ(f.code, std::errc::not_supported);
  EXPECT_NE(f.message.find("reports no modification time"), std::string::npos) << f.message;
  EXPECT_TRUE(entries(dir).empty());
}

TEST_F(ClockOffsetTest, RefusesBadArguments) {
  clock_offset out;
  for (int samples : {0, -1, 101}) {
    auto f = tokenlock::detail::estimate_clock_offset(sys, dir, clock_offset_options{samples}, out);
    EXPECT_EQ(f.code, tokenlock::errc::bad_argument) << samples;
  }
  EXPECT_EQ(tokenlock::detail::estimate_clock_offset(sys, "", {}, out).code,
            tokenlock::errc::bad_argument);
  EXPECT_TRUE(sys.calls.empty()) << "nothing touched";
}

TEST_F(ClockOffsetTest, AgreesWithThisHostsOwnClockOnALocalDirectory) {
  // Here the kernel that stamps the file is the one whose clock we read.
  const clock_offset c = tokenlock::estimate_clock_offset(tmp.path());
  EXPECT_LE(std::llabs(c.offset.count()), c.uncertainty.count())
      << c.offset.count() << " ± " << c.uncertainty.count();
  // A local write and fstat take microseconds; the bound leaves a loaded
  // machine a second (the property is the agreement above).
  EXPECT_LT(c.uncertainty, 1s);
  EXPECT_TRUE(c.within(1s));
  EXPECT_TRUE(entries(dir).empty());
}

TEST_F(ClockOffsetTest, TheTwoFormsReportAMissingDirectoryAlike) {
  const fs::path missing = tmp / "missing";
  std::error_code ec;
  tokenlock::estimate_clock_offset(missing, ec);
  EXPECT_EQ(ec, std::errc::no_such_file_or_directory);
  EXPECT_NE(tokenlock::last_error_message().find(missing.string()), std::string::npos)
      << tokenlock::last_error_message();
  EXPECT_NE(tokenlock::last_error_message().find("the directory does not exist"),
            std::string::npos)
      << tokenlock::last_error_message();
  try {
    tokenlock::estimate_clock_offset(missing);
    ADD_FAILURE() << "no exception";
  } catch (const tokenlock::lock_error& e) {
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory);
    // The same text, but for the probe file's random name.
    const std::string thrown = e.what(), stored = tokenlock::last_error_message();
    const auto cut = thrown.find(".tokenlock-clock.");
    ASSERT_NE(cut, std::string::npos) << thrown;
    EXPECT_EQ(thrown.substr(0, cut), stored.substr(0, cut));
  }
}

}  // namespace
