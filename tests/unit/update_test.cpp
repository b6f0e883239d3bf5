// update_file and increment_counter over the OS seam: the fenced commit,
// a lock lost before the commit, faults at every step, the cross-device
// fallback, and counters that are never reset.
#include <algorithm>
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <sys/stat.h>

#include <boost/filesystem.hpp>
#include <boost/filesystem/fstream.hpp>

#include "with_os.hpp"
#include "fake_os.hpp"
#include "inspect.hpp"
#include "files/file_writer.hpp"
#include "temp_dir.hpp"
#include "tokenlock/tokenlock.hpp"
#include "lockdir/token_name.hpp"
#include "files/update_impl.hpp"

namespace fs = boost::filesystem;
using namespace std::chrono_literals;
using tokenlock::errc;
using tokenlock::lock_options;
using tokenlock::rename_lock;
using tokenlock::update_options;
using tokenlock::update_result;
using tokenlock::detail::failure;
using tokenlock::testing::fake_os;
using tokenlock::testing::op;
using tokenlock::testing::fake_world;
using tokenlock::testing::snapshot;
using tokenlock::testing::temp_dir;

namespace {

using tokenlock::testing::slurp;
using tokenlock::testing::spit;

struct user_error : std::runtime_error {
  user_error() : std::runtime_error("from fn") {}
};

int count_of(const std::vector<std::string>& calls, const std::string& prefix) {
  int n = 0;
  for (auto& c : calls) n += c.rfind(prefix, 0) == 0;
  return n;
}

class UpdateTest : public ::testing::Test {
 protected:
  temp_dir tmp;
  fs::path target = tmp / "data.txt";
  fs::path lock_dir = tmp / "data.txt.lock";
  std::shared_ptr<fake_world> world = std::make_shared<fake_world>();
  std::shared_ptr<fake_os> a = std::make_shared<fake_os>(world, 100, 1);

  std::chrono::milliseconds skew = 0ms;
  rename_lock lock_of(const std::shared_ptr<fake_os>& p, std::chrono::milliseconds lease = 10s) {
    lock_options o;
    o.lease = lease;
    o.wait = 0ms;
    o.skew_allowance = skew;
    return tokenlock::detail::with_os::lock(lock_dir, o, p);
  }
  failure update(const std::string& next, update_options o = {}, update_result* r = nullptr) {
    update_result ignored;
    return tokenlock::detail::update_impl(
        *a, target, lock_of(a),
        [&](const std::optional<std::string>&, std::string& out) -> failure {
          out = next;
          return {};
        },
        o, r ? *r : ignored);
  }
  failure increment(std::uint64_t by, std::uint64_t& value) {
    update_result r;
    return tokenlock::detail::update_impl(
        *a, target, lock_of(a),
        [&](const std::optional<std::string>& cur, std::string& out) -> failure {
          std::optional<std::uint64_t> v;
          if (failure f = tokenlock::detail::parse_counter(target.string(), cur, v)) return f;
          value = v.value_or(0) + by;
          out = std::to_string(value) + "\n";
          return {};
        },
        {}, r);
  }
  // Temporary files anywhere below the test directory, token
  // directories included.
  std::vector<std::string> temp_files() const {
    return tokenlock::testing::temp_files_below(tmp.path());
  }
  bool lock_is_free() { return !lock_of(a).holder().has_value(); }
  // An update by A that stalls, past its lease, at the first `op` on a path
  // containing `where`, while B (another host) takes the lock over.
  failure update_losing_the_lock_at(op call, const char* where,
                                    std::optional<tokenlock::lock_handle>& hb) {
    auto b = std::make_shared<fake_os>(world, 200, 2, "elsewhere-12345678");
    a->when(call, where, [&, b] {
      world->advance(20'000'000);
      hb = lock_of(b).try_acquire();
    });
    failure f = update("stale\n");
    EXPECT_TRUE(hb && hb->owns());
    return f;
  }
};

TEST_F(UpdateTest, CommitsThroughTheTokensPathAndReleases) {
  spit(target, "old\n");
  update_result r;
  ASSERT_FALSE(update("new\n", {}, &r));
  EXPECT_TRUE(r.fenced);
  EXPECT_EQ(slurp(target), "new\n");
  EXPECT_TRUE(lock_is_free());
  EXPECT_TRUE(temp_files().empty());
  bool through_token = false;
  for (auto& c : a->calls)
    if (c.rfind("rename " + (lock_dir / "lockfile.").string(), 0) == 0 &&
        c.find("/.data.txt.tmp.") != std::string::npos &&
        c.find(" -> " + target.string()) != std::string::npos)
      through_token = true;
  EXPECT_TRUE(through_token) << "the commit renames D/<token>/.data.txt.tmp.* over the target";
}

TEST_F(UpdateTest, ClosesTheReplacedVersionOnlyAfterReleasingTheLock) {
  spit(target, "old\n");
  lock_of(a).acquire().release();
  a->calls.clear();
  ASSERT_FALSE(update("new\n"));
  EXPECT_EQ(slurp(target), "new\n");
  // Its last close frees its blocks, which can be slow: outside the lock.
  const auto at = [&](auto match) {
    return std::find_if(a->calls.begin(), a->calls.end(), match) - a->calls.begin();
  };
  const auto opened = at([&](const std::string& c) { return c == "open_read " + target.string(); });
  const auto closed = at([&](const std::string& c) { return c == "close " + target.string(); });
  const auto released = at([&](const std::string& c) {
    return c.rfind("rename " + (lock_dir / "lockfile.").string(), 0) == 0 &&
           c.size() > 4 && c.compare(c.size() - 9, 9, "/lockfile") == 0;
  });
  const auto end = static_cast<std::ptrdiff_t>(a->calls.size());
  ASSERT_LT(opened, end);
  ASSERT_LT(released, end) << "no release rename";
  ASSERT_LT(closed, end) << "the replaced version was never closed";
  EXPECT_LT(opened, released);
  EXPECT_GT(closed, released) << "closed while the lock was held";
  EXPECT_EQ(a->open_descriptors(), 0u);
}

TEST_F(UpdateTest, WritesInAWorkspaceInsideTheTokenMadeOnceWithTheLocksMode) {
  spit(target, "old\n");
  lock_options o;
  o.wait = 0ms;
  o.dir_mode = 0775;  // shared by a group: the umask must not narrow it
  rename_lock lock = tokenlock::detail::with_os::lock(lock_dir, o, a);
  const auto update_with = [&](const std::string& next) {
    update_result r;
    return tokenlock::detail::update_impl(
        *a, target, lock,
        [&](const std::optional<std::string>&, std::string& out) -> failure {
          out = next;
          return {};
        },
        {}, r);
  };
  a->calls.clear();
  ASSERT_FALSE(update_with("one\n"));
  EXPECT_EQ(count_of(a->calls, "make_directory " + (lock_dir / "lockfile.").string()), 1)
      << "the workspace, in the held token";
  const fs::path workspace = lock_dir / "lockfile" / "w";
  ASSERT_TRUE(fs::is_directory(workspace));
  EXPECT_EQ(fs::status(workspace).permissions(), fs::perms(0775));
  a->calls.clear();
  ASSERT_FALSE(update_with("two\n"));
  EXPECT_EQ(count_of(a->calls, "make_directory"), 0) << "made once";
  bool through_workspace = false;
  for (auto& c : a->calls)
    through_workspace |= c.rfind("rename " + (lock_dir / "lockfile.").string(), 0) == 0 &&
                         c.find("/w/.data.txt.tmp.") != std::string::npos;
  EXPECT_TRUE(through_workspace) << "the commit renames D/<token>/w/.data.txt.tmp.*";
  EXPECT_EQ(slurp(target), "two\n");
  EXPECT_TRUE(fs::is_empty(workspace));
}

TEST_F(UpdateTest, AWorkspaceThatCannotBeMadeFailsTheUpdateAndChangesNothing) {
  spit(target, "old\n");
  lock_of(a).acquire().release();
  auto before = snapshot(tmp.path());
  a->fail(op::make_directory, "/w", EACCES);
  failure f = update("new\n");
  ASSERT_TRUE(f);
  EXPECT_EQ(f.code, std::errc::permission_denied);
  EXPECT_NE(f.message.find("cannot create the workspace " + (lock_dir / "lockfile.").string()),
            std::string::npos)
      << f.message;
  EXPECT_NE(f.message.find(target.string()), std::string::npos) << f.message;
  EXPECT_EQ(slurp(target), "old\n");
  EXPECT_TRUE(temp_files().empty());
  EXPECT_TRUE(lock_is_free());
  EXPECT_EQ(snapshot(tmp.path()), before);
}

TEST_F(UpdateTest, PassesAMissingFileAsNothing) {
  bool saw_nothing = false;
  update_result r;
  ASSERT_FALSE(tokenlock::detail::update_impl(
      *a, target, lock_of(a),
      [&](const std::optional<std::string>& cur, std::string& out) -> failure {
        saw_nothing = !cur.has_value();
        out = "first\n";
        return {};
      },
      {}, r));
  EXPECT_TRUE(saw_nothing);
  EXPECT_EQ(slurp(target), "first\n");
}

TEST_F(UpdateTest, AFunctionThatThrowsChangesNothingAndReleasesTheLock) {
  spit(target, "old\n");
  auto before = slurp(target);
  rename_lock lock(lock_dir);
  EXPECT_THROW(tokenlock::update_file(target, lock,
                                      [](const std::optional<std::string>&) -> std::string {
                                        throw user_error();
                                      }),
               user_error);
  std::error_code ec;
  EXPECT_THROW(tokenlock::update_file(
                   target, lock,
                   [](const std::optional<std::string>&) -> std::string { throw user_error(); },
                   {}, ec),
               user_error)
      << "the error_code form lets it through too";
  EXPECT_EQ(slurp(target), before);
  EXPECT_FALSE(lock.holder().has_value());
  EXPECT_TRUE(temp_files().empty());
}

TEST_F(UpdateTest, ALockLostBetweenWriteAndCommitWritesNothing) {
  spit(target, "old\n");
  std::optional<tokenlock::lock_handle> hb;
  failure f = update_losing_the_lock_at(op::rename, "/.data.txt.tmp.", hb);
  EXPECT_EQ(f.code, errc::lock_lost);
  EXPECT_NE(f.message.find("nothing was written"), std::string::npos) << f.message;
  EXPECT_EQ(slurp(target), "old\n");
  EXPECT_TRUE(temp_files().empty()) << "the taker cleared the workspace";
  EXPECT_TRUE(fs::exists(lock_dir / hb->token())) << "B keeps its lock";
}

TEST_F(UpdateTest, ALockLostBeforeTheTemporaryFileIsCreatedWritesNothing) {
  spit(target, "old\n");
  std::optional<tokenlock::lock_handle> hb;
  failure f = update_losing_the_lock_at(op::create_exclusive, "/.data.txt.tmp.", hb);
  EXPECT_EQ(f.code, errc::lock_lost);
  EXPECT_EQ(slurp(target), "old\n");
  EXPECT_TRUE(temp_files().empty());
}

struct step_case {
  op call;
  const char* where;  // substring of the failing call's path
};

class UpdateFaultTest : public UpdateTest,
                        public ::testing::WithParamInterface<std::tuple<step_case, int>> {};

TEST_P(UpdateFaultTest, LeavesTheTargetIntactNoTemporaryFileAndTheLockFree) {
  const step_case& c = std::get<0>(GetParam());
  const int err = std::get<1>(GetParam());
  spit(target, "old contents\n");
  lock_of(a).acquire().release();  // the lock directory exists
  auto before = snapshot(tmp.path());
  a->fail(c.call, c.where, err);
  failure f = update("new contents\n");
  ASSERT_TRUE(f);
  EXPECT_EQ(f.code, std::error_code(err, std::generic_category()));
  EXPECT_NE(f.message.find(target.string()), std::string::npos) << f.message;
  EXPECT_EQ(slurp(target), "old contents\n");
  EXPECT_TRUE(temp_files().empty());
  EXPECT_TRUE(lock_is_free());
  EXPECT_EQ(snapshot(tmp.path()), before);
  EXPECT_EQ(a->open_descriptors(), 0u) << "the target read stays open only until we return";
}

INSTANTIATE_TEST_SUITE_P(
    EveryStep, UpdateFaultTest,
    ::testing::Combine(::testing::Values(step_case{op::open_read, "data.txt"},
                                         step_case{op::create_exclusive, ".tmp."},
                                         step_case{op::write, ".tmp."},
                                         step_case{op::sync_file, ".tmp."},
                                         step_case{op::close, ".tmp."},
                                         step_case{op::rename, ".tmp."}),
                       ::testing::Values(ENOSPC, EIO, EDQUOT)),
    [](const auto& info) {
      int e = std::get<1>(info.param);
      return std::string(tokenlock::testing::op_name(std::get<0>(info.param).call)) + "_" +
             (e == ENOSPC ? "ENOSPC" : e == EIO ? "EIO" : "EDQUOT");
    });

TEST_F(UpdateTest, IncrementCounterFaultsAtEveryStepLeaveTheCounterAsItWas) {
  const std::pair<op, const char*> steps[] = {
      {op::open_read, "data.txt"}, {op::create_exclusive, ".tmp."}, {op::write, ".tmp."},
      {op::sync_file, ".tmp."},    {op::close, ".tmp."},            {op::rename, ".tmp."}};
  spit(target, "41\n");
  lock_of(a).acquire().release();
  for (const auto& step : steps)
    for (int err : {ENOSPC, EIO, EDQUOT}) {
      a->fail(step.first, step.second, err);
      std::uint64_t v = 0;
      failure f = increment(1, v);
      EXPECT_EQ(f.code, std::error_code(err, std::generic_category())) << tokenlock::testing::op_name(step.first);
      EXPECT_EQ(slurp(target), "41\n") << tokenlock::testing::op_name(step.first);
      EXPECT_TRUE(temp_files().empty()) << tokenlock::testing::op_name(step.first);
      EXPECT_TRUE(lock_is_free()) << tokenlock::testing::op_name(step.first);
      EXPECT_EQ(a->open_descriptors(), 0u) << tokenlock::testing::op_name(step.first);
    }
  std::uint64_t v = 0;
  ASSERT_FALSE(increment(1, v));
  EXPECT_EQ(v, 42u);
}

TEST_F(UpdateTest, FallsBackToAnUnfencedCommitAcrossDevicesAndSaysSo) {
  spit(target, "old\n");
  a->fail(op::rename, "/.data.txt.tmp.", EXDEV);  // a bind mount: same st_dev, other mount
  update_result r;
  ASSERT_FALSE(update("new\n", {}, &r));
  EXPECT_FALSE(r.fenced);
  EXPECT_EQ(slurp(target), "new\n");
  EXPECT_TRUE(temp_files().empty());
  EXPECT_TRUE(lock_is_free());
}

TEST_F(UpdateTest, RefusesAnUnfencedCommitWhenFencingIsRequired) {
  spit(target, "old\n");
  a->fail(op::rename, "/.data.txt.tmp.", EXDEV);
  update_options o;
  o.require_fence = true;
  failure f = update("new\n", o);
  EXPECT_EQ(f.code, errc::not_fenced);
  EXPECT_NE(f.message.find("different filesystems"), std::string::npos) << f.message;
  EXPECT_EQ(slurp(target), "old\n");
  EXPECT_TRUE(temp_files().empty());
  EXPECT_TRUE(lock_is_free());
}

TEST_F(UpdateTest, TheUnfencedCommitChecksOwnershipJustBeforeTheRename) {
  spit(target, "old\n");
  auto b = std::make_shared<fake_os>(world, 200, 2, "elsewhere-12345678");
  std::optional<tokenlock::lock_handle> hb;
  a->fail(op::rename, "/.data.txt.tmp.", EXDEV);
  // The stall lands after the beside-the-target temporary file is written.
  a->when(op::sync_file, ".data.txt.tmp.", [&] {
    a->when(op::sync_file, ".data.txt.tmp.", [&] {
      world->advance(20'000'000);
      hb = lock_of(b).try_acquire();
    });
  });
  failure f = update("stale\n");
  ASSERT_TRUE(hb && hb->owns());
  EXPECT_EQ(f.code, errc::lock_lost);
  EXPECT_EQ(slurp(target), "old\n");
  EXPECT_TRUE(temp_files().empty());
}

TEST_F(UpdateTest, FallsBackAcrossRealFilesystems) {
  const fs::path shm = "/dev/shm";
  struct stat s1 {}, s2 {};
  if (::stat(shm.c_str(), &s1) != 0 || ::stat(tmp.path().c_str(), &s2) != 0 || s1.st_dev == s2.st_dev)
    GTEST_SKIP() << "needs /dev/shm on another filesystem";
  temp_dir dummy;
  fs::path other = shm / fs::unique_path("tokenlock-test-%%%%-%%%%.lock");
  rename_lock lock(other);
  spit(target, "old\n");
  update_result r = tokenlock::update_file(
      target, lock, [](const std::optional<std::string>& c) { return *c + "more\n"; });
  EXPECT_FALSE(r.fenced);
  EXPECT_EQ(slurp(target), "old\nmore\n");
  update_options o;
  o.require_fence = true;
  std::error_code ec;
  tokenlock::update_file(target, lock, [](const std::optional<std::string>&) { return "x"; }, o, ec);
  EXPECT_EQ(ec, errc::not_fenced);
  EXPECT_EQ(slurp(target), "old\nmore\n");
  fs::remove_all(other);
}

TEST_F(UpdateTest, SweepsThisTargetsStaleTemporaryFilesWhileHoldingTheLock) {
  world->wall_us = std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  spit(tmp / ".data.txt.tmp.0123456789abcdef", "crashed");
  spit(tmp / ".data.txt.tmp.fedcba9876543210", "fresh");
  spit(tmp / ".other.tmp.0123456789abcdef", "another target's");
  fs::last_write_time(tmp / ".data.txt.tmp.0123456789abcdef", std::time(nullptr) - 3600);
  fs::last_write_time(tmp / ".other.tmp.0123456789abcdef", std::time(nullptr) - 3600);
  update_options o;
  o.sweep_every = 0;
  ASSERT_FALSE(update("x\n", o));
  EXPECT_TRUE(fs::exists(tmp / ".data.txt.tmp.0123456789abcdef")) << "sweeping is off";
  o.sweep_every = 1;
  ASSERT_FALSE(update("x\n", o));
  EXPECT_FALSE(fs::exists(tmp / ".data.txt.tmp.0123456789abcdef"));
  EXPECT_TRUE(fs::exists(tmp / ".data.txt.tmp.fedcba9876543210")) << "younger than the lease";
  EXPECT_TRUE(fs::exists(tmp / ".other.tmp.0123456789abcdef")) << "not this target's";
}

// A legacy setup made "lockfile" a plain file: the lock works, but the
// commit cannot go through the token, so it is made beside the target
// (unfenced, and said so), or refused with require_fence.
TEST_F(UpdateTest, ATokenThatIsAFileCommitsUnfencedOrIsRefusedWithRequireFence) {
  fs::create_directories(lock_dir);
  spit(lock_dir / "lockfile", "");
  spit(target, "old\n");
  update_options strict;
  strict.require_fence = true;
  const failure refused = update("new\n", strict);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused.code, errc::not_fenced);
  EXPECT_NE(refused.message.find("is a file, not a directory"), std::string::npos)
      << refused.message;
  EXPECT_EQ(slurp(target), "old\n");
  EXPECT_TRUE(lock_is_free());
  update_result r;
  ASSERT_FALSE(update("new\n", {}, &r));
  EXPECT_FALSE(r.fenced);
  EXPECT_EQ(slurp(target), "new\n");
  EXPECT_TRUE(fs::is_regular_file(lock_dir / "lockfile")) << "released as it was";
  EXPECT_TRUE(temp_files().empty());
}

// The lock's own leftovers are the lock's to sweep (rename_lock_test.cpp):
// the update touches nothing beside the lock directory, even when it sweeps
// the target's temporary files.
TEST_F(UpdateTest, LeavesTheLockDirectorysCreationLeftoversToTheLock) {
  ASSERT_FALSE(update("x\n"));
  const std::string owner_gone = "data.txt.lock.init." +
      tokenlock::detail::make_token(world->wall_us + 10'000'000, "testhost-0000abcd", 4242, 9, 1)
          .substr(9);
  fs::create_directories(tmp / owner_gone / "lockfile");
  update_options o;
  o.sweep_every = 1;
  ASSERT_FALSE(update("z\n", o));
  EXPECT_TRUE(fs::exists(tmp / owner_gone / "lockfile"));
  EXPECT_EQ(slurp(target), "z\n");
  EXPECT_TRUE(temp_files().empty());
}

// ---- counters ------------------------------------------------------------------

TEST_F(UpdateTest, CountsFromAMissingFile) {
  std::uint64_t v = 0;
  ASSERT_FALSE(increment(1, v));
  EXPECT_EQ(v, 1u);
  ASSERT_FALSE(increment(41, v));
  EXPECT_EQ(v, 42u);
  EXPECT_EQ(slurp(target), "42\n");
  rename_lock lock(lock_dir);
  EXPECT_EQ(tokenlock::increment_counter(target, lock), 43u);
  EXPECT_EQ(tokenlock::read_counter(target), 43u);
  EXPECT_FALSE(tokenlock::read_counter(tmp / "none").has_value());
}

class CorruptCounterTest : public UpdateTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(CorruptCounterTest, IsNeverOverwritten) {
  spit(target, GetParam());
  auto before = snapshot(tmp.path());
  rename_lock lock(lock_dir);
  lock.acquire().release();
  before = snapshot(tmp.path());
  std::error_code ec;
  EXPECT_EQ(tokenlock::increment_counter(target, lock, 1, {}, ec), 0u);
  EXPECT_EQ(ec, errc::corrupt_data);
  EXPECT_NE(tokenlock::last_error_message().find("left as it is"), std::string::npos);
  EXPECT_EQ(slurp(target), GetParam()) << "byte for byte";
  EXPECT_EQ(snapshot(tmp.path()), before);
  EXPECT_FALSE(lock.holder().has_value());
  EXPECT_THROW(tokenlock::read_counter(target), tokenlock::lock_error);
}

INSTANTIATE_TEST_SUITE_P(Contents, CorruptCounterTest,
                         ::testing::Values("", "abc\n", "-1\n", "12", "12\n\n", " 12\n", "012\n",
                                           "1.5\n", "18446744073709551616\n",
                                           "99999999999999999999999\n", std::string("1\0\n", 3),
                                           "\xff\xfe\n"));

TEST_F(UpdateTest, RefusesToOverflowAndLeavesTheCounter) {
  spit(target, "18446744073709551615\n");
  rename_lock lock(lock_dir);
  std::error_code ec;
  tokenlock::increment_counter(target, lock, 1, {}, ec);
  EXPECT_EQ(ec, std::errc::value_too_large);
  EXPECT_EQ(slurp(target), "18446744073709551615\n");
}

TEST_F(UpdateTest, ADirectorySyncFailureStillHandsOutTheCommittedValue) {
  spit(target, "7\n");
  lock_of(a).acquire().release();  // the lock directory's own syncs are done
  a->fail(op::sync_directory, tmp.path().string(), EIO);
  std::uint64_t v = 0;
  failure f = increment(1, v);
  EXPECT_EQ(f.code, errc::dir_sync_failed);
  EXPECT_NE(f.message.find("do not repeat"), std::string::npos) << f.message;
  EXPECT_EQ(slurp(target), "8\n");
  EXPECT_TRUE(lock_is_free());
}

// The flush that makes the update durable runs after the release, so the
// next holder need not wait for it; the file's own flush stays inside.
TEST_F(UpdateTest, FlushesTheDirectoryAfterReleasingTheLock) {
  spit(target, "7\n");
  lock_of(a).acquire().release();  // the lock directory's own syncs are done
  bool free_at_dir_sync = false;
  a->when(op::sync_directory, tmp.path().string(), [&] { free_at_dir_sync = lock_is_free(); });
  std::uint64_t v = 0;
  ASSERT_FALSE(increment(1, v)) << "the increment failed";
  EXPECT_EQ(v, 8u);
  EXPECT_TRUE(free_at_dir_sync) << "the directory was flushed while the lock was held";

  bool held_at_file_sync = false;
  a->when(op::sync_file, lock_dir.string(), [&] { held_at_file_sync = !lock_is_free(); });
  ASSERT_FALSE(increment(1, v)) << "the increment failed";
  EXPECT_TRUE(held_at_file_sync) << "the temporary file was not flushed under the lock";
  EXPECT_EQ(v, 9u);
  EXPECT_EQ(slurp(target), "9\n");
}


// On a network filesystem each commit leaves a mark of what it committed in
// the lock's workspace, and the next holder checks what it read against it
// (update.cpp, The version mark). A client that serves a stale version is
// played by fake_os::serve_stale: its open of the target opens a decoy that
// holds an older version with an older modification time.
class VersionMarkTest : public UpdateTest {
 protected:
  fs::path decoy = tmp / "old-copy";
  void SetUp() override { a->filesystem = tokenlock::detail::filesystem_info{false, "fuse.test"}; }
  std::vector<std::string> marks() const {
    std::vector<std::string> out;
    for (auto& token : fs::directory_iterator(lock_dir))
      if (fs::is_directory(token.path() / "w"))
        for (auto& e : fs::directory_iterator(token.path() / "w"))
          if (e.path().filename().string().rfind("v.", 0) == 0)
            out.push_back(e.path().filename().string());
    return out;
  }
  // The decoy: `text`, last modified `age` before the target.
  void make_decoy(const std::string& text, std::chrono::seconds age) {
    spit(decoy, text);
    fs::last_write_time(decoy, fs::last_write_time(target) - age.count());
  }
};

TEST_F(VersionMarkTest, EachCommitLeavesOneMarkOfWhatItCommitted) {
  std::uint64_t v = 0;
  for (int i = 0; i < 3; ++i) ASSERT_FALSE(increment(1, v));
  EXPECT_EQ(v, 3u);
  const auto m = marks();
  ASSERT_EQ(m.size(), 1u);
  char hash[32];
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : std::string("3\n")) h = (h ^ c) * 0x100000001b3ULL;
  std::snprintf(hash, sizeof hash, "v.%016llx.", static_cast<unsigned long long>(h));
  EXPECT_EQ(m[0].rfind(hash, 0), 0u) << m[0];
  EXPECT_TRUE(temp_files().empty());
}

TEST_F(VersionMarkTest, AStaleReadIsReadAgainUntilTheCommittedVersionComes) {
  std::uint64_t v = 0;
  for (int i = 0; i < 5; ++i) ASSERT_FALSE(increment(1, v));
  make_decoy("3\n", 10s);
  a->serve_stale(target.string(), decoy.string(), 2);  // two stale reads, then the truth
  a->calls.clear();
  ASSERT_FALSE(increment(1, v));
  EXPECT_EQ(v, 6u) << "computed from the committed 5, not the stale 3";
  EXPECT_EQ(slurp(target), "6\n");
  EXPECT_EQ(count_of(a->calls, "open_read " + target.string()), 3);
  EXPECT_EQ(count_of(a->calls, "sleep_for"), 2);
  EXPECT_EQ(marks().size(), 1u);
  EXPECT_TRUE(temp_files().empty());
  EXPECT_TRUE(lock_is_free());
}

TEST_F(VersionMarkTest, AClientThatStaysStaleFailsWithStaleDataAndWritesNothing) {
  std::uint64_t v = 0;
  for (int i = 0; i < 5; ++i) ASSERT_FALSE(increment(1, v));
  make_decoy("3\n", 10s);
  a->serve_stale(target.string(), decoy.string(), -1);
  const auto before = snapshot(tmp.path());
  const auto start = world->steady_us;
  failure f = increment(1, v);
  EXPECT_EQ(f.code, errc::stale_data);
  EXPECT_EQ(world->steady_us - start, 2'500'000) << "a quarter of the 10 s lease";
  EXPECT_NE(f.message.find(target.string()), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("fuse.test"), std::string::npos) << "names the filesystem: " << f.message;
  EXPECT_NE(f.message.find("performance.stat-prefetch off"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("nothing was written"), std::string::npos) << f.message;
  EXPECT_EQ(slurp(target), "5\n");
  EXPECT_EQ(snapshot(tmp.path()), before);
  EXPECT_TRUE(temp_files().empty());
  EXPECT_TRUE(lock_is_free());
}

TEST_F(VersionMarkTest, AFileChangedByHandAfterTheLastCommitIsTakenAsItIs) {
  std::uint64_t v = 0;
  for (int i = 0; i < 2; ++i) ASSERT_FALSE(increment(1, v));
  spit(target, "41\n");
  fs::last_write_time(target, fs::last_write_time(target) + 5);  // after the mark, past the skew
  a->calls.clear();
  ASSERT_FALSE(increment(1, v));
  EXPECT_EQ(v, 42u);
  EXPECT_EQ(count_of(a->calls, "open_read " + target.string()), 1) << "no re-read";
  EXPECT_EQ(marks().size(), 1u);
}

// A client that keeps an older size cuts a read there (sshfs's default
// mount), and its attributes may expire between the read and the fstat
// after it: the bytes are cut short while the time is the new version's,
// past the mark. That read is no version of its own: it is read again.
TEST_F(VersionMarkTest, AReadCutShortByACachedSizeIsReadAgain) {
  std::uint64_t v = 0;
  for (int i = 0; i < 2; ++i) ASSERT_FALSE(increment(1, v));
  spit(target, "41\n");
  fs::last_write_time(target, fs::last_write_time(target) + 5);  // after the mark, past the skew
  make_decoy("4", 0s);  // "41\n" cut at an older size of 1 byte
  a->serve_stale(target.string(), decoy.string(), 1);
  // The fstat before the read sees the cached size; the one after it, the
  // new version's size and time.
  a->when(op::file_status_of, target.string(), [&] {
    a->when(op::file_status_of, target.string(), [&] {
      spit(decoy, "41\n");
      fs::last_write_time(decoy, fs::last_write_time(target));
    });
  });
  a->calls.clear();
  ASSERT_FALSE(increment(1, v)) << "a cut-short read was taken for a corrupt counter";
  EXPECT_EQ(v, 42u);
  EXPECT_EQ(slurp(target), "42\n");
  EXPECT_EQ(count_of(a->calls, "open_read " + target.string()), 2) << "read again once";
  EXPECT_TRUE(temp_files().empty());
  EXPECT_TRUE(lock_is_free());
}

// A legacy script that writes the file a moment after a commit: newer than
// the mark, within the skew allowance. Read again for the whole wait and
// always the same, it is taken as written outside the lock, not refused
// for ever.
TEST_F(VersionMarkTest, AFileWrittenJustAfterTheLastCommitIsTakenAfterTheWait) {
  skew = 5s;
  std::uint64_t v = 0;
  for (int i = 0; i < 2; ++i) ASSERT_FALSE(increment(1, v));
  spit(target, "41\n");
  fs::last_write_time(target, fs::last_write_time(target) + 1);  // after the mark, within the skew
  const auto start = world->steady_us;
  ASSERT_FALSE(increment(1, v));
  EXPECT_EQ(v, 42u);
  EXPECT_EQ(world->steady_us - start, 2'500'000) << "after the whole wait";
  EXPECT_EQ(marks().size(), 1u);
  EXPECT_TRUE(temp_files().empty());
}

// A stale cache serves the version the commit replaced, older than the
// mark: still refused, however long it stays.
TEST_F(VersionMarkTest, AStaleVersionOlderThanTheMarkIsStillRefusedWithASkewAllowance) {
  skew = 5s;
  std::uint64_t v = 0;
  for (int i = 0; i < 5; ++i) ASSERT_FALSE(increment(1, v));
  make_decoy("3\n", 1s);
  a->serve_stale(target.string(), decoy.string(), -1);
  failure f = increment(1, v);
  EXPECT_EQ(f.code, errc::stale_data);
  EXPECT_EQ(slurp(target), "5\n");
  EXPECT_TRUE(temp_files().empty());
  EXPECT_TRUE(lock_is_free());
}

TEST_F(VersionMarkTest, WithoutAMarkTheFirstUpdateProceedsAndLeavesOne) {
  spit(target, "9\n");
  std::uint64_t v = 0;
  ASSERT_FALSE(increment(1, v));
  EXPECT_EQ(v, 10u);
  EXPECT_EQ(marks().size(), 1u);
}

TEST_F(VersionMarkTest, OnALocalFilesystemNoMarkIsKeptOrRead) {
  a->filesystem = tokenlock::detail::filesystem_info{true, "ext4"};
  std::uint64_t v = 0;
  a->calls.clear();
  for (int i = 0; i < 3; ++i) ASSERT_FALSE(increment(1, v));
  EXPECT_TRUE(marks().empty());
  for (const auto& c : a->calls)
    EXPECT_FALSE(c.rfind("list_directory", 0) == 0 && c.find("/w") != std::string::npos) << c;
  // A stale read cannot happen there; were it played, nothing would see it.
  make_decoy("1\n", 10s);
  a->serve_stale(target.string(), decoy.string(), 1);
  ASSERT_FALSE(increment(1, v));
  EXPECT_EQ(v, 2u);
}


TEST_F(VersionMarkTest, AStaleFileHandleIsOpenedAgainUntilTheNameLeadsToTheFile) {
  std::uint64_t v = 0;
  ASSERT_FALSE(increment(1, v));
  a->fail(op::open_read, target.string(), ESTALE, 2);  // GlusterFS's cached gfid, twice
  ASSERT_FALSE(increment(1, v));
  EXPECT_EQ(v, 2u);
  EXPECT_EQ(slurp(target), "2\n");
  EXPECT_TRUE(temp_files().empty());
}

TEST_F(VersionMarkTest, AStaleFileHandleThatStaysFailsWithStaleDataNamingIt) {
  std::uint64_t v = 0;
  ASSERT_FALSE(increment(1, v));
  a->fail(op::open_read, target.string(), ESTALE, -1);
  const auto before = snapshot(tmp.path());
  failure f = increment(1, v);
  EXPECT_EQ(f.code, errc::stale_data);
  EXPECT_NE(f.message.find("Stale file handle"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("fuse.test"), std::string::npos) << f.message;
  EXPECT_EQ(snapshot(tmp.path()), before);
  EXPECT_EQ(slurp(target), "1\n");
  EXPECT_TRUE(lock_is_free());
}

TEST_F(VersionMarkTest, OnALocalFilesystemAStaleFileHandleIsAnErrorAtOnce) {
  a->filesystem = tokenlock::detail::filesystem_info{true, "ext4"};
  std::uint64_t v = 0;
  ASSERT_FALSE(increment(1, v));
  a->fail(op::open_read, target.string(), ESTALE, -1);
  a->calls.clear();
  failure f = increment(1, v);
  EXPECT_EQ(f.code, std::error_code(ESTALE, std::generic_category()));
  EXPECT_EQ(count_of(a->calls, "sleep_for"), 0);
  EXPECT_EQ(slurp(target), "1\n");
  EXPECT_TRUE(lock_is_free());
}


TEST_F(UpdateTest, ALookupThatMissesOurTokenIsCheckedAgainstAListingBeforeGivingUp) {
  // A network client answered the lookup from a stale cache; the server
  // still has the token, and the listing shows it.
  spit(target, "7\n");
  a->fail(op::status, "/lockfile.", ENOENT, 1);
  std::uint64_t v = 0;
  failure f = increment(1, v);
  EXPECT_FALSE(f) << f.message;
  EXPECT_EQ(v, 8u);
  EXPECT_EQ(slurp(target), "8\n");
  EXPECT_TRUE(lock_is_free());
  EXPECT_TRUE(temp_files().empty());
}


TEST_F(UpdateTest, AWorkspaceThatALookupMissedButExistsIsUsed) {
  // A network client said ENOENT for the workspace, then mkdir said EEXIST.
  std::uint64_t v = 0;
  ASSERT_FALSE(increment(1, v));
  a->fail(op::open_directory, "/w", ENOENT, 1);
  failure f = increment(1, v);
  EXPECT_FALSE(f) << f.message;
  EXPECT_EQ(v, 2u);
  EXPECT_EQ(slurp(target), "2\n");
  EXPECT_TRUE(lock_is_free());
  EXPECT_TRUE(temp_files().empty());
}

}  // namespace
