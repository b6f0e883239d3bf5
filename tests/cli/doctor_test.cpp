// `tokenlock doctor`, driven as users drive it: the real binary on real
// directories, a second path to the same directory as the peer, a file
// size limit that makes writes fail, and a real signal.
#include <gtest/gtest.h>

#include <csignal>

#include <sys/wait.h>
#include <unistd.h>

#include <boost/filesystem.hpp>

#include "child.hpp"
#include "cli.hpp"
#include "inspect.hpp"
#include "doctor_properties.hpp"
#include "temp_dir.hpp"

namespace fs = boost::filesystem;
using tokenlock::testing::child;
using tokenlock::testing::command_result;
using tokenlock::testing::entries;
using tokenlock::testing::lines_of;
using tokenlock::testing::run_command;
using tokenlock::testing::temp_dir;
namespace code = tokenlock::cli::exit_code;

namespace {

const std::string tool = TOKENLOCK_CLI_PATH;

using tokenlock::testing::local_properties;
using tokenlock::testing::peer_properties;

struct line {
  std::string verdict, property, detail, fix;
};

class DoctorTest : public ::testing::Test {
 protected:
  temp_dir tmp;
  std::string dir = (tmp / "share").string();

  void SetUp() override { fs::create_directories(dir); }

  command_result doctor(std::vector<std::string> args) {
    args.insert(args.begin(), {tool, "doctor"});
    return run_command(args);
  }
  // "<verdict>  <property>: <detail>[; fix: <fix>]", or a test failure.
  // (Parsed by hand: GCC 12 warns inside std::regex under ASan.)
  static std::vector<line> parse(const std::string& out) {
    std::vector<line> lines;
    for (const auto& text : lines_of(out)) {
      const std::size_t verdict_end = text.find(' ');
      const std::size_t property_at = text.find_first_not_of(' ', verdict_end);
      const std::size_t colon = text.find(": ", property_at == std::string::npos ? 0 : property_at);
      const std::string verdict = text.substr(0, verdict_end);
      if (verdict_end == std::string::npos || property_at == std::string::npos ||
          colon == std::string::npos ||
          (verdict != "ok" && verdict != "FAIL" && verdict != "warn" && verdict != "skip")) {
        ADD_FAILURE() << "not a doctor line: " << text;
        continue;
      }
      const std::string property = text.substr(property_at, colon - property_at);
      if (property.empty() || property.find_first_not_of("abcdefghijklmnopqrstuvwxyz -") !=
                                  std::string::npos || property[0] == ' ' || property[0] == '-') {
        ADD_FAILURE() << "not a property name in: " << text;
        continue;
      }
      EXPECT_EQ(property_at, 6u) << "the verdict is padded to one column: " << text;
      std::string detail = text.substr(colon + 2), fix;
      const std::size_t fix_at = detail.find("; fix: ");
      if (fix_at != std::string::npos) {
        fix = detail.substr(fix_at + 7);
        detail.erase(fix_at);
      }
      if (detail.empty()) ADD_FAILURE() << "no detail in: " << text;
      lines.push_back({verdict, property, detail, fix});
    }
    return lines;
  }
  static std::vector<std::string> properties(const std::vector<line>& lines) {
    std::vector<std::string> out;
    for (const auto& l : lines) out.push_back(l.property);
    return out;
  }
};

TEST_F(DoctorTest, FindsALocalDirectoryHealthyAndLeavesNothingBehind) {
  auto r = doctor({dir});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto lines = parse(r.out);
  for (const auto& l : lines) {
    if (l.property == "owner marks") {
      EXPECT_NE(l.detail.find("not needed on"), std::string::npos) << l.detail;
    }
  }
  auto expected = local_properties;
  expected.push_back("another mount");
  EXPECT_EQ(properties(lines), expected) << r.out;
  for (const auto& l : lines) {
    if (l.property == "another mount") {
      EXPECT_EQ(l.verdict, "skip");
      continue;
    }
    EXPECT_EQ(l.verdict, "ok") << l.property << ": " << l.detail;
    EXPECT_TRUE(l.fix.empty()) << l.property;
  }
  EXPECT_TRUE(entries(dir).empty()) << "the scratch directory is removed";
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST_F(DoctorTest, APeerThatIsASecondPathToTheSameDirectorySeesEverythingAtOnce) {
  const fs::path alias = tmp / "alias";
  fs::create_directory_symlink(dir, alias);
  auto r = doctor({"--peer", alias.string(), dir});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto lines = parse(r.out);
  auto expected = local_properties;
  expected.insert(expected.end(), peer_properties.begin(), peer_properties.end());
  ASSERT_EQ(properties(lines), expected) << r.out;
  for (std::size_t i = local_properties.size(); i < lines.size(); ++i)
    EXPECT_EQ(lines[i].verdict, "ok") << lines[i].property << ": " << lines[i].detail;
  EXPECT_NE(lines[local_properties.size()].detail.find("on the same mount as DIR"),
            std::string::npos)
      << lines[local_properties.size()].detail;
  EXPECT_NE(lines.back().detail.find("at once"), std::string::npos) << lines.back().detail;
  EXPECT_TRUE(entries(dir).empty());
}

TEST_F(DoctorTest, APeerThatDoesNotShowTheScratchDirectoryIsAUsageError) {
  const std::string elsewhere = (tmp / "elsewhere").string();
  fs::create_directories(elsewhere);
  auto r = doctor({"--peer", elsewhere, "--peer-wait", "0.2", dir});
  EXPECT_EQ(r.exit_code, code::usage) << r.out << r.err;
  EXPECT_NE(r.err.find("--peer " + elsewhere + " does not show " + dir +
                       "'s scratch directory .tokenlock-doctor."),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("after 0.2 s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mounted elsewhere"), std::string::npos) << r.err;
  EXPECT_EQ(properties(parse(r.out)), local_properties) << "what was checked is still said";
  EXPECT_TRUE(entries(dir).empty());
  EXPECT_TRUE(entries(elsewhere).empty());
}

TEST_F(DoctorTest, ADirectoryThatIsMissingOrAFileIsNamedWithExit66) {
  const std::string missing = (tmp / "missing").string();
  auto r = doctor({missing});
  EXPECT_EQ(r.exit_code, code::no_input);
  EXPECT_NE(r.err.find("DIR " + missing + " does not exist"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  const std::string file = (tmp / "file").string();
  tokenlock::testing::spit(file, "x");
  r = doctor({file});
  EXPECT_EQ(r.exit_code, code::no_input);
  EXPECT_NE(r.err.find("DIR " + file + " is not a directory"), std::string::npos) << r.err;
  r = doctor({"--peer", missing, dir});
  EXPECT_EQ(r.exit_code, code::no_input);
  EXPECT_NE(r.err.find("--peer " + missing + " does not exist"), std::string::npos) << r.err;
  EXPECT_TRUE(entries(dir).empty()) << "nothing was made";
}

TEST_F(DoctorTest, ADirectoryItCannotWriteInIsAPermissionErrorNamingTheScratchDirectory) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as another user";
  fs::permissions(tmp.path(), fs::perms(0755));
  fs::permissions(dir, fs::perms(0755));
  auto r = run_command({tool, "doctor", dir}, {}, 65534);
  EXPECT_EQ(r.exit_code, code::no_perm) << r.err;
  EXPECT_NE(r.err.find("cannot create the scratch directory " + dir + "/.tokenlock-doctor."),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("EACCES"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("needs write permission on DIR"), std::string::npos) << r.err;
}

TEST_F(DoctorTest, PropertiesThatFailSayHowToFixThemAndExit1) {
  // No file may grow beyond 0 bytes (SIGXFSZ ignored, so write(2) fails
  // with EFBIG): renames still work, writes do not.
  auto r = run_command({"/bin/sh", "-c",
                        "trap '' XFSZ; ulimit -f 0; exec '" + tool + "' doctor '" + dir + "'"});
  EXPECT_EQ(r.exit_code, code::check_failed) << r.out << r.err;
  const auto lines = parse(r.out);
  EXPECT_EQ(properties(lines).size(), local_properties.size() + 1) << r.out;
  int failed = 0;
  for (const auto& l : lines) {
    if (l.verdict != "FAIL") continue;
    ++failed;
    EXPECT_NE(l.detail.find("File too large"), std::string::npos) << l.property << ": " << l.detail;
    EXPECT_NE(l.fix.find("ulimit -f"), std::string::npos) << l.property << ": " << l.fix;
  }
  EXPECT_GE(failed, 3) << r.out;
  for (const auto& l : lines) {
    if (l.property == "rename of a vanished name" || l.property == "exclusive create") {
      EXPECT_EQ(l.verdict, "ok") << "checks that write nothing still pass: " << l.detail;
    }
  }
  EXPECT_TRUE(entries(dir).empty()) << "the scratch directory is removed after failures too";
}

TEST_F(DoctorTest, JsonHasOneEntryPerPropertyAndTheSameVerdicts) {
  auto r = doctor({"--json", dir});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 1u) << r.out;
  const std::string& j = lines[0];
  EXPECT_EQ(j.rfind("{\"dir\":\"" + dir + "\",\"peer\":null,\"filesystem\":", 0), 0u) << j;
  std::size_t entries_seen = 0;
  for (std::size_t at = 0; (at = j.find("{\"property\":", at)) != std::string::npos; ++at)
    ++entries_seen;
  EXPECT_EQ(entries_seen, local_properties.size() + 1) << j;
  for (const auto& p : local_properties)
    EXPECT_NE(j.find("{\"property\":\"" + p + "\",\"verdict\":\"ok\""), std::string::npos)
        << p << " in " << j;
  EXPECT_NE(j.find("\"failed\":0}"), std::string::npos) << j;
  EXPECT_TRUE(entries(dir).empty());
}

TEST_F(DoctorTest, ASignalWhileItWaitsForThePeerStillRemovesTheScratchDirectory) {
  const std::string elsewhere = (tmp / "elsewhere").string();
  fs::create_directories(elsewhere);
  child c({tool, "doctor", "--peer", elsewhere, "--peer-wait", "120", dir});
  // The clock line is the last local one; then doctor waits for the peer.
  for (;;) {
    const std::string text = c.read_line();
    if (text.find("clock offset: ") != std::string::npos) break;
  }
  c.signal(SIGTERM);
  const int status = c.wait();
  ASSERT_TRUE(WIFSIGNALED(status)) << "ends by the signal, status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_TRUE(entries(dir).empty()) << "the scratch directory is removed";
}

}  // namespace
