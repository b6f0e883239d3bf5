// commit_file: the fenced commit on its own, for a caller that holds the
// lock and computed the contents itself. Each failure leaves the target as
// it was and no temporary file behind.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <ctime>

#include <boost/filesystem.hpp>

#include "fake_os.hpp"
#include "inspect.hpp"
#include "temp_dir.hpp"
#include "tokenlock/tokenlock.hpp"
#include "files/update_impl.hpp"
#include "with_os.hpp"

namespace fs = boost::filesystem;
using namespace std::chrono_literals;
using tokenlock::errc;
using tokenlock::lock_handle;
using tokenlock::lock_options;
using tokenlock::rename_lock;
using tokenlock::testing::fake_os;
using tokenlock::testing::fake_world;
using tokenlock::testing::op;
using tokenlock::testing::slurp;
using tokenlock::testing::spit;
using tokenlock::testing::temp_dir;

namespace {

class CommitFileTest : public ::testing::Test {
 protected:
  temp_dir tmp;
  fs::path target = tmp / "data.txt";
  fs::path lock_dir = tmp / "data.txt.lock";
  std::shared_ptr<fake_world> world = std::make_shared<fake_world>();
  std::shared_ptr<fake_os> a = std::make_shared<fake_os>(world, 100, 1);

  rename_lock lock_of(const std::shared_ptr<fake_os>& p,
                      std::chrono::milliseconds skew_allowance = 0ms) {
    lock_options o;
    o.lease = 10s;
    o.wait = 0ms;
    o.skew_allowance = skew_allowance;
    return tokenlock::detail::with_os::lock(lock_dir, o, p);
  }
  std::vector<std::string> temp_files() const {
    return tokenlock::testing::temp_files_below(tmp.path());
  }
  std::uint64_t increment(const rename_lock& lock, std::uint64_t by) {
    std::uint64_t v = 0;
    tokenlock::update_result r;
    const auto f = tokenlock::detail::update_impl(
        *a, target, lock, tokenlock::detail::counter_step(target.string(), by, v), {}, r);
    EXPECT_FALSE(f) << f.message;
    return v;
  }
  std::error_code commit(const lock_handle& h, const std::string& contents,
                         tokenlock::write_options o = {}) {
    std::error_code ec;
    tokenlock::commit_file(h, target, contents, o, ec);
    return ec;
  }
};

TEST_F(CommitFileTest, CommitsThroughTheTokensPathAndKeepsTheLock) {
  spit(target, "old\n");
  lock_handle h = lock_of(a).acquire();
  a->calls.clear();
  ASSERT_FALSE(commit(h, "new\n")) << tokenlock::last_error_message();
  EXPECT_EQ(slurp(target), "new\n");
  EXPECT_TRUE(h.owns());
  EXPECT_TRUE(lock_of(a).holder().has_value()) << "still held";
  EXPECT_TRUE(temp_files().empty());
  bool through_token = false;
  for (const auto& c : a->calls)
    through_token = through_token || (c.rfind("rename", 0) == 0 &&
                                      c.find(h.token() + "/w/.data.txt.tmp.") != std::string::npos);
  EXPECT_TRUE(through_token) << "the rename did not go through the token";
  h.release();
}

TEST_F(CommitFileTest, ALockTakenOverMeanwhileWritesNothing) {
  spit(target, "old\n");
  lock_handle h = lock_of(a).acquire();
  world->advance(20'000'000);  // our lease ends
  auto b = std::make_shared<fake_os>(world, 200, 2, "elsewhere-12345678");
  lock_handle hb = lock_of(b).acquire();
  ASSERT_TRUE(hb.owns());
  const std::error_code ec = commit(h, "stale\n");
  EXPECT_EQ(ec, errc::lock_lost);
  EXPECT_NE(tokenlock::last_error_message().find("nothing was written"), std::string::npos)
      << tokenlock::last_error_message();
  EXPECT_EQ(slurp(target), "old\n");
  EXPECT_TRUE(temp_files().empty());
  EXPECT_EQ(commit(hb, "theirs\n"), std::error_code());
  EXPECT_EQ(slurp(target), "theirs\n");
}

TEST_F(CommitFileTest, ALockTakenOverBetweenWriteAndRenameWritesNothing) {
  spit(target, "old\n");
  lock_handle h = lock_of(a).acquire();
  auto b = std::make_shared<fake_os>(world, 200, 2, "elsewhere-12345678");
  std::optional<lock_handle> hb;
  a->when(op::sync_file, "/w/.data.txt.tmp.", [&] {
    world->advance(20'000'000);
    hb = lock_of(b).try_acquire();
  });
  EXPECT_EQ(commit(h, "stale\n"), errc::lock_lost);
  ASSERT_TRUE(hb && hb->owns());
  EXPECT_EQ(slurp(target), "old\n");
  EXPECT_TRUE(temp_files().empty());
}

// A GlusterFS client that still has the moved token cached answers ESTALE
// where a local filesystem says ENOENT: the commit is still lock_lost.
TEST_F(CommitFileTest, ATokenTakenOverThatAnswersEstaleIsALostLockNotASystemError) {
  spit(target, "old\n");
  lock_handle h = lock_of(a).acquire();
  world->advance(20'000'000);
  auto b = std::make_shared<fake_os>(world, 200, 2, "elsewhere-12345678");
  lock_handle hb = lock_of(b).acquire();
  ASSERT_TRUE(hb.owns());
  a->fail(op::status, h.token(), ESTALE, -1);
  EXPECT_EQ(commit(h, "stale\n"), errc::lock_lost) << tokenlock::last_error_message();
  EXPECT_EQ(slurp(target), "old\n");
  EXPECT_TRUE(temp_files().empty());
}

// ESTALE alone, with our token still listed, is not taken for a lost lock.
TEST_F(CommitFileTest, AnEstaleWhileTheTokenIsStillListedIsReportedAsItIs) {
  spit(target, "old\n");
  lock_handle h = lock_of(a).acquire();
  a->fail(op::status, h.token(), ESTALE, 1);
  a->fail(op::status, "/w", ESTALE, 1);
  const std::error_code ec = commit(h, "new\n");
  EXPECT_EQ(ec, std::error_code(ESTALE, std::generic_category())) << tokenlock::last_error_message();
  EXPECT_EQ(slurp(target), "old\n");
  EXPECT_TRUE(temp_files().empty());
  EXPECT_TRUE(h.owns());
  h.release();
}

// An sshfs client may find a token taken over in both its lookup and its
// listing caches; the server's ENOENT for the temporary file just made
// through the token's name still says the lock is lost.
TEST_F(CommitFileTest, ARenameThatNoLongerFindsItsTemporaryFileIsALostLock) {
  spit(target, "old\n");
  lock_handle h = lock_of(a).acquire();
  a->fail(op::rename, "/w/.data.txt.tmp.", ENOENT);
  EXPECT_EQ(commit(h, "new\n"), errc::lock_lost) << tokenlock::last_error_message();
  EXPECT_EQ(slurp(target), "old\n");
  EXPECT_TRUE(temp_files().empty());
  h.release();
}

// The same when the temporary file cannot even be created through the
// token's name, in the workspace just opened by descriptor.
TEST_F(CommitFileTest, ATemporaryFileThatCannotBeCreatedThroughTheTokensNameIsALostLock) {
  spit(target, "old\n");
  lock_handle h = lock_of(a).acquire();
  a->fail(op::create_exclusive, "/w/.data.txt.tmp.", ENOENT);
  EXPECT_EQ(commit(h, "new\n"), errc::lock_lost) << tokenlock::last_error_message();
  EXPECT_EQ(slurp(target), "old\n");
  EXPECT_TRUE(temp_files().empty());
  h.release();
}

TEST_F(CommitFileTest, AcrossFilesystemsItRefusesRatherThanCommitUnfenced) {
  spit(target, "old\n");
  lock_handle h = lock_of(a).acquire();
  a->fail(op::rename, "/.data.txt.tmp.", EXDEV);
  EXPECT_EQ(commit(h, "new\n"), errc::not_fenced);
  const std::string m = tokenlock::last_error_message();
  EXPECT_NE(m.find("different filesystems"), std::string::npos) << m;
  EXPECT_NE(m.find("update_file"), std::string::npos) << "names the way out: " << m;
  EXPECT_EQ(slurp(target), "old\n");
  EXPECT_TRUE(temp_files().empty());
  EXPECT_TRUE(h.owns()) << "the lock stays held";
}

TEST_F(CommitFileTest, ALegacyFileTokenCannotFenceTheCommit) {
  fs::create_directories(lock_dir);
  spit(lock_dir / "lockfile", "");
  spit(target, "old\n");
  lock_handle h = lock_of(a).acquire();
  EXPECT_EQ(commit(h, "new\n"), errc::not_fenced);
  EXPECT_NE(tokenlock::last_error_message().find("is a file, not a directory"), std::string::npos)
      << tokenlock::last_error_message();
  EXPECT_EQ(slurp(target), "old\n");
  EXPECT_TRUE(temp_files().empty());
}

TEST_F(CommitFileTest, AnEmptyHandleOrAForkedChildsIsRefused) {
  spit(target, "old\n");
  lock_handle none;
  EXPECT_EQ(commit(none, "new\n"), errc::bad_argument);
  EXPECT_NE(tokenlock::last_error_message().find("holds no lock"), std::string::npos);
  lock_handle h = lock_of(a).acquire();
  a->simulate_fork();
  EXPECT_EQ(commit(h, "new\n"), errc::not_owner);
  EXPECT_EQ(slurp(target), "old\n");
  EXPECT_TRUE(temp_files().empty());
}

TEST_F(CommitFileTest, ADirectorySyncFailureSaysTheCommitIsDone) {
  spit(target, "old\n");
  lock_handle h = lock_of(a).acquire();
  a->fail(op::sync_directory, tmp.path().string(), EIO);
  EXPECT_EQ(commit(h, "new\n"), errc::dir_sync_failed);
  EXPECT_NE(tokenlock::last_error_message().find("do not repeat"), std::string::npos)
      << tokenlock::last_error_message();
  EXPECT_EQ(slurp(target), "new\n");
  EXPECT_TRUE(temp_files().empty());
}

TEST_F(CommitFileTest, AFailedWriteLeavesTheTargetAndNoWorkspaceItMade) {
  spit(target, "old\n");
  lock_handle h = lock_of(a).acquire();
  a->fail(op::write, "/w/.data.txt.tmp.", ENOSPC);
  EXPECT_EQ(commit(h, "new\n"), std::make_error_code(std::errc::no_space_on_device));
  EXPECT_EQ(slurp(target), "old\n");
  EXPECT_TRUE(temp_files().empty());
  EXPECT_FALSE(fs::exists(h.path() / "w")) << "the workspace it made is removed again";
}

// A commit killed before its rename leaves its temporary file in the
// workspace, which goes with the token from holder to holder; about one
// commit in 32 removes those of this target that no commit is writing.
TEST_F(CommitFileTest, ACommitNowAndThenSweepsWhatAKilledCommitLeftInTheWorkspace) {
  // Ages are judged against the played clock: it reads the real one here.
  world->wall_us = std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  spit(target, "old\n");
  lock_handle h = lock_of(a).acquire();
  ASSERT_FALSE(commit(h, "first\n"));
  const fs::path w = h.path() / "w";
  spit(w / ".data.txt.tmp.0123456789abcdef", "killed");
  spit(w / ".data.txt.tmp.fedcba9876543210", "being written");
  spit(w / ".other.tmp.0123456789abcdef", "another target's");
  const std::time_t now = std::time(nullptr);
  fs::last_write_time(w / ".data.txt.tmp.0123456789abcdef", now - 120);
  fs::last_write_time(w / ".other.tmp.0123456789abcdef", now - 120);
  std::uint64_t next = 1;  // never a multiple of 32: no sweep
  a->random = [&] { return next += 32; };
  ASSERT_FALSE(commit(h, "second\n"));
  EXPECT_TRUE(fs::exists(w / ".data.txt.tmp.0123456789abcdef")) << "not this time";
  next = 0;  // always a multiple: this commit sweeps
  ASSERT_FALSE(commit(h, "third\n"));
  EXPECT_FALSE(fs::exists(w / ".data.txt.tmp.0123456789abcdef"));
  EXPECT_TRUE(fs::exists(w / ".data.txt.tmp.fedcba9876543210")) << "younger than a minute";
  EXPECT_TRUE(fs::exists(w / ".other.tmp.0123456789abcdef")) << "not this target's";
  EXPECT_EQ(slurp(target), "third\n");
}

TEST_F(CommitFileTest, AHandleThatLetItsLockGoSaysTheLockIsLost) {
  spit(target, "old\n");
  lock_handle h = lock_of(a).acquire();
  world->advance(20'000'000);
  auto b = std::make_shared<fake_os>(world, 200, 2, "elsewhere-12345678");
  lock_handle hb = lock_of(b).acquire();  // takes ours over
  std::error_code ec;
  h.refresh(ec);
  ASSERT_EQ(ec, errc::lock_lost);
  EXPECT_EQ(commit(h, "late\n"), errc::lock_lost) << "not a bad argument: the lock was ours";
  hb.release();
  lock_handle again = lock_of(a).acquire();
  again.release();
  EXPECT_EQ(commit(again, "after release\n"), errc::lock_lost);
  EXPECT_EQ(slurp(target), "old\n");
  EXPECT_TRUE(temp_files().empty());
}

// The first commit makes the workspace; if it then fails because the lock
// was taken over, it removes the workspace it made through its own token's
// name, never the new owner's.
TEST_F(CommitFileTest, AFailedFirstCommitNeverRemovesTheNewOwnersWorkspace) {
  spit(target, "old\n");
  lock_handle h = lock_of(a).acquire();
  auto b = std::make_shared<fake_os>(world, 200, 2, "elsewhere-12345678");
  std::optional<lock_handle> hb;
  a->when(op::create_exclusive, "/w/.data.txt.tmp.", [&] {
    world->advance(20'000'000);
    hb = lock_of(b).try_acquire();
    if (hb) fs::create_directories(hb->path() / "w");  // the new owner's update starts
  });
  EXPECT_EQ(commit(h, "stale\n"), errc::lock_lost);
  ASSERT_TRUE(hb && hb->owns());
  EXPECT_TRUE(fs::is_directory(hb->path() / "w")) << "the new owner's workspace was removed";
  EXPECT_EQ(slurp(target), "old\n");
  EXPECT_TRUE(temp_files().empty());
}

TEST_F(CommitFileTest, OnANetworkFilesystemALegacyFileTokenIsNotFencedNotASystemError) {
  a->filesystem = tokenlock::detail::filesystem_info{false, "nfs"};
  fs::create_directories(lock_dir);
  spit(lock_dir / "lockfile", "");
  spit(target, "old\n");
  lock_handle h = lock_of(a).acquire();
  EXPECT_EQ(commit(h, "new\n"), errc::not_fenced) << tokenlock::last_error_message();
  EXPECT_EQ(slurp(target), "old\n");
  EXPECT_TRUE(temp_files().empty());
}

// On a network filesystem the commit keeps the version mark, so that the
// next update does not take its own read of this commit for a stale one.
TEST_F(CommitFileTest, OnANetworkFilesystemTheNextUpdateAcceptsTheCommit) {
  a->filesystem = tokenlock::detail::filesystem_info{false, "fuse.test"};
  spit(target, "1\n");
  // A commit within the skew allowance of the mark is judged by the mark
  // alone: without a new one, the next update would take this commit's
  // contents for a stale read.
  const rename_lock lock = lock_of(a, 60s);
  increment(lock, 1);  // leaves a mark of "2\n"
  lock_handle h = lock.acquire();
  ASSERT_FALSE(commit(h, "40\n")) << tokenlock::last_error_message();
  h.release();
  a->calls.clear();
  EXPECT_EQ(increment(lock, 2), 42u);
  int reads = 0;
  for (const auto& c : a->calls) reads += c == "open_read " + target.string();
  EXPECT_EQ(reads, 1) << "read once: the mark matched";
  EXPECT_TRUE(temp_files().empty());
}

}  // namespace
