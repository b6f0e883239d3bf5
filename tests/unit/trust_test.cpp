// Other users on the same host (docs/security.md): a lock directory, token,
// workspace or fence directory that another user could change is refused
// before anything in it is touched, and nothing inside a lock directory is
// ever reached through a symbolic link. Real files in a temporary
// directory; processes, clocks and interleavings played by fake_os. Tests
// that give files to another user need root (CI runs as root).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include <cerrno>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/filesystem.hpp>

#include "fake_os.hpp"
#include "temp_dir.hpp"
#include "tokenlock/tokenlock.hpp"
#include "lockdir/trust.hpp"
#include "files/update_impl.hpp"
#include "with_os.hpp"

namespace fs = boost::filesystem;
using namespace std::chrono_literals;
using tokenlock::errc;
using tokenlock::lock_handle;
using tokenlock::lock_options;
using tokenlock::rename_lock;
using tokenlock::detail::failure;
using tokenlock::testing::fake_os;
using tokenlock::testing::fake_world;
using tokenlock::testing::op;
using tokenlock::testing::snapshot;
using tokenlock::testing::temp_dir;

namespace {

constexpr unsigned nobody = 65534;

class TrustTest : public ::testing::Test {
 protected:
  temp_dir tmp;
  fs::path dir = tmp / "data.lock";
  fs::path target = tmp / "data.count";
  std::shared_ptr<fake_world> world = std::make_shared<fake_world>();
  std::shared_ptr<fake_os> a = process(100);

  std::shared_ptr<fake_os> process(int pid) {
    return std::make_shared<fake_os>(world, pid, 5000 + static_cast<std::uint64_t>(pid));
  }
  static lock_options options(unsigned dir_mode = 0755) {
    lock_options o;
    o.lease = 10s;
    o.wait = 0ms;
    o.skew_allowance = 100ms;
    o.dir_mode = dir_mode;
    return o;
  }
  rename_lock lock_for(const std::shared_ptr<fake_os>& p, lock_options o = options()) {
    return tokenlock::detail::with_os::lock(dir, o, p);
  }
  // A lock directory with its free token, made by us.
  void make_lock(unsigned mode) {
    lock_for(a).acquire().release();
    ASSERT_EQ(::chmod(dir.c_str(), mode), 0);
  }
  std::pair<std::error_code, std::string> acquire_error(const std::shared_ptr<fake_os>& p,
                                                        lock_options o = options()) {
    std::error_code ec;
    lock_handle h = lock_for(p, o).acquire(ec);
    EXPECT_FALSE(h.owns());
    return {ec, tokenlock::last_error_message()};
  }
  failure increment(std::uint64_t& value, lock_options o = options()) {
    tokenlock::update_result r;
    return tokenlock::detail::update_impl(*a, target, lock_for(a, o),
                                          tokenlock::detail::counter_step(target.string(), 1, value),
                                          {}, r);
  }
  std::vector<std::string> temp_files() const {
    std::vector<std::string> out;
    for (auto it = fs::recursive_directory_iterator(tmp.path());
         it != fs::recursive_directory_iterator(); ++it)
      if (it->path().filename().string().find(".tmp.") != std::string::npos)
        out.push_back(it->path().string());
    return out;
  }
  bool lock_is_free() const { return fs::exists(dir / "lockfile"); }
  static bool root() { return ::geteuid() == 0; }
};

void expect_refusal(const std::pair<std::error_code, std::string>& e, const std::string& owner,
                    const std::string& fix) {
  EXPECT_EQ(e.first, errc::untrusted) << e.second;
  EXPECT_NE(e.second.find("refusing"), std::string::npos) << e.second;
  EXPECT_NE(e.second.find("owner uid " + owner), std::string::npos) << e.second;
  EXPECT_NE(e.second.find(fix), std::string::npos) << e.second;
}

TEST_F(TrustTest, ALockDirectoryWritableByEveryUserIsRefusedAndLeftAsItIs) {
  make_lock(0777);
  const auto before = snapshot(tmp.path());
  expect_refusal(acquire_error(a), std::to_string(::geteuid()), "chmod o-w");
  EXPECT_EQ(snapshot(tmp.path()), before);
}

TEST_F(TrustTest, AStickyLockDirectoryWritableByEveryUserIsRefusedToo) {
  // Sticky or not, anyone may add entries (a second token, a planted name).
  make_lock(01777);
  expect_refusal(acquire_error(a), std::to_string(::geteuid()), "writable by every user");
}

TEST_F(TrustTest, AGroupWritableLockDirectoryNeedsTheChoiceOfGroupSharing) {
  make_lock(0775);
  const auto before = snapshot(tmp.path());
  expect_refusal(acquire_error(a), std::to_string(::geteuid()),
                 "which is not the group chosen for sharing");
  EXPECT_EQ(snapshot(tmp.path()), before);
  // Our own directory, made group-shared by our choice of dir_mode: its
  // group is the chosen one, and it is used.
  lock_handle h = lock_for(a, options(0775)).acquire();
  EXPECT_TRUE(h.owns());
}

TEST_F(TrustTest, AnotherUsersLockDirectoryIsRefusedNamingTheOwner) {
  if (!root()) GTEST_SKIP() << "needs root to give the directory to another user";
  make_lock(0755);
  ASSERT_EQ(::chown(dir.c_str(), nobody, nobody), 0);
  const auto before = snapshot(tmp.path());
  expect_refusal(acquire_error(a), std::to_string(nobody), "have that user (or root) remove it");
  EXPECT_EQ(snapshot(tmp.path()), before);
  // The same for every other way in: status, adopt, take over.
  std::error_code ec;
  lock_for(a).holder(ec);
  EXPECT_EQ(ec, errc::untrusted);
  lock_for(a).take_over("lockfile.1800000010000000.testhost-0000abcd.7.7.0000000000000007", true, ec);
  EXPECT_EQ(ec, errc::untrusted);
  EXPECT_EQ(snapshot(tmp.path()), before);
}

TEST_F(TrustTest, AnotherUsersLockDirectoryInOurGroupIsUsedOnlyWithThatGroupNamed) {
  if (!root()) GTEST_SKIP() << "needs root to give the directory to another user";
  make_lock(0775);
  // nobody's directory, in a group of ours (root's group 0): being in the
  // group is no choice, and group write in our dir_mode shares only
  // directories of our own.
  ASSERT_EQ(::chown(dir.c_str(), nobody, ::getegid()), 0);
  const auto before = snapshot(tmp.path());
  expect_refusal(acquire_error(a), std::to_string(nobody), "which is not the group chosen");
  expect_refusal(acquire_error(a, options(0775)), std::to_string(nobody),
                 "TOKENLOCK_GROUP=G");
  EXPECT_EQ(snapshot(tmp.path()), before);
  lock_options named = options();
  named.group = std::to_string(::getegid());
  lock_handle h = lock_for(a, named).acquire();
  EXPECT_TRUE(h.owns());
}

TEST_F(TrustTest, AnotherGroupThanTheNamedOneGivesNothing) {
  // The attack of a user who shares only `users` with the victim: their
  // directory, in `users`, while the victim named another group.
  if (!root()) GTEST_SKIP() << "needs root to give the directory to another user";
  make_lock(0775);
  ASSERT_EQ(::chown(dir.c_str(), nobody, nobody), 0);
  lock_options named = options(0775);
  named.group = std::to_string(::getegid());
  const auto before = snapshot(tmp.path());
  expect_refusal(acquire_error(a, named), std::to_string(nobody),
                 "which is not the group chosen for sharing (group " +
                     std::to_string(::getegid()) + ")");
  EXPECT_EQ(snapshot(tmp.path()), before);
}

TEST_F(TrustTest, NamingAGroupThisUserIsNotInIsABadArgumentAndCreatesNothing) {
  if (!root()) GTEST_SKIP() << "the fake process needs root's groups to be refused here";
  lock_options named = options();
  named.group = "no-such-group-of-tokenlock";
  auto e = acquire_error(a, named);
  EXPECT_EQ(e.first, errc::bad_argument) << e.second;
  EXPECT_NE(e.second.find("no such group"), std::string::npos) << e.second;
  named.group = std::to_string(nobody);
  e = acquire_error(a, named);
  EXPECT_EQ(e.first, errc::bad_argument) << e.second;
  EXPECT_NE(e.second.find("not a member"), std::string::npos) << e.second;
  EXPECT_FALSE(fs::exists(dir)) << "no lock directory was made";
}

TEST_F(TrustTest, ALockDirectoryMadeWithANamedGroupGetsItAndGroupWrite) {
  lock_options named = options();
  named.group = std::to_string(::getegid());
  lock_handle h = lock_for(a, named).acquire();
  struct stat d {}, t {};
  ASSERT_EQ(::stat(dir.c_str(), &d), 0);
  ASSERT_EQ(::stat(h.path().c_str(), &t), 0);
  EXPECT_EQ(d.st_gid, ::getegid());
  EXPECT_EQ(d.st_mode & 0777, 0775u) << "dir_mode | 0070";
  EXPECT_EQ(t.st_gid, ::getegid());
  EXPECT_EQ(t.st_mode & 0777, 0775u);
  h.release();
}

TEST_F(TrustTest, AWorkspaceOfAnotherUserIsTrustedOnlyInTheChosenGroup) {
  if (!root()) GTEST_SKIP() << "needs root to give the workspace to another user";
  std::uint64_t v = 0;
  ASSERT_FALSE(increment(v, options(0775)));
  const fs::path w = dir / "lockfile" / "w";
  ASSERT_TRUE(fs::is_directory(w));
  // Another member of our own lock directory's group (the one our
  // dir_mode chose): trusted.
  ASSERT_EQ(::chown(w.c_str(), nobody, ::getegid()), 0);
  ASSERT_FALSE(increment(v, options(0775)));
  EXPECT_EQ(v, 2u);
  // The same user's workspace in another group: refused, nothing written.
  ASSERT_EQ(::chown(w.c_str(), nobody, nobody), 0);
  failure f = increment(v, options(0775));
  EXPECT_EQ(f.code, errc::untrusted) << f.message;
  EXPECT_NE(f.message.find("which is not the group chosen for sharing"), std::string::npos)
      << f.message;
  std::ifstream in(target.string());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "2\n");
  EXPECT_TRUE(lock_is_free());
  EXPECT_TRUE(temp_files().empty());
}

TEST_F(TrustTest, ALockDirectoryThatIsASymbolicLinkIsRefused) {
  fs::create_directory(tmp / "real.lock");
  fs::create_symlink(tmp / "real.lock", dir);
  const auto e = acquire_error(a);
  EXPECT_EQ(e.first, errc::untrusted) << e.second;
  EXPECT_NE(e.second.find("symbolic link"), std::string::npos) << e.second;
  EXPECT_TRUE(fs::is_empty(tmp / "real.lock")) << "nothing made through the link";
}

TEST_F(TrustTest, AnEmptyLockDirectoryOfAnotherUserIsRefusedAtOnceInsteadOfWaitedOn) {
  // In a sticky /tmp, nobody's empty directory cannot be replaced by ours:
  // once that made every acquire wait forever ("changing hands too fast").
  if (!root()) GTEST_SKIP() << "needs root to give the directory to another user";
  ASSERT_EQ(::chmod(tmp.path().c_str(), 01777), 0);
  fs::create_directory(dir);
  ASSERT_EQ(::chown(dir.c_str(), nobody, nobody), 0);
  lock_options o = options();
  o.wait = 5s;  // a wait budget that must not be spent
  const std::int64_t start = world->steady_us;
  expect_refusal(acquire_error(a, o), std::to_string(nobody), "remove it");
  EXPECT_EQ(world->steady_us, start) << "refused without waiting";
  EXPECT_TRUE(fs::is_empty(dir));
}

TEST_F(TrustTest, TheLockKeepsTheDirectoryItJudgedWhenThePathIsSwappedAfterwards) {
  // Judged once and kept open: a directory put at the path later is not
  // the one the lock works in; the fast path stays two renames.
  lock_handle h = lock_for(a).acquire();
  const std::string token = h.token();
  fs::rename(dir, tmp / "moved.lock");
  fs::create_directory(dir);
  a->calls.clear();
  h.release();
  EXPECT_TRUE(fs::exists(tmp / "moved.lock" / "lockfile"));
  EXPECT_TRUE(fs::is_empty(dir));
  ASSERT_EQ(a->calls.size(), 1u);
  EXPECT_EQ(a->calls[0], "rename " + (dir / token).string() + " -> " + (dir / "lockfile").string());
}

TEST_F(TrustTest, ALockDirectoryRecreatedAfterRemovalIsOpenedAndJudgedAgain) {
  rename_lock lock = lock_for(a);
  lock.acquire().release();
  fs::remove_all(dir);
  // Recreated by someone else, writable by all: the slow path notices.
  fs::create_directories(dir / "lockfile");
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  std::error_code ec;
  lock_handle h = lock.acquire(ec);
  EXPECT_EQ(ec, errc::untrusted) << tokenlock::last_error_message();
  // Made safe again, the same lock object uses it.
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  h = lock.acquire();
  EXPECT_TRUE(h.owns());
}

TEST_F(TrustTest, ClearingATakenOverWorkspaceRemovesLinksAndNeverWhatTheyName) {
  fs::create_directories(tmp / "canary" / "inner");
  std::ofstream(tmp / "canary" / "keep.txt") << "mine\n";
  lock_handle ha = lock_for(a).acquire();
  const fs::path ws = ha.path();
  ha.detach();
  world->processes.erase(100);  // the holder died: its workspace is cleared
  fs::create_directories(ws / "w" / "deep");
  std::ofstream(ws / "w" / "deep" / "left.tmp") << "x";
  fs::create_directory_symlink(tmp / "canary", ws / "link");
  fs::create_symlink(tmp / "canary" / "keep.txt", ws / "w" / "file-link");
  auto b = process(200);
  lock_handle hb = lock_for(b).acquire();
  EXPECT_TRUE(fs::is_empty(hb.path())) << "everything the dead owner left is gone";
  EXPECT_TRUE(fs::exists(tmp / "canary" / "inner"));
  EXPECT_TRUE(fs::exists(tmp / "canary" / "keep.txt"));
}

TEST_F(TrustTest, AWorkspaceSwappedForALinkWhileBeingClearedLeadsNowhereElse) {
  // The attack: once clearing has begun, the token is renamed away and a
  // link to the victim's files put at its name. Clearing by descriptor
  // goes on in the directory it opened, whatever the name leads to now.
  fs::create_directories(tmp / "home");
  for (int i = 0; i < 20; ++i) std::ofstream(tmp / "home" / ("f" + std::to_string(i))) << i;
  lock_handle ha = lock_for(a).acquire();
  const fs::path ws = ha.path();
  ha.detach();
  world->processes.erase(100);
  for (int i = 0; i < 20; ++i) std::ofstream(ws / ("f" + std::to_string(i))) << i;
  auto b = process(200);
  fs::path taken;
  b->when(op::remove_file, "/f0", [&] {
    for (auto& e : fs::directory_iterator(dir))
      if (e.path().filename().string().rfind("lockfile.", 0) == 0) taken = e.path();
    fs::rename(taken, tmp / "stolen");
    fs::create_directory_symlink(tmp / "home", taken);
  });
  lock_handle hb = lock_for(b).acquire();
  ASSERT_FALSE(taken.empty()) << "the clearing began";
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp / "home"), fs::directory_iterator()), 20);
  EXPECT_TRUE(fs::is_empty(tmp / "stolen")) << "the clearing went on where it had begun";
  fs::remove(taken);
  fs::rename(tmp / "stolen", taken);
}

TEST_F(TrustTest, TheCreationSweepLeavesLinksAndOtherUsersEntriesAlone) {
  // A stale creation leftover's name, planted as a link to another lock of
  // ours: the sweep once followed it and removed that lock's token.
  const fs::path other = tmp / "other.lock";
  rename_lock other_lock = tokenlock::detail::with_os::lock(other, options(), a);
  other_lock.acquire().release();
  const std::string stale = "data.lock.init.1700000000000000.testhost-0000abcd.9.9.0000000000000009";
  fs::create_directory_symlink(other, tmp / stale);
  fs::create_directories(tmp / "data.lock.init.1700000000000000.testhost-0000abcd.8.8.0000000000000008" / "lockfile");
  lock_for(a).acquire().release();  // creates data.lock: sweeps beside it
  EXPECT_TRUE(fs::exists(other / "lockfile")) << "the link was not followed";
  EXPECT_TRUE(fs::is_symlink(tmp / stale)) << "and not removed: not ours to judge";
  EXPECT_FALSE(fs::exists(tmp / "data.lock.init.1700000000000000.testhost-0000abcd.8.8.0000000000000008"))
      << "our own stale leftover is swept";
  other_lock.acquire().release();
}

TEST_F(TrustTest, AnotherUsersCreationLeftoverIsNotSwept) {
  if (!root()) GTEST_SKIP() << "needs root to give the leftover to another user";
  const fs::path theirs = tmp / "data.lock.init.1700000000000000.testhost-0000abcd.8.8.0000000000000008";
  fs::create_directories(theirs / "lockfile");
  ASSERT_EQ(::chown(theirs.c_str(), nobody, nobody), 0);
  lock_for(a).acquire().release();
  EXPECT_TRUE(fs::exists(theirs / "lockfile"));
}

TEST_F(TrustTest, AWorkspaceOthersCanWriteIsRefusedAndTheTargetKeptIntact) {
  // Planted before the update: a workspace any user may write lets them
  // swap the temporary file for theirs just before the commit.
  std::uint64_t v = 0;
  ASSERT_FALSE(increment(v));
  ASSERT_EQ(v, 1u);
  const fs::path w = dir / "lockfile" / "w";
  ASSERT_TRUE(fs::exists(w));
  ASSERT_EQ(::chmod(w.c_str(), 0777), 0);
  failure f = increment(v);
  EXPECT_EQ(f.code, errc::untrusted) << f.message;
  EXPECT_NE(f.message.find("lock's workspace"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("chmod o-w"), std::string::npos) << f.message;
  std::ifstream in(target.string());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "1\n");
  EXPECT_TRUE(temp_files().empty());
  EXPECT_TRUE(lock_is_free());
}

TEST_F(TrustTest, AWorkspaceThatIsALinkIsNeverWrittenThrough) {
  std::uint64_t v = 0;
  ASSERT_FALSE(increment(v));
  fs::create_directory(tmp / "elsewhere");
  fs::remove_all(dir / "lockfile" / "w");
  fs::create_directory_symlink(tmp / "elsewhere", dir / "lockfile" / "w");
  failure f = increment(v);
  EXPECT_TRUE(f) << "a link in the workspace's place is not used";
  EXPECT_TRUE(fs::is_empty(tmp / "elsewhere"));
  std::ifstream in(target.string());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "1\n");
  EXPECT_TRUE(lock_is_free());
}

TEST_F(TrustTest, NamesFoundInTheLockDirectoryAreShownEscaped) {
  make_lock(0755);
  // The only token renamed to a name that breaks the grammar: the look at
  // the directory reports it.
  fs::rename(dir / "lockfile", dir / "lockfile.\x1b[31m\nforged");
  const auto e = acquire_error(a);
  EXPECT_EQ(e.first, errc::lock_corrupt) << e.second;
  EXPECT_NE(e.second.find("lockfile.\\x1b[31m\\x0aforged"), std::string::npos) << e.second;
  EXPECT_EQ(e.second.find('\x1b'), std::string::npos);
  EXPECT_EQ(e.second.find('\n'), std::string::npos);
}

TEST_F(TrustTest, ShownNameEscapesControlAndHighBytesOnly) {
  EXPECT_EQ(tokenlock::detail::shown_name("a b-c.d_9"), "a b-c.d_9");
  EXPECT_EQ(tokenlock::detail::shown_name(std::string("\x01\x7f\xff", 3)), "\\x01\\x7f\\xff");
}

TEST_F(TrustTest, ALeaseAboveTheProtocolsBoundIsABadArgumentEverywhere) {
  lock_options o = options();
  o.max_lease = tokenlock::protocol_max_lease + 1ms;
  o.lease = o.max_lease;
  EXPECT_EQ(acquire_error(a, o).first, errc::bad_argument);
  EXPECT_FALSE(fs::exists(dir)) << "nothing made";
  lock_handle h = lock_for(a).acquire();
  std::error_code ec;
  h.refresh(tokenlock::protocol_max_lease + 1ms, ec);
  EXPECT_EQ(ec, errc::bad_argument);
  EXPECT_TRUE(h.owns()) << "the lease as it was";
  h.refresh(tokenlock::protocol_max_lease, ec);
  EXPECT_FALSE(ec) << tokenlock::last_error_message();
}

TEST_F(TrustTest, TheLongestLeaseAllowedIsNeverJudgedImplausibleByAProcessThatAllowsLess) {
  // A 24-hour lease, held by a live process: another process whose own
  // max_lease is a minute still waits for it.
  lock_options longest = options();
  longest.lease = tokenlock::protocol_max_lease;
  lock_handle h = lock_for(a, longest).acquire();
  auto b = process(200);
  lock_options brief = options();
  brief.max_lease = 60s;
  EXPECT_EQ(acquire_error(b, brief).first, errc::busy);
  EXPECT_TRUE(h.owns());
  h.release();
}

}  // namespace

namespace {

TEST_F(TrustTest, ALockMadeInASetgidDirectoryKeepsItsGroupDownToTheToken) {
  // The documented group set-up: a data directory of mode 2770 in the
  // shared group. The lock directory and its token keep that group (and the
  // setgid bit), so that the other members trust them.
  if (!root()) GTEST_SKIP() << "needs root to give the directory another group";
  const gid_t shared = 65534;
  ASSERT_EQ(::chown(tmp.path().c_str(), ::geteuid(), shared), 0);
  ASSERT_EQ(::chmod(tmp.path().c_str(), 02770), 0);
  lock_handle h = lock_for(a).acquire();
  struct stat d {}, t {};
  ASSERT_EQ(::stat(dir.c_str(), &d), 0);
  ASSERT_EQ(::stat(h.path().c_str(), &t), 0);
  EXPECT_EQ(d.st_gid, shared);
  EXPECT_EQ(t.st_gid, shared);
  EXPECT_EQ(d.st_mode & 07777, 02755u) << "dir_mode, and the setgid bit it inherited";
  h.release();
}

}  // namespace

namespace {

TEST_F(TrustTest, ATokenTakenOverAfterItsWorkspaceWasJudgedGetsNoTemporaryFileOfOurs) {
  // The workspace is judged by descriptor, but the temporary file is made
  // through the token's name: a descriptor follows the directory, into the
  // new owner's private workspace.
  std::uint64_t v = 0;
  ASSERT_FALSE(increment(v));
  fs::path taken;
  a->when(op::create_exclusive, "/w/", [&] {
    for (auto& e : fs::directory_iterator(dir))
      if (e.path().filename().string().rfind("lockfile.", 0) == 0) taken = e.path();
    fs::rename(taken, dir / "lockfile.1800000099000000.testhost-0000abcd.300.5300.0000000000000300");
  });
  failure f = increment(v);
  EXPECT_EQ(f.code, errc::lock_lost) << f.message;
  EXPECT_TRUE(temp_files().empty()) << "nothing in the new owner's workspace";
  std::ifstream in(target.string());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "1\n");
}

}  // namespace

namespace {

// The wait board's name is beside the lock directory, in a directory that
// others may write (/tmp): what is found there is judged before a byte of
// it is written or its size changed.
class WaitBoardTrustTest : public ::testing::Test {
 protected:
  temp_dir tmp;
  fs::path dir = tmp / "data.lock";
  fs::path board = tmp / "data.lock.wait";

  // Waits on the held lock for a moment, which makes a waiter look for
  // the board; the real OS, as the attack meets it.
  void wait_once(unsigned dir_mode = 0755) {
    lock_options o;
    o.wait = 30ms;
    o.dir_mode = dir_mode;
    rename_lock lock(dir, o);
    lock_handle held = lock.acquire();
    std::error_code ec;
    lock_handle second = rename_lock(dir, o).acquire(ec);
    EXPECT_EQ(ec, errc::timed_out);
    EXPECT_FALSE(second.owns());
    held.release();
  }
  static std::string contents(const fs::path& p) {
    std::ifstream in(p.string(), std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
};

TEST_F(WaitBoardTrustTest, AHardLinkToAFileOfOursIsNeitherWrittenNorExtended) {
  const fs::path victim = tmp / "victim.txt";
  { std::ofstream(victim.string()) << "precious"; }
  fs::create_hard_link(victim, board);
  wait_once();
  EXPECT_EQ(contents(victim), "precious");
  EXPECT_EQ(fs::file_size(victim), 8u);
  // An empty file of ours with a second link is refused as well: the
  // link count, not the size, tells a planted link.
  { std::ofstream(victim.string(), std::ios::trunc); }
  wait_once();
  EXPECT_EQ(fs::file_size(victim), 0u);
}

TEST_F(WaitBoardTrustTest, AFileOfAnotherSizeIsNoBoardAndIsLeftAsItIs) {
  { std::ofstream(board.string()) << "not a board"; }
  wait_once();
  EXPECT_EQ(contents(board), "not a board");
}

TEST_F(WaitBoardTrustTest, AFifoInItsPlaceNeitherBlocksNorIsUsed) {
  ASSERT_EQ(::mkfifo(board.c_str(), 0600), 0);
  wait_once();  // returns: the open did not wait for a writer
  struct stat st {};
  ASSERT_EQ(::lstat(board.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST_F(WaitBoardTrustTest, AnotherUsersBoardIsNotUsed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give the board to another user";
  { std::ofstream(board.string()); }
  ASSERT_EQ(::chown(board.c_str(), nobody, nobody), 0);
  wait_once();
  EXPECT_EQ(fs::file_size(board), 0u) << "not sized: not written";
}

TEST_F(WaitBoardTrustTest, ABoardOfAMemberOfTheChosenGroupIsUsed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give the board to another user";
  { std::ofstream(board.string()); }
  ASSERT_EQ(::chown(board.c_str(), nobody, ::getegid()), 0);
  wait_once(0775);  // our own lock directory, shared with its group
  EXPECT_EQ(fs::file_size(board), 4096u) << "mapped and sized: used";
}

TEST_F(WaitBoardTrustTest, OurOwnBoardIsStillUsed) {
  wait_once();
  ASSERT_TRUE(fs::exists(board));
  EXPECT_EQ(fs::file_size(board), 4096u);
}

}  // namespace
