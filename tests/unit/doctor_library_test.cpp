// check_directory_health (tokenlock/doctor.hpp) on real local directories,
// the clock judgement it and `tokenlock status` share, and the one table of
// errno advice and network-filesystem cache settings behind their messages.
#include <gtest/gtest.h>

#include <cerrno>
#include <stdexcept>

#include <boost/filesystem.hpp>

#include "core/errno_advice.hpp"
#include "inspect.hpp"
#include "core/netfs_advice.hpp"
#include "doctor_properties.hpp"
#include "temp_dir.hpp"
#include "tokenlock/clock_judgement.hpp"
#include "tokenlock/doctor.hpp"
#include "tokenlock/errors.hpp"

namespace fs = boost::filesystem;
using namespace std::chrono_literals;
using tokenlock::check_directory_health;
using tokenlock::doctor_finding;
using tokenlock::doctor_options;
using tokenlock::doctor_report;
using tokenlock::doctor_verdict;
using tokenlock::testing::entries;
using tokenlock::testing::snapshot;
using tokenlock::testing::temp_dir;

namespace {

using tokenlock::testing::local_properties;
using tokenlock::testing::peer_properties;

std::vector<std::string> properties(const std::vector<doctor_finding>& findings) {
  std::vector<std::string> out;
  for (const auto& f : findings) out.push_back(f.property);
  return out;
}

class DoctorLibraryTest : public ::testing::Test {
 protected:
  temp_dir tmp;
  std::string dir = (tmp / "share").string();
  void SetUp() override { fs::create_directories(dir); }
};

TEST_F(DoctorLibraryTest, ALocalDirectoryHasEveryPropertyOkAndTheScratchDirectoryIsGone) {
  std::vector<doctor_finding> seen;
  doctor_options o;
  o.on_finding = [&](const doctor_finding& f) { seen.push_back(f); };
  std::error_code ec;
  const doctor_report r = check_directory_health(dir, o, ec);
  ASSERT_FALSE(ec) << tokenlock::last_error_message();
  auto expected = local_properties;
  expected.push_back("another mount");
  ASSERT_EQ(properties(r.findings), expected);
  for (const auto& f : r.findings) {
    const auto want = f.property == "another mount" ? doctor_verdict::skip : doctor_verdict::ok;
    EXPECT_EQ(f.verdict, want) << f.property << ": " << f.text;
    EXPECT_FALSE(f.text.empty()) << f.property;
    EXPECT_TRUE(f.fix.empty()) << f.property << ": " << f.fix;
  }
  EXPECT_NE(r.findings[10].text.find("not needed on " + r.filesystem), std::string::npos)
      << "a local filesystem needs no owner marks: " << r.findings[10].text;
  EXPECT_EQ(r.failed(), 0);
  EXPECT_FALSE(r.filesystem.empty()) << "the type of a local filesystem is known";
  EXPECT_EQ(r.scratch.rfind(dir + "/.tokenlock-doctor.", 0), 0u) << r.scratch;
  EXPECT_EQ(properties(seen), expected) << "each finding is handed out as it is made";
  EXPECT_TRUE(entries(dir).empty()) << "the scratch directory is removed";
}

TEST_F(DoctorLibraryTest, APeerThatIsASecondPathToTheDirectorySeesEveryChangeAtOnce) {
  const fs::path alias = tmp / "alias";
  fs::create_directory_symlink(dir, alias);
  doctor_options o;
  o.peer = alias.string();
  const doctor_report r = check_directory_health(dir, o);
  auto expected = local_properties;
  expected.insert(expected.end(), peer_properties.begin(), peer_properties.end());
  ASSERT_EQ(properties(r.findings), expected);
  for (const auto& f : r.findings) EXPECT_EQ(f.verdict, doctor_verdict::ok) << f.property;
  EXPECT_NE(r.findings[12].text.find("on the same mount as DIR"), std::string::npos);
  EXPECT_TRUE(entries(dir).empty());
}

TEST_F(DoctorLibraryTest, AMissingDirectoryOrAFileIsRefusedAndNothingIsMade) {
  const std::string missing = (tmp / "missing").string();
  const auto before = snapshot(tmp.path());
  std::error_code ec;
  doctor_report r = check_directory_health(missing, {}, ec);
  EXPECT_EQ(ec, std::errc::no_such_file_or_directory);
  EXPECT_NE(tokenlock::last_error_message().find("DIR " + missing + " does not exist"),
            std::string::npos)
      << tokenlock::last_error_message();
  EXPECT_TRUE(r.findings.empty());
  const std::string file = (tmp / "file").string();
  tokenlock::testing::spit(file, "x");
  r = check_directory_health(file, {}, ec);
  EXPECT_EQ(ec, std::errc::not_a_directory);
  EXPECT_NE(tokenlock::last_error_message().find("is not a directory"), std::string::npos);
  doctor_options o;
  o.peer = missing;
  r = check_directory_health(dir, o, ec);
  EXPECT_EQ(ec, std::errc::no_such_file_or_directory);
  EXPECT_NE(tokenlock::last_error_message().find("--peer " + missing + " does not exist"),
            std::string::npos);
  EXPECT_TRUE(entries(dir).empty()) << "nothing was made";
  fs::remove(file);
  EXPECT_EQ(snapshot(tmp.path()), before);
  try {
    check_directory_health(missing);
    ADD_FAILURE() << "the throwing form did not throw";
  } catch (const tokenlock::lock_error& e) {
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory);
  }
}

TEST_F(DoctorLibraryTest, APeerThatDoesNotShowTheScratchDirectoryIsABadArgumentAfterTheLocalChecks) {
  const std::string elsewhere = (tmp / "elsewhere").string();
  fs::create_directories(elsewhere);
  doctor_options o;
  o.peer = elsewhere;
  o.peer_wait = 200ms;
  std::error_code ec;
  const doctor_report r = check_directory_health(dir, o, ec);
  EXPECT_EQ(ec, tokenlock::errc::bad_argument);
  const std::string& m = tokenlock::last_error_message();
  EXPECT_NE(m.find("--peer " + elsewhere + " does not show " + dir + "'s scratch directory"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("after 0.2 s"), std::string::npos) << m;
  EXPECT_NE(m.find("lookupcache=none"), std::string::npos) << "the cache settings: " << m;
  EXPECT_EQ(properties(r.findings), local_properties) << "what was checked is still reported";
  EXPECT_TRUE(entries(dir).empty());
  EXPECT_TRUE(entries(elsewhere).empty());
}

TEST_F(DoctorLibraryTest, AStopEndsTheChecksAndStillRemovesTheScratchDirectory) {
  doctor_options o;
  int found = 0;
  o.on_finding = [&](const doctor_finding&) { ++found; };
  o.stop = [&] { return found >= 3; };
  std::error_code ec;
  const doctor_report r = check_directory_health(dir, o, ec);
  EXPECT_FALSE(ec) << tokenlock::last_error_message();
  ASSERT_EQ(r.findings.size(), 3u);
  EXPECT_EQ(r.findings[2].property, local_properties[2]);
  EXPECT_TRUE(entries(dir).empty());
}

TEST_F(DoctorLibraryTest, ACallbackThatThrowsLeavesNoScratchDirectoryBehind) {
  doctor_options o;
  o.on_finding = [](const doctor_finding& f) {
    if (f.property == "token names") throw std::runtime_error("display failed");
  };
  EXPECT_THROW(check_directory_health(dir, o), std::runtime_error);
  EXPECT_TRUE(entries(dir).empty());
  std::error_code ec;
  check_directory_health(dir, o, ec);
  EXPECT_TRUE(ec) << "the error_code form reports it";
  EXPECT_NE(tokenlock::last_error_message().find("display failed"), std::string::npos);
  EXPECT_TRUE(entries(dir).empty());
}

TEST(DoctorVerdicts, HaveTheNamesOfTheJsonOutput) {
  EXPECT_STREQ(tokenlock::doctor_verdict_name(doctor_verdict::ok), "ok");
  EXPECT_STREQ(tokenlock::doctor_verdict_name(doctor_verdict::warn), "warn");
  EXPECT_STREQ(tokenlock::doctor_verdict_name(doctor_verdict::fail), "fail");
  EXPECT_STREQ(tokenlock::doctor_verdict_name(doctor_verdict::skip), "skip");
  doctor_report r;
  r.findings = {{doctor_verdict::fail, "a", "x", "y"}, {doctor_verdict::warn, "b", "x", ""},
                {doctor_verdict::fail, "c", "x", "y"}};
  EXPECT_EQ(r.failed(), 2);
}

TEST(ClockJudgement, SaysPlainlyWhatAnOffsetMeansForLeases) {
  using tokenlock::clock_offset;
  using tokenlock::clock_verdict;
  using tokenlock::judge_clock_offset;
  auto j = judge_clock_offset(clock_offset{2ms, 5ms, 100us, 10ms}, 1s);
  EXPECT_EQ(j.verdict, clock_verdict::within);
  EXPECT_EQ(j.text,
            "this host's clock agrees with the file server's within +/- 0.005 s, inside the skew "
            "allowance of 1 s");
  EXPECT_TRUE(j.fix.empty());
  j = judge_clock_offset(clock_offset{3200ms, 5ms, 100us, 10ms}, 1s);
  EXPECT_EQ(j.verdict, clock_verdict::beyond);
  EXPECT_EQ(j.text,
            "this host's clock is 3.2 s behind the file server's (+/- 0.005 s), more than the "
            "skew allowance of 1 s: leases written by other hosts cannot be judged safely");
  EXPECT_NE(j.fix.find("chrony"), std::string::npos) << j.fix;
  j = judge_clock_offset(clock_offset{-1500ms, 5ms, 100us, 10ms}, 1s);
  EXPECT_NE(j.text.find("1.5 s ahead of the file server's"), std::string::npos) << j.text;
  j = judge_clock_offset(clock_offset{1200ms, 500ms, 100us, 1s}, 1s);
  EXPECT_EQ(j.verdict, clock_verdict::unclear);
  EXPECT_NE(j.text.find("stamps whole seconds"), std::string::npos) << j.text;
  EXPECT_FALSE(j.fix.empty());
}

TEST(ClockJudgement, WordsADurationToTheMillisecondWithoutTrailingZeros) {
  using tokenlock::seconds_text;
  EXPECT_EQ(seconds_text(1s), "1 s");
  EXPECT_EQ(seconds_text(250ms), "0.25 s");
  EXPECT_EQ(seconds_text(4499us), "0.004 s");
  EXPECT_EQ(seconds_text(4500us), "0.005 s");
  EXPECT_EQ(seconds_text(86400s), "86400 s");
  EXPECT_EQ(seconds_text(-1500ms), "-1.5 s");
  EXPECT_EQ(seconds_text(-400us), "0 s") << "no sign on what rounds to zero";
}

TEST(ErrnoAdvice, OneErrnoHasOneNameAndAFixPerContext) {
  using tokenlock::detail::errno_context;
  using tokenlock::detail::errno_fix;
  const auto eacces = std::make_error_code(std::errc::permission_denied);
  EXPECT_STREQ(tokenlock::detail::errno_name(eacces), "EACCES");
  EXPECT_EQ(tokenlock::detail::errno_cause(eacces), "EACCES (" + eacces.message() + ")");
  EXPECT_EQ(errno_fix(eacces, errno_context::lock_directory, "/l", "1000"),
            "the user (uid 1000) needs write and search permission on /l and search permission "
            "on its parents: for a lock shared by several users, give them a common group and a "
            "lock directory of mode 0775 (lock_options::dir_mode)");
  EXPECT_EQ(errno_fix(eacces, errno_context::clock_probe, "/d"),
            "the user needs write and search permission on /d (or measure in another directory "
            "of the same filesystem)");
  EXPECT_NE(errno_fix(eacces, errno_context::doctor).find("needs write permission on DIR"),
            std::string::npos);
  EXPECT_NE(errno_fix(eacces, errno_context::write_file).find("target's directory"),
            std::string::npos);
  const auto efbig = std::error_code(EFBIG, std::system_category());
  EXPECT_EQ(errno_fix(efbig, errno_context::doctor), "raise the file size limit (ulimit -f)");
  EXPECT_EQ(errno_fix(efbig, errno_context::lock_directory), "") << "no advice: none given";
  const auto exdev = std::make_error_code(std::errc::cross_device_link);
  EXPECT_EQ(errno_fix(exdev, errno_context::doctor),
            "doctor makes the calls tokenlock makes, so tokenlock fails here alike");
  const auto unknown = std::error_code(EOWNERDEAD, std::generic_category());
  EXPECT_EQ(tokenlock::detail::errno_name(unknown), nullptr);
  EXPECT_EQ(tokenlock::detail::errno_cause(unknown).rfind("errno " + std::to_string(EOWNERDEAD), 0),
            0u);
  // tokenlock's own codes are no errno, whatever their value.
  const auto lock_corrupt = make_error_code(tokenlock::errc::lock_corrupt);
  EXPECT_EQ(tokenlock::detail::errno_name(lock_corrupt), nullptr);
  EXPECT_EQ(errno_fix(lock_corrupt, errno_context::write_file), "");
}

TEST(NetworkFilesystemAdvice, NamesTheSettingsOfTheFilesystemInHandOrOfAll) {
  using tokenlock::detail::cache_fix;
  EXPECT_EQ(cache_fix("nfs4", true), "NFS: mount with lookupcache=none (or actimeo=0)");
  EXPECT_NE(cache_fix("fuse.sshfs", false).find("dir_cache=no"), std::string::npos);
  EXPECT_EQ(cache_fix("fuse.sshfs", false).find("gluster"), std::string::npos);
  EXPECT_NE(cache_fix("fuse.glusterfs", true).find("entry-timeout=0"), std::string::npos);
  EXPECT_EQ(cache_fix("fuse.glusterfs", false).find("entry-timeout=0"), std::string::npos);
  const std::string all = cache_fix("", false);
  for (const char* s : {"lookupcache=none", "dir_cache=no", "performance.stat-prefetch off"})
    EXPECT_NE(all.find(s), std::string::npos) << s;
}

}  // namespace
