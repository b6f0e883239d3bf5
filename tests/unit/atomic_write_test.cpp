// Atomic writes over the OS seam: every step failing with every errno the
// issue names leaves the target byte for byte as it was and no temporary
// file; modes, owners, symlinks, streams, reading and sweeping.
#include <gtest/gtest.h>

#include <cerrno>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/filesystem.hpp>
#include <boost/filesystem/fstream.hpp>

#include <sys/sysmacros.h>

#include "with_os.hpp"
#include "fake_os.hpp"
#include "inspect.hpp"
#include "files/file_writer.hpp"
#include "files/atomic_write_impl.hpp"
#include "temp_dir.hpp"
#include "tokenlock/tokenlock.hpp"
#include "files/update_impl.hpp"

namespace fs = boost::filesystem;
using namespace std::chrono_literals;
using tokenlock::durability;
using tokenlock::errc;
using tokenlock::write_options;
using tokenlock::testing::fake_os;
using tokenlock::testing::op;
using tokenlock::testing::fake_world;
using tokenlock::testing::snapshot;
using tokenlock::testing::temp_dir;

namespace {

using tokenlock::testing::slurp;
using tokenlock::testing::spit;

unsigned mode_of(const fs::path& p) {
  struct stat st {};
  ::lstat(p.c_str(), &st);
  return st.st_mode & 07777;
}

struct stat lstat_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st;
}

// Another user, for links and files a test gives away (nobody).
constexpr unsigned other_uid = 65534;

// A directory like /tmp: sticky and writable by all, owned by `owner`.
fs::path sticky_dir(const fs::path& p, unsigned owner) {
  fs::create_directories(p);
  EXPECT_EQ(::chown(p.c_str(), owner, owner), 0) << p;
  EXPECT_EQ(::chmod(p.c_str(), 01777), 0) << p;
  return p;
}

// A symbolic link at `link` to `to`, owned by `owner`.
void link_owned_by(const fs::path& to, const fs::path& link, unsigned owner) {
  fs::create_symlink(to, link);
  ASSERT_EQ(::lchown(link.c_str(), owner, owner), 0) << link;
}

class AtomicWriteTest : public ::testing::Test {
 protected:
  temp_dir tmp;
  fs::path target = tmp / "data.txt";
  std::shared_ptr<fake_world> world = std::make_shared<fake_world>();
  std::shared_ptr<fake_os> sys = std::make_shared<fake_os>(world, 100, 1);

  std::vector<std::string> temp_files(const fs::path& dir) const {
    std::vector<std::string> out;
    for (auto& e : fs::directory_iterator(dir))
      if (tokenlock::detail::is_temp_name(e.path().filename().string()))
        out.push_back(e.path().string());
    return out;
  }
  tokenlock::detail::failure write_with_fake(const std::string& data, write_options o = {}) {
    return tokenlock::detail::atomic_write_impl(*sys, target, data, o);
  }
};

TEST_F(AtomicWriteTest, ReplacesTheContentsAndLeavesNoTemporaryFile) {
  spit(target, "old");
  tokenlock::atomic_write(target, "new contents");
  EXPECT_EQ(slurp(target), "new contents");
  EXPECT_TRUE(temp_files(tmp.path()).empty());
  tokenlock::atomic_write(tmp / "fresh", "");
  EXPECT_TRUE(fs::exists(tmp / "fresh"));
  EXPECT_EQ(fs::file_size(tmp / "fresh"), 0u);
}

TEST_F(AtomicWriteTest, GivesANewFile0644MinusTheUmask) {
  mode_t old = ::umask(027);
  tokenlock::atomic_write(target, "x");
  ::umask(old);
  EXPECT_EQ(mode_of(target), 0640u);
}

TEST_F(AtomicWriteTest, KeepsTheModeOfTheFileItReplaces) {
  spit(target, "old");
  fs::permissions(target, fs::perms(0600));
  mode_t old = ::umask(022);
  tokenlock::atomic_write(target, "new");
  ::umask(old);
  EXPECT_EQ(mode_of(target), 0600u);
}

TEST_F(AtomicWriteTest, AppliesTheCallersModeExactly) {
  mode_t old = ::umask(077);
  write_options o;
  o.mode = 0664;
  tokenlock::atomic_write(target, "x", o);
  ::umask(old);
  EXPECT_EQ(mode_of(target), 0664u);
}

TEST_F(AtomicWriteTest, TheCallersModeWinsOverTheModeOfTheFileItReplaces) {
  spit(target, "old");
  fs::permissions(target, fs::perms(0644));
  write_options o;
  o.mode = 0600;
  tokenlock::atomic_write(target, "new", o);
  EXPECT_EQ(mode_of(target), 0600u) << "an explicit mode always wins";
  EXPECT_EQ(slurp(target), "new");
  EXPECT_TRUE(temp_files(tmp.path()).empty());
}

TEST_F(AtomicWriteTest, NeverCopiesSetuidSetgidOrStickyFromTheFileItReplaces) {
  spit(target, "#!/bin/sh\n");
  ASSERT_EQ(::chmod(target.c_str(), 07755), 0);
  ASSERT_EQ(mode_of(target) & 06000, 06000u) << "the set-up needs the bits set";
  tokenlock::atomic_write(target, "new");
  EXPECT_EQ(mode_of(target), 0755u) << "the permission bits only";
  EXPECT_EQ(slurp(target), "new");
  EXPECT_TRUE(temp_files(tmp.path()).empty());
}

TEST_F(AtomicWriteTest, KeepsTheOwnerWhenRunningAsRoot) {
  if (::geteuid() != 0) GTEST_SKIP() << "only root can give a file away";
  spit(target, "old");
  ASSERT_EQ(::chown(target.c_str(), 33, 44), 0);
  tokenlock::atomic_write(target, "new");
  struct stat st {};
  ::stat(target.c_str(), &st);
  EXPECT_EQ(st.st_uid, 33u);
  EXPECT_EQ(st.st_gid, 44u);
}

TEST_F(AtomicWriteTest, ReplacesASymlinkByDefaultAndWritesNothingOutsideItsDirectory) {
  fs::create_directories(tmp / "a");
  fs::create_directories(tmp / "b");
  spit(tmp / "b" / "real", "outside");
  fs::permissions(tmp / "b" / "real", fs::perms(0600));
  fs::create_symlink("../b/real", tmp / "a" / "link");
  auto outside = snapshot(tmp / "b");
  mode_t old = ::umask(022);
  tokenlock::atomic_write(tmp / "a" / "link", "inside");
  ::umask(old);
  EXPECT_FALSE(fs::is_symlink(tmp / "a" / "link"));
  EXPECT_EQ(slurp(tmp / "a" / "link"), "inside");
  EXPECT_EQ(mode_of(tmp / "a" / "link"), 0644u) << "a new file's, not what the link pointed to's";
  EXPECT_EQ(slurp(tmp / "b" / "real"), "outside");
  EXPECT_EQ(snapshot(tmp / "b"), outside);
  EXPECT_TRUE(temp_files(tmp / "a").empty());
}

TEST_F(AtomicWriteTest, WritesThroughAChainOfSymlinksWhenAsked) {
  fs::create_directories(tmp / "a");
  fs::create_directories(tmp / "b");
  spit(tmp / "b" / "real", "old");
  fs::create_symlink("../b/real", tmp / "a" / "hop");
  fs::create_symlink("hop", tmp / "a" / "link");
  write_options o;
  o.symlinks = tokenlock::symlink_policy::follow;
  tokenlock::atomic_write(tmp / "a" / "link", "through", o);
  EXPECT_TRUE(fs::is_symlink(tmp / "a" / "link"));
  EXPECT_EQ(slurp(tmp / "b" / "real"), "through");
  EXPECT_TRUE(temp_files(tmp / "a").empty());
  EXPECT_TRUE(temp_files(tmp / "b").empty());
}

TEST_F(AtomicWriteTest, RefusesASymlinkLoopWhenFollowing) {
  fs::create_symlink("l2", tmp / "l1");
  fs::create_symlink("l1", tmp / "l2");
  write_options o;
  o.symlinks = tokenlock::symlink_policy::follow;
  std::error_code ec;
  tokenlock::atomic_write(tmp / "l1", "x", o, ec);
  EXPECT_EQ(ec, std::errc::too_many_symbolic_link_levels);
}

TEST_F(AtomicWriteTest, ReportsADirectoryTargetAMissingDirectoryAndBadPaths) {
  fs::create_directories(tmp / "dir");
  auto before = snapshot(tmp.path());
  std::error_code ec;
  tokenlock::atomic_write(tmp / "dir", "x", {}, ec);
  EXPECT_EQ(ec, std::errc::is_a_directory);
  EXPECT_NE(tokenlock::last_error_message().find("is a directory"), std::string::npos);
  tokenlock::atomic_write(tmp / "missing" / "f", "x", {}, ec);
  EXPECT_EQ(ec, std::errc::no_such_file_or_directory);
  EXPECT_NE(tokenlock::last_error_message().find("does not exist"), std::string::npos)
      << tokenlock::last_error_message();
  tokenlock::atomic_write("", "x", {}, ec);
  EXPECT_EQ(ec, errc::bad_argument);
  tokenlock::atomic_write(tmp / "dir/", "x", {}, ec);
  EXPECT_EQ(ec, errc::bad_argument);
  EXPECT_EQ(snapshot(tmp.path()), before);
}

TEST_F(AtomicWriteTest, ContinuesShortWrites) {
  spit(target, "old");
  sys->short_writes(".tmp.", 7);
  std::string big(100000, 'x');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
  ASSERT_FALSE(write_with_fake(big));
  EXPECT_EQ(slurp(target), big);
  int writes = 0;
  for (auto& c : sys->calls) writes += c.rfind("write ", 0) == 0;
  EXPECT_GT(writes, 10000);
}

TEST_F(AtomicWriteTest, SyncsAsMuchAsTheDurabilityLevelSays) {
  for (auto level : {durability::none, durability::file, durability::file_and_dir}) {
    sys->calls.clear();
    write_options o;
    o.sync = level;
    ASSERT_FALSE(write_with_fake("x", o));
    int file_syncs = 0, dir_syncs = 0;
    for (auto& c : sys->calls) {
      file_syncs += c.rfind("sync_file", 0) == 0;
      dir_syncs += c.rfind("sync_directory", 0) == 0;
    }
    EXPECT_EQ(file_syncs, level == durability::none ? 0 : 1);
    EXPECT_EQ(dir_syncs, level == durability::file_and_dir ? 1 : 0);
  }
}

// ---- symbolic links and other users' files --------------------------------

TEST_F(AtomicWriteTest, ReplacingAnotherUsersSymlinkGivesTheCallerAFileWithTheCallersMode) {
  if (::geteuid() != 0) GTEST_SKIP() << "only root can make a link owned by another user";
  const fs::path shared = sticky_dir(tmp / "shared", 0);
  fs::create_directories(tmp / "theirs");
  const fs::path dest = tmp / "theirs" / "file";
  spit(dest, "theirs\n");
  ASSERT_EQ(::chown(dest.c_str(), other_uid, other_uid), 0);
  ASSERT_EQ(::chmod(dest.c_str(), 0666), 0);
  const fs::path link = shared / "out";
  link_owned_by(dest, link, other_uid);
  write_options o;
  o.mode = 0600;
  tokenlock::atomic_write(link, "root's secret\n", o);
  struct stat st = lstat_of(link);
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "the link is replaced by a file";
  EXPECT_EQ(st.st_mode & 07777, 0600u) << "--mode is not ignored";
  EXPECT_EQ(st.st_uid, 0u) << "not given to the link target's owner";
  EXPECT_EQ(st.st_gid, 0u);
  EXPECT_EQ(slurp(link), "root's secret\n");
  EXPECT_EQ(slurp(dest), "theirs\n");
  EXPECT_EQ(lstat_of(dest).st_uid, other_uid);

  // Without a mode: a new file's, 0644 minus the umask, still the caller's.
  fs::remove(link);
  link_owned_by(dest, link, other_uid);
  mode_t old = ::umask(027);
  tokenlock::atomic_write(link, "again\n");
  ::umask(old);
  st = lstat_of(link);
  EXPECT_EQ(st.st_mode & 07777, 0640u) << "not the 0666 of what the link pointed to";
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(slurp(dest), "theirs\n");
  EXPECT_TRUE(temp_files(shared).empty());
}

TEST_F(AtomicWriteTest, ReplacingASymlinkToASetuidProgramMakesNoSetuidFile) {
  const fs::path prog = tmp / "prog";
  spit(prog, "#!/bin/sh\n");
  ASSERT_EQ(::chmod(prog.c_str(), 04755), 0);
  ASSERT_EQ(mode_of(prog), 04755u) << "the set-up needs the setuid bit";
  const fs::path link = tmp / "out";
  fs::create_symlink(prog, link);
  mode_t old = ::umask(022);
  tokenlock::atomic_write(link, "new\n");
  ::umask(old);
  EXPECT_EQ(mode_of(link), 0644u) << "neither setuid nor the program's execute bits";
  EXPECT_EQ(slurp(link), "new\n");
  EXPECT_EQ(mode_of(prog), 04755u);
  EXPECT_EQ(slurp(prog), "#!/bin/sh\n");
  EXPECT_TRUE(temp_files(tmp.path()).empty());
}

TEST_F(AtomicWriteTest, TheCallersModeWinsWhenFollowingALink) {
  const fs::path dest = tmp / "dest";
  spit(dest, "old\n");
  ASSERT_EQ(::chmod(dest.c_str(), 06755), 0);
  fs::create_symlink("dest", tmp / "link");
  write_options o;
  o.symlinks = tokenlock::symlink_policy::follow;
  o.mode = 0600;
  tokenlock::atomic_write(tmp / "link", "new\n", o);
  EXPECT_TRUE(fs::is_symlink(tmp / "link"));
  EXPECT_EQ(slurp(dest), "new\n");
  EXPECT_EQ(mode_of(dest), 0600u);
  o.mode.reset();
  ASSERT_EQ(::chmod(dest.c_str(), 06755), 0);
  tokenlock::atomic_write(tmp / "link", "newer\n", o);
  EXPECT_EQ(mode_of(dest), 0755u) << "the followed file's bits, without setuid and setgid";
  EXPECT_TRUE(temp_files(tmp.path()).empty());
}

TEST_F(AtomicWriteTest, FollowingRefusesAnotherUsersLinkInAStickyDirectoryWritableByAll) {
  if (::geteuid() != 0) GTEST_SKIP() << "only root can make a link owned by another user";
  const fs::path shared = sticky_dir(tmp / "shared", 0);
  const fs::path dest = tmp / "dest";
  spit(dest, "keep\n");
  const fs::path link = shared / "planted";
  link_owned_by(dest, link, other_uid);
  const auto before = snapshot(tmp.path());
  write_options o;
  o.symlinks = tokenlock::symlink_policy::follow;
  std::error_code ec;
  tokenlock::atomic_write(link, "root's\n", o, ec);
  EXPECT_EQ(ec, errc::untrusted);
  const std::string m = tokenlock::last_error_message();
  EXPECT_NE(m.find("refusing"), std::string::npos) << m;
  EXPECT_NE(m.find(link.string()), std::string::npos) << m;
  EXPECT_NE(m.find("uid " + std::to_string(other_uid)), std::string::npos) << m;
  EXPECT_NE(m.find("name the file it points to directly"), std::string::npos) << m;
  const std::string fix_end = "made by uid 0";  // the caller and the directory's owner: root
  EXPECT_EQ(m.compare(m.size() - fix_end.size(), fix_end.size(), fix_end), 0) << m;
  EXPECT_EQ(slurp(dest), "keep\n");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(snapshot(tmp.path()), before) << "nothing written, no temporary file";

  // The same over the seam, as an ordinary user: refused before any file
  // is created.
  target = link;
  auto f = write_with_fake("x", o);
  EXPECT_EQ(f.code, errc::untrusted) << f.message;
  for (const auto& c : sys->calls) EXPECT_NE(c.rfind("create_exclusive", 0), 0u) << c;
  EXPECT_EQ(slurp(dest), "keep\n");
  EXPECT_EQ(snapshot(tmp.path()), before);
}

TEST_F(AtomicWriteTest, FollowingAcceptsTheCallersLinksAndTheDirectoryOwnersLinks) {
  if (::geteuid() != 0) GTEST_SKIP() << "only root can give links and directories away";
  write_options o;
  o.symlinks = tokenlock::symlink_policy::follow;
  const fs::path dest = tmp / "dest";
  spit(dest, "old\n");
  // The caller's own link in a sticky directory.
  const fs::path mine = sticky_dir(tmp / "mine", 0) / "link";
  link_owned_by(dest, mine, 0);
  tokenlock::atomic_write(mine, "by the caller's link\n", o);
  EXPECT_EQ(slurp(dest), "by the caller's link\n");
  // The directory owner's link: the owner could replace the directory's
  // entries anyway.
  const fs::path owners = sticky_dir(tmp / "owners", other_uid) / "link";
  link_owned_by(dest, owners, other_uid);
  tokenlock::atomic_write(owners, "by the owner's link\n", o);
  EXPECT_EQ(slurp(dest), "by the owner's link\n");
  // Another user's link where others cannot write, or without the sticky
  // bit (where anyone could replace the link anyway): the rule is the
  // kernel's, for sticky directories writable by all.
  fs::create_directories(tmp / "closed");
  ASSERT_EQ(::chmod((tmp / "closed").c_str(), 01755), 0);
  link_owned_by(dest, tmp / "closed" / "link", other_uid);
  tokenlock::atomic_write(tmp / "closed" / "link", "in a closed directory\n", o);
  EXPECT_EQ(slurp(dest), "in a closed directory\n");
  EXPECT_TRUE(fs::is_symlink(mine));
  EXPECT_TRUE(fs::is_symlink(owners));
  EXPECT_TRUE(tokenlock::testing::temp_files_below(tmp.path()).empty());
}

TEST_F(AtomicWriteTest, FollowingChecksEveryLinkOfAChain) {
  if (::geteuid() != 0) GTEST_SKIP() << "only root can make a link owned by another user";
  const fs::path shared = sticky_dir(tmp / "shared", 0);
  const fs::path dest = tmp / "dest";
  spit(dest, "keep\n");
  link_owned_by(dest, shared / "second", other_uid);
  fs::create_directories(tmp / "a");
  link_owned_by(shared / "second", tmp / "a" / "first", 0);
  const auto before = snapshot(tmp.path());
  write_options o;
  o.symlinks = tokenlock::symlink_policy::follow;
  std::error_code ec;
  tokenlock::atomic_write(tmp / "a" / "first", "x", o, ec);
  EXPECT_EQ(ec, errc::untrusted);
  EXPECT_NE(tokenlock::last_error_message().find((shared / "second").string()), std::string::npos)
      << tokenlock::last_error_message();
  EXPECT_EQ(slurp(dest), "keep\n");
  EXPECT_EQ(snapshot(tmp.path()), before);
}

TEST_F(AtomicWriteTest, FollowingFailsWhenItCannotLookAtTheLinksDirectory) {
  fs::create_directories(tmp / "a");
  spit(tmp / "dest", "keep\n");
  fs::create_symlink("../dest", tmp / "a" / "link");
  const auto before = snapshot(tmp.path());
  sys->fail(op::status_following, (tmp / "a").string(), EIO);
  target = tmp / "a" / "link";
  write_options o;
  o.symlinks = tokenlock::symlink_policy::follow;
  auto f = write_with_fake("x", o);
  EXPECT_EQ(f.code, std::errc::io_error);
  EXPECT_NE(f.message.find("cannot look at the directory"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find(target.string()), std::string::npos) << f.message;
  EXPECT_EQ(slurp(tmp / "dest"), "keep\n");
  EXPECT_EQ(snapshot(tmp.path()), before);
}

// ---- every step, every errno: target intact, no temporary file -------------

struct fault_case {
  op step;            // the fake OS's call that fails
  int skip;           // matching calls let through first
  int err;
  const char* message_step;
};

class AtomicWriteFaultTest : public AtomicWriteTest,
                             public ::testing::WithParamInterface<std::tuple<fault_case, int>> {};

TEST_P(AtomicWriteFaultTest, LeavesTheTargetIntactAndNoTemporaryFile) {
  const fault_case& c = std::get<0>(GetParam());
  const int err = std::get<1>(GetParam());
  const std::string old = "the old contents\n";
  spit(target, old);
  fs::permissions(target, fs::perms(0640));
  auto before = snapshot(tmp.path());
  sys->short_writes(".tmp.", 1000);  // several writes, so the second can fail
  sys->fail_after(c.step, "data.txt", err, c.skip);
  std::string fresh(5000, 'n');
  auto f = write_with_fake(fresh);
  ASSERT_TRUE(f) << "the injected fault must surface";
  EXPECT_EQ(f.code, std::error_code(err, std::generic_category()));
  EXPECT_NE(f.message.find(target.string()), std::string::npos) << f.message;
  EXPECT_NE(f.message.find(std::string("tokenlock: ") + c.message_step), std::string::npos) << f.message;
  EXPECT_EQ(slurp(target), old) << "byte for byte";
  EXPECT_EQ(snapshot(tmp.path()), before) << "no temporary file, mode unchanged";
}

INSTANTIATE_TEST_SUITE_P(
    EveryStep, AtomicWriteFaultTest,
    ::testing::Combine(::testing::Values(fault_case{op::create_exclusive, 0, 0, "create"},
                                         fault_case{op::write, 0, 0, "write"},
                                         fault_case{op::write, 2, 0, "write"},
                                         fault_case{op::sync_file, 0, 0, "sync"},
                                         fault_case{op::close, 0, 0, "close"},
                                         fault_case{op::rename, 0, 0, "rename"}),
                       ::testing::Values(ENOSPC, EIO, EDQUOT)),
    [](const auto& info) {
      const fault_case& c = std::get<0>(info.param);
      std::string name = std::string(tokenlock::testing::op_name(c.step)) + (c.skip ? "_later" : "") + "_";
      int e = std::get<1>(info.param);
      return name + (e == ENOSPC ? "ENOSPC" : e == EIO ? "EIO" : "EDQUOT");
    });

TEST_F(AtomicWriteTest, ADirectorySyncFailureAfterTheRenameIsItsOwnError) {
  spit(target, "old");
  sys->fail(op::sync_directory, tmp.path().string(), EIO);
  auto f = write_with_fake("new");
  EXPECT_EQ(f.code, errc::dir_sync_failed);
  EXPECT_NE(f.message.find("the new contents are in place"), std::string::npos) << f.message;
  EXPECT_EQ(slurp(target), "new");
  EXPECT_TRUE(temp_files(tmp.path()).empty());
}

TEST_F(AtomicWriteTest, NamesTheFixForAPermissionError) {
  spit(target, "old");
  sys->fail(op::create_exclusive, ".tmp.", EACCES);
  auto f = write_with_fake("new");
  EXPECT_EQ(f.code, std::errc::permission_denied);
  EXPECT_NE(f.message.find("write and search permission"), std::string::npos) << f.message;
  EXPECT_EQ(slurp(target), "old");
}

// ---- atomic_file ------------------------------------------------------------

TEST_F(AtomicWriteTest, AtomicFileStreamsAndCommits) {
  spit(target, "old");
  tokenlock::atomic_file f(target);
  EXPECT_TRUE(fs::exists(f.temp_path()));
  EXPECT_EQ(f.temp_path().parent_path(), target.parent_path());
  f.stream() << "line " << 1 << "\n";
  f.write("line 2\n");  // after what went to the stream
  f.stream() << "line 3\n";
  EXPECT_EQ(slurp(target), "old") << "nothing visible before commit";
  f.commit();
  EXPECT_EQ(slurp(target), "line 1\nline 2\nline 3\n");
  EXPECT_TRUE(temp_files(tmp.path()).empty());
  std::error_code ec;
  f.write("more", ec);
  EXPECT_EQ(ec, errc::bad_argument);
  EXPECT_NE(f.stream(ec), nullptr) << "the stream given out stays";
  EXPECT_FALSE(ec);
  tokenlock::atomic_file unused(tmp / "other");
  unused.commit();
  EXPECT_EQ(unused.stream(ec), nullptr) << "no first stream onto a finished file";
  EXPECT_EQ(ec, errc::bad_argument);
  EXPECT_NE(tokenlock::last_error_message().find("already finished"), std::string::npos);
  tokenlock::atomic_file moved_to = std::move(f);
  EXPECT_EQ(f.stream(ec), nullptr) << "moved from";  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(ec, errc::bad_argument);
  EXPECT_THROW(f.stream(), tokenlock::lock_error);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(slurp(target), "line 1\nline 2\nline 3\n");
}

TEST_F(AtomicWriteTest, TheStreamsErrorCodeFormGivesTheSameStream) {
  tokenlock::atomic_file f(target);
  std::error_code ec;
  std::ostream* out = f.stream(ec);
  ASSERT_NE(out, nullptr);
  EXPECT_FALSE(ec);
  EXPECT_EQ(out, &f.stream());
  *out << "via the pointer\n";
  f.commit();
  EXPECT_EQ(slurp(target), "via the pointer\n");
}

TEST_F(AtomicWriteTest, AnAtomicFileThatIsNotCommittedRollsBack) {
  spit(target, "old");
  {
    tokenlock::atomic_file f(target);
    f.write("half a file");
    f.rollback();
    f.rollback();  // idempotent
  }
  {
    tokenlock::atomic_file f(target);
    f.stream() << "abandoned";
  }  // destructor
  EXPECT_EQ(slurp(target), "old");
  EXPECT_TRUE(temp_files(tmp.path()).empty());
}

TEST_F(AtomicWriteTest, AStreamErrorIsReportedByCommit) {
  spit(target, "old");
  tokenlock::atomic_file f = tokenlock::detail::with_os::file(target, {}, sys);
  sys->fail(op::write, ".tmp.", ENOSPC);
  f.stream() << std::string(200000, 'x');  // more than the buffer: a write happens
  EXPECT_TRUE(f.stream().bad());
  std::error_code ec;
  f.commit(ec);
  EXPECT_EQ(ec, std::errc::no_space_on_device);
  EXPECT_EQ(slurp(target), "old");
  EXPECT_TRUE(temp_files(tmp.path()).empty());
}

// ---- read_file, sweep_temp_files -----------------------------------------------

TEST_F(AtomicWriteTest, ReadsWholeFilesAndSaysWhenThereIsNone) {
  EXPECT_FALSE(tokenlock::read_file(target).has_value());
  std::string big(300000, 'q');
  spit(target, big);
  EXPECT_EQ(tokenlock::read_file(target), big);
  std::error_code ec;
  EXPECT_FALSE(tokenlock::read_file(tmp.path(), ec).has_value());
  EXPECT_EQ(ec, std::errc::is_a_directory);
}

// ---- bounded reads of regular files only ------------------------------------

int count_calls(const std::vector<std::string>& calls, const std::string& prefix) {
  int n = 0;
  for (const auto& c : calls) n += c.rfind(prefix, 0) == 0;
  return n;
}

// The FIFO has no writer: a read that waited for one would never return
// (ctest's timeout ends such a run). The refusal must come from fstat.
TEST_F(AtomicWriteTest, ReadFileRefusesAFifoWithoutWaitingForAWriter) {
  const fs::path fifo = tmp / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::error_code ec;
  EXPECT_FALSE(tokenlock::read_file(fifo, ec).has_value());
  EXPECT_EQ(ec, std::errc::invalid_argument);
  const std::string m = tokenlock::last_error_message();
  EXPECT_NE(m.find(fifo.string()), std::string::npos) << m;
  EXPECT_NE(m.find("a FIFO, not a regular file"), std::string::npos) << m;
  EXPECT_NE(m.find("replace it with a regular file"), std::string::npos) << m;
  std::optional<std::string> out;
  auto f = tokenlock::detail::read_file_impl(*sys, fifo.string(), out);
  EXPECT_EQ(f.code, std::errc::invalid_argument);
  EXPECT_EQ(count_calls(sys->calls, "read "), 0) << "refused before any read";
  EXPECT_EQ(sys->open_descriptors(), 0u);
}

TEST_F(AtomicWriteTest, ReadFileRefusesDevZeroDirectlyAndThroughASymlink) {
  fs::create_symlink("/dev/zero", tmp / "zero");
  for (const fs::path& p : {fs::path("/dev/zero"), tmp / "zero"}) {
    std::error_code ec;
    EXPECT_FALSE(tokenlock::read_file(p, ec).has_value());
    EXPECT_EQ(ec, std::errc::invalid_argument) << p;
    EXPECT_NE(tokenlock::last_error_message().find("a character device"), std::string::npos)
        << tokenlock::last_error_message();
    std::optional<std::string> out;
    EXPECT_EQ(tokenlock::detail::read_file_impl(*sys, p.string(), out).code,
              std::errc::invalid_argument);
  }
  EXPECT_EQ(count_calls(sys->calls, "read "), 0);
  EXPECT_EQ(sys->open_descriptors(), 0u);
}

TEST_F(AtomicWriteTest, ReadFileRefusesADirectoryWithTheFix) {
  std::error_code ec;
  EXPECT_FALSE(tokenlock::read_file(tmp.path(), ec).has_value());
  EXPECT_EQ(ec, std::errc::is_a_directory);
  const std::string m = tokenlock::last_error_message();
  EXPECT_NE(m.find(tmp.path().string() + ": is a directory"), std::string::npos) << m;
  EXPECT_NE(m.find("name a file"), std::string::npos) << m;
}

TEST_F(AtomicWriteTest, ReadFileRefusesAFileOverItsLimitWithoutReadingIt) {
  spit(target, std::string(100, 'x'));
  EXPECT_EQ(tokenlock::read_file(target, 100), std::string(100, 'x')) << "exactly the limit";
  std::error_code ec;
  EXPECT_FALSE(tokenlock::read_file(target, 99, ec).has_value());
  EXPECT_EQ(ec, std::errc::file_too_large);
  const std::string m = tokenlock::last_error_message();
  EXPECT_NE(m.find("too large: 100 bytes, more than the limit given to read_file of 99"),
            std::string::npos)
      << m;
  EXPECT_THROW(tokenlock::read_file(target, 99), tokenlock::lock_error);
  std::optional<std::string> out;
  tokenlock::detail::read_rules rules;
  rules.limit = 99;
  EXPECT_EQ(tokenlock::detail::read_file_impl(*sys, target.string(), out, nullptr, rules).code,
            std::errc::file_too_large);
  EXPECT_EQ(count_calls(sys->calls, "read "), 0) << "its size said so: nothing read";
  EXPECT_EQ(sys->open_descriptors(), 0u);
  EXPECT_EQ(slurp(target), std::string(100, 'x'));
}

// A file whose size says nothing (procfs) or that grows while it is read
// is still read no further than the limit.
TEST_F(AtomicWriteTest, ReadFileStopsAtTheLimitWhenTheSizeSaidLess) {
  if (!fs::exists("/proc/self/status")) GTEST_SKIP() << "no procfs here";
  struct stat st {};
  ASSERT_EQ(::stat("/proc/self/status", &st), 0);
  ASSERT_LT(st.st_size, 16) << "the test needs a file whose size understates it";
  std::error_code ec;
  EXPECT_FALSE(tokenlock::read_file("/proc/self/status", 16, ec).has_value());
  EXPECT_EQ(ec, std::errc::file_too_large) << tokenlock::last_error_message();
  EXPECT_TRUE(tokenlock::read_file("/proc/self/status", ec).has_value()) << ec.message();
}

TEST_F(AtomicWriteTest, ReadFileFollowsAnotherUsersLinkOnlyWhereTheKernelWould) {
  if (::geteuid() != 0) GTEST_SKIP() << "only root can make a link owned by another user";
  spit(tmp / "secret", "root's\n");
  const fs::path link = sticky_dir(tmp / "shared", 0) / "planted";
  link_owned_by(tmp / "secret", link, other_uid);
  std::error_code ec;
  EXPECT_FALSE(tokenlock::read_file(link, ec).has_value());
  EXPECT_EQ(ec, errc::untrusted);
  EXPECT_NE(tokenlock::last_error_message().find("refusing to follow"), std::string::npos)
      << tokenlock::last_error_message();
  fs::create_directories(tmp / "closed");
  link_owned_by(tmp / "secret", tmp / "closed" / "link", other_uid);
  EXPECT_EQ(tokenlock::read_file(tmp / "closed" / "link"), std::string("root's\n"));
}

// ---- update_file and counters: what they read --------------------------------

class UpdateReadTest : public AtomicWriteTest {
 protected:
  fs::path lock_dir = tmp / "data.txt.lock";
  tokenlock::rename_lock lock_of(const std::shared_ptr<fake_os>& p) {
    tokenlock::lock_options o;
    o.wait = 0ms;
    return tokenlock::detail::with_os::lock(lock_dir, o, p);
  }
  tokenlock::detail::failure update(const std::string& next, tokenlock::update_options o = {}) {
    tokenlock::update_result r;
    return tokenlock::detail::update_impl(
        *sys, target, lock_of(sys),
        [&](const std::optional<std::string>&, std::string& out) -> tokenlock::detail::failure {
          out = next;
          return {};
        },
        o, r);
  }
  tokenlock::detail::failure increment(tokenlock::update_options o = {}) {
    tokenlock::update_result r;
    std::uint64_t value = 0;
    return tokenlock::detail::update_impl(
        *sys, target, lock_of(sys), tokenlock::detail::counter_step(target.string(), 1, value), o,
        r);
  }
  // Another process takes the lock at once: nothing was left held.
  void expect_lock_free() {
    auto other = std::make_shared<fake_os>(world, 200, 2);
    std::optional<tokenlock::lock_handle> h = lock_of(other).try_acquire();
    ASSERT_TRUE(h && h->owns()) << "the lock was left held";
    h->release();
  }
  void expect_nothing_left() {
    EXPECT_TRUE(tokenlock::testing::temp_files_below(tmp.path()).empty());
    expect_lock_free();
  }
};

TEST_F(UpdateReadTest, AFileOverTheReadLimitIsTooLargeAndNothingIsWritten) {
  spit(target, "0123456789A");
  tokenlock::update_options o;
  o.read_limit = 10;
  auto f = update("new\n", o);
  EXPECT_EQ(f.code, std::errc::file_too_large);
  EXPECT_NE(f.message.find("too large: 11 bytes, more than update_options::read_limit of 10"),
            std::string::npos)
      << f.message;
  EXPECT_NE(f.message.find(target.string()), std::string::npos) << f.message;
  EXPECT_EQ(count_calls(sys->calls, "read " + target.string()), 0) << "not a byte read";
  EXPECT_EQ(slurp(target), "0123456789A");
  expect_nothing_left();
  spit(target, "0123456789");
  EXPECT_FALSE(update("at the limit\n", o)) << "a file of exactly the limit is read";
  EXPECT_EQ(slurp(target), "at the limit\n");
  EXPECT_EQ(tokenlock::update_options{}.read_limit, tokenlock::default_read_limit);
  EXPECT_EQ(tokenlock::default_read_limit, 64u << 20);
}

TEST_F(UpdateReadTest, AFifoIsRefusedWithoutBlockingWithTheLockHeld) {
  ASSERT_EQ(::mkfifo(target.c_str(), 0644), 0);
  auto f = increment();
  EXPECT_EQ(f.code, std::errc::invalid_argument) << f.message;
  EXPECT_TRUE(fs::status(target).type() == fs::fifo_file);
  expect_nothing_left();
  // Swapped in after the target was looked at: the open cannot block and
  // fstat refuses it.
  fs::remove(target);
  spit(target, "41\n");
  sys->when(op::open_read, target.string(), [&] {
    fs::remove(target);
    ASSERT_EQ(::mkfifo(target.c_str(), 0644), 0);
  });
  f = increment();
  EXPECT_EQ(f.code, std::errc::invalid_argument) << f.message;
  EXPECT_NE(f.message.find("it is a FIFO, not a regular file"), std::string::npos) << f.message;
  EXPECT_EQ(count_calls(sys->calls, "read " + target.string()), 0);
  EXPECT_TRUE(fs::status(target).type() == fs::fifo_file);
  expect_nothing_left();
}

TEST_F(UpdateReadTest, DevZeroIsRefusedThroughASymlinkAndDirectly) {
  fs::create_symlink("/dev/zero", target);
  // Replaced, not followed: the link is not read through.
  auto f = increment();
  EXPECT_EQ(f.code, std::errc::too_many_symbolic_link_levels) << f.message;
  EXPECT_NE(f.message.find("it is a symbolic link"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("symlink_policy::follow"), std::string::npos) << f.message;
  EXPECT_EQ(fs::read_symlink(target), fs::path("/dev/zero"));
  expect_nothing_left();
  // Followed: the device is no file to replace.
  tokenlock::update_options follow;
  follow.write.symlinks = tokenlock::symlink_policy::follow;
  f = increment(follow);
  EXPECT_EQ(f.code, std::errc::invalid_argument) << f.message;
  EXPECT_EQ(fs::read_symlink(target), fs::path("/dev/zero"));
  expect_nothing_left();
  // The device itself, swapped in after the target was looked at.
  if (::geteuid() != 0) GTEST_SKIP() << "only root can make a device node";
  fs::remove(target);
  spit(target, "41\n");
  sys->when(op::open_read, target.string(), [&] {
    fs::remove(target);
    ASSERT_EQ(::mknod(target.c_str(), S_IFCHR | 0666, makedev(1, 5)), 0);  // /dev/zero's
  });
  f = increment();
  EXPECT_EQ(f.code, std::errc::invalid_argument) << f.message;
  EXPECT_NE(f.message.find("it is a character device"), std::string::npos) << f.message;
  EXPECT_EQ(count_calls(sys->calls, "read " + target.string()), 0);
  EXPECT_TRUE(fs::status(target).type() == fs::character_file);
  expect_nothing_left();
}

TEST_F(UpdateReadTest, ADirectorySwappedInIsRefused) {
  spit(target, "old\n");
  sys->when(op::open_read, target.string(), [&] {
    fs::remove(target);
    fs::create_directory(target);
  });
  auto f = update("new\n");
  EXPECT_EQ(f.code, std::errc::is_a_directory) << f.message;
  EXPECT_TRUE(fs::is_directory(target));
  EXPECT_TRUE(fs::is_empty(target));
  expect_nothing_left();
}

TEST_F(UpdateReadTest, AFailedFstatOfTheOpenedFileWritesNothing) {
  spit(target, "41\n");
  sys->fail(op::file_status_of, target.string(), EIO);
  auto f = increment();
  EXPECT_EQ(f.code, std::errc::io_error);
  EXPECT_NE(f.message.find("cannot look at the opened file"), std::string::npos) << f.message;
  EXPECT_EQ(slurp(target), "41\n");
  expect_nothing_left();
  EXPECT_EQ(sys->open_descriptors(), 0u);
}

TEST_F(UpdateReadTest, ACounterOf65BytesIsCorruptAndLeftAsItIs) {
  const std::string long_counter = std::string(64, '1') + "\n";
  spit(target, long_counter);
  auto f = increment();
  EXPECT_EQ(f.code, errc::corrupt_data) << f.message;
  EXPECT_EQ(slurp(target), long_counter);
  expect_nothing_left();
  std::error_code ec;
  EXPECT_FALSE(tokenlock::read_counter(target, ec).has_value());
  EXPECT_EQ(ec, errc::corrupt_data);
  EXPECT_NE(tokenlock::last_error_message().find("65 bytes, more than a counter's 64"),
            std::string::npos)
      << tokenlock::last_error_message();
  EXPECT_THROW(tokenlock::read_counter(target), tokenlock::lock_error);
  spit(target, "18446744073709551615\n");
  EXPECT_EQ(tokenlock::read_counter(target), UINT64_MAX) << "the longest counter";
}

TEST_F(UpdateReadTest, ReadCounterRefusesAFifoALinkAndADeviceWithoutBlocking) {
  ASSERT_EQ(::mkfifo(target.c_str(), 0644), 0);
  std::error_code ec;
  EXPECT_FALSE(tokenlock::read_counter(target, ec).has_value());
  EXPECT_EQ(ec, std::errc::invalid_argument);
  EXPECT_NE(tokenlock::last_error_message().find("a FIFO"), std::string::npos);
  fs::remove(target);
  fs::create_symlink("/dev/zero", target);
  EXPECT_FALSE(tokenlock::read_counter(target, ec).has_value());
  EXPECT_EQ(ec, std::errc::too_many_symbolic_link_levels) << "as increment_counter: not followed";
  EXPECT_FALSE(tokenlock::read_counter("/dev/zero", ec).has_value());
  EXPECT_EQ(ec, std::errc::invalid_argument);
}

TEST_F(AtomicWriteTest, SweepsOnlyOldTemporaryFiles) {
  const std::string old_tmp = ".data.txt.tmp.0123456789abcdef";
  const std::string new_tmp = ".data.txt.tmp.fedcba9876543210";
  spit(tmp / old_tmp, "crashed writer");
  spit(tmp / new_tmp, "writer at work");
  spit(tmp / ".data.txt.tmp.notahexnonce0000", "not ours");
  spit(tmp / "data.txt", "data");
  fs::create_directories(tmp / ".dir.tmp.0000000000000000");
  fs::last_write_time(tmp / old_tmp, std::time(nullptr) - 3600);
  fs::last_write_time(tmp / ".dir.tmp.0000000000000000", std::time(nullptr) - 3600);
  EXPECT_EQ(tokenlock::sweep_temp_files(tmp.path(), 600s), 1u);
  EXPECT_FALSE(fs::exists(tmp / old_tmp));
  EXPECT_TRUE(fs::exists(tmp / new_tmp));
  EXPECT_TRUE(fs::exists(tmp / ".data.txt.tmp.notahexnonce0000"));
  EXPECT_TRUE(fs::exists(tmp / ".dir.tmp.0000000000000000")) << "only regular files";
  std::error_code ec;
  tokenlock::sweep_temp_files(tmp / "missing", 600s, ec);
  EXPECT_EQ(ec, std::errc::no_such_file_or_directory);
}

}  // namespace
