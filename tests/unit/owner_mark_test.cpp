// Owner marks (lib/src/lockdir/token_mark.hpp): on a filesystem whose rename can
// move a directory through a name it no longer has (GlusterFS), a second
// rename of "lockfile" can move a held token to another acquirer's name.
// These tests play that rename with real renames in a temporary directory,
// as the other client's stale cache would make it, and check that exactly
// one process ends up holding the lock, with nothing of the other left.
#include <algorithm>
#include <gtest/gtest.h>

#include <cerrno>
#include <fstream>

#include <boost/filesystem.hpp>

#include "with_os.hpp"
#include "fake_os.hpp"
#include "temp_dir.hpp"
#include "lockdir/token_name.hpp"
#include "tokenlock/tokenlock.hpp"

namespace fs = boost::filesystem;
using namespace std::chrono_literals;
using tokenlock::errc;
using tokenlock::lock_error;
using tokenlock::lock_handle;
using tokenlock::lock_options;
using tokenlock::rename_lock;
using tokenlock::detail::filesystem_info;
using tokenlock::testing::fake_os;
using tokenlock::testing::op;
using tokenlock::testing::fake_world;
using tokenlock::testing::temp_dir;

namespace {

const filesystem_info gluster{false, "fuse.glusterfs"};

class OwnerMarkTest : public ::testing::Test {
 protected:
  temp_dir tmp;
  fs::path dir = tmp / "data.lock";
  std::shared_ptr<fake_world> world = std::make_shared<fake_world>();

  std::shared_ptr<fake_os> process(int pid, filesystem_info fsi = gluster) {
    auto p = std::make_shared<fake_os>(world, pid, 5000 + static_cast<std::uint64_t>(pid));
    p->filesystem = fsi;
    return p;
  }
  static lock_options options() {
    lock_options o;
    o.lease = 10s;
    o.wait = 0ms;
    o.skew_allowance = 100ms;
    return o;
  }
  rename_lock lock_for(const std::shared_ptr<fake_os>& p) { return tokenlock::detail::with_os::lock(dir, options(), p); }
  static std::vector<std::string> list(const fs::path& d) {
    std::vector<std::string> out;
    for (auto& e : fs::directory_iterator(d)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::vector<std::string> entries() const { return list(dir); }
  // A held token of a process of this world, as its own acquisition names it.
  std::string token_of(int pid, std::int64_t expiry_us, const std::string& host = "testhost-0000abcd") {
    return tokenlock::detail::make_token(expiry_us, host, pid, 5000 + static_cast<std::uint64_t>(pid),
                                         0x5151);
  }
  static std::string mark_of(const std::string& token) {
    return tokenlock::detail::owner_mark_name(token);
  }
  // A token of a dead process (pid 999 or 998 are not running), judged stale.
  std::string plant_dead_token(int pid) {
    fs::create_directories(dir);
    const std::string t = token_of(pid, world->wall_us + 10'000'000);
    fs::create_directory(dir / t);
    return t;
  }
  // Makes `p`'s next owner mark find a live mark of process 300, which took
  // the same token first (and, with `workspace`, began an update in it);
  // returns 300's token name.
  std::string before_marking_300_took_it(const std::shared_ptr<fake_os>& p, bool workspace) {
    process(300);
    const std::string tc = token_of(300, world->wall_us + 10'000'000);
    p->when(op::make_directory, "/h.", [this, tc, workspace] {
      const fs::path x = dir / list(dir).front();
      fs::create_directory(x / mark_of(tc));
      if (workspace) {
        fs::create_directories(x / "w");
        std::ofstream(x / "w" / ".data.tmp.1") << "300's update";
      }
    });
    return tc;
  }
  // The lock, created and free.
  void make_free() {
    auto p = process(1);
    lock_for(p).acquire().release();
    ASSERT_EQ(entries(), std::vector<std::string>{"lockfile"});
  }
};

template <class F>
std::string message_of(F f) {
  try {
    f();
  } catch (const lock_error& e) {
    return e.what();
  }
  return {};
}

TEST_F(OwnerMarkTest, AHolderOnGlusterFsLeavesItsMarkAndRemovesItBeforeReleasing) {
  make_free();
  auto a = process(100);
  lock_handle h = lock_for(a).acquire();
  EXPECT_EQ(list(dir / h.token()), std::vector<std::string>{mark_of(h.token())});
  h.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(list(dir / "lockfile").empty()) << "a mark left in the free token";
}

TEST_F(OwnerMarkTest, FilesystemsThatRenameByNameGetNoMarks) {
  make_free();
  for (const filesystem_info& fsi :
       {filesystem_info{true, "ext4"}, filesystem_info{false, "fuse.sshfs"},
        filesystem_info{false, "fuse.mfs"}, filesystem_info{false, "nfs4"},
        filesystem_info{false, "nfs"}, filesystem_info{false, "cifs"},
        filesystem_info{false, "smb3"}, filesystem_info{false, "ceph"}}) {
    auto a = process(100, fsi);
    lock_handle h = lock_for(a).acquire();
    EXPECT_TRUE(list(dir / h.token()).empty()) << fsi.name;
    h.release();
    for (const std::string& c : a->calls)
      EXPECT_EQ(c.find("/h."), std::string::npos) << fsi.name << ": " << c;
  }
}

TEST_F(OwnerMarkTest, UnknownNetworkFilesystemsAndUnanswerableOnesGetMarks) {
  make_free();
  auto a = process(100, filesystem_info{false, "fuse.somethingnew"});
  lock_handle h = lock_for(a).acquire();
  EXPECT_EQ(list(dir / h.token()), std::vector<std::string>{mark_of(h.token())});
  h.release();

  auto b = process(200, filesystem_info{true, "ext4"});
  b->fail(op::filesystem_of, "data.lock", EACCES, -1);
  lock_handle g = lock_for(b).acquire();
  EXPECT_EQ(list(dir / g.token()), std::vector<std::string>{mark_of(g.token())});
  g.release();
  EXPECT_TRUE(list(dir / "lockfile").empty());
}

TEST_F(OwnerMarkTest, TheFilesystemIsAskedOncePerLock) {
  make_free();
  auto a = process(100);
  rename_lock lock = lock_for(a);
  lock.acquire().release();
  lock.acquire().release();
  // Once for the type, once for its name (it is not local).
  EXPECT_EQ(std::count_if(a->calls.begin(), a->calls.end(),
                          [](const std::string& c) { return c.rfind("filesystem_of", 0) == 0; }),
            2);
}

// The thief's side: its rename of "lockfile" moved a token that another
// process had just taken (GlusterFS resolved the name through a stale
// cache). It finds the other's live mark and gives the token back.
TEST_F(OwnerMarkTest, ARenameThatMovedSomeoneElsesTokenGivesItBackAndWaits) {
  make_free();
  auto a = process(100), b = process(200);
  lock_handle ha = lock_for(a).acquire();
  const std::string ta = ha.token();
  bool mark_inside_while_handing_back = false;
  b->when(op::rename, "data.lock/lockfile", [&] {
    fs::rename(dir / ta, dir / "lockfile");
    // Until the token has its owner's name again, b's mark stays in it, so
    // that whoever takes it meanwhile through a stale name steps back too.
    b->when(op::rename, ".200.", [&] {
      for (const std::string& n : list(dir / list(dir).front()))
        if (n.find(".200.") != std::string::npos) mark_inside_while_handing_back = true;
    });
  });
  EXPECT_FALSE(lock_for(b).try_acquire().has_value());
  EXPECT_TRUE(mark_inside_while_handing_back);
  EXPECT_EQ(entries(), std::vector<std::string>{ta});
  EXPECT_EQ(list(dir / ta), std::vector<std::string>{mark_of(ta)});
  ha.release();  // the rightful holder's release still finds its token
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  lock_handle hb = lock_for(b).acquire();
  EXPECT_TRUE(hb.owns());
}

// The victim's side, first case: the other rename moved our token before we
// could mark it. Our mark cannot be made (ENOENT): we hold nothing.
TEST_F(OwnerMarkTest, AHolderWhoseTokenWasMovedBeforeItsMarkHoldsNothing) {
  make_free();
  auto a = process(100);
  process(200);  // the thief, alive
  const std::string tb = token_of(200, world->wall_us + 10'000'000);
  a->when(op::make_directory, "/h.", [&] {
    const std::string ta = list(dir).front();
    fs::rename(dir / ta, dir / tb);
    fs::create_directory(dir / tb / mark_of(tb));
  });
  EXPECT_FALSE(lock_for(a).try_acquire().has_value());
  EXPECT_EQ(entries(), std::vector<std::string>{tb});
  EXPECT_EQ(list(dir / tb), std::vector<std::string>{mark_of(tb)});
}

// The victim's side, second case: both marks landed in the one directory
// (our name still reached it). The one that marked second sees both and
// steps back, handing the directory to the other's name.
TEST_F(OwnerMarkTest, AHolderThatFindsAnotherLiveMarkStepsBack) {
  make_free();
  auto a = process(100);
  process(200);
  const std::string tb = token_of(200, world->wall_us + 10'000'000);
  a->when(op::list_directory, "data.lock/lockfile.", [&] {
    const std::string ta = list(dir).front();
    fs::create_directory(dir / ta / mark_of(tb));
  });
  const std::string message = message_of([&] { lock_for(a).acquire(); });
  EXPECT_NE(message.find("held by pid 200 on this host"), std::string::npos) << message;
  EXPECT_EQ(entries(), std::vector<std::string>{tb});
  EXPECT_EQ(list(dir / tb), std::vector<std::string>{mark_of(tb)}) << "our mark was left";
}

TEST_F(OwnerMarkTest, MarksOfDeadOrExpiredOwnersAreRemoved) {
  make_free();
  // Left in the free token by owners that died: pid 999 is not running, and
  // the other host's lease ended long ago.
  const std::string dead = token_of(999, world->wall_us + 10'000'000);
  const std::string expired = token_of(7, world->wall_us - 60'000'000, "elsewhere-12345678");
  fs::create_directory(dir / "lockfile" / mark_of(dead));
  fs::create_directory(dir / "lockfile" / mark_of(expired));
  auto a = process(100);
  lock_handle h = lock_for(a).acquire();
  EXPECT_EQ(list(dir / h.token()), std::vector<std::string>{mark_of(h.token())});
  h.release();
  EXPECT_TRUE(list(dir / "lockfile").empty());
}

TEST_F(OwnerMarkTest, EntriesThatAreNotMarksAreNotOwners) {
  make_free();
  fs::create_directory(dir / "lockfile" / "h.not-a-token");
  auto a = process(100);
  lock_handle h = lock_for(a).acquire();
  EXPECT_TRUE(h.owns());
  h.release();
}

TEST_F(OwnerMarkTest, ATakeoverRemovesTheStaleOwnersMarkAndWorkspaceButNotALiveMark) {
  const std::string stale = plant_dead_token(999);
  fs::create_directories(dir / stale / "w");
  fs::create_directory(dir / stale / mark_of(stale));
  auto a = process(100);
  lock_handle h = lock_for(a).acquire();
  EXPECT_EQ(list(dir / h.token()), std::vector<std::string>{mark_of(h.token())});
  h.release();

  // Another process took the same stale token at the same moment, marked
  // it and began an update: ours steps back and leaves all that alone.
  fs::remove(dir / "lockfile");
  const std::string stale2 = plant_dead_token(998);
  const std::string tc = before_marking_300_took_it(a, true);
  EXPECT_FALSE(lock_for(a).try_acquire().has_value());
  EXPECT_EQ(entries(), std::vector<std::string>{tc});
  EXPECT_EQ(list(dir / tc), (std::vector<std::string>{mark_of(tc), "w"}));
  EXPECT_EQ(list(dir / tc / "w"), std::vector<std::string>{".data.tmp.1"})
      << "the workspace of the process that holds the token was cleared";
}

TEST_F(OwnerMarkTest, AMarkThatCannotBeMadeFailsTheAcquisitionAndLeavesTheLockFree) {
  make_free();
  auto a = process(100);
  a->fail(op::make_directory, "/h.", EACCES);
  const std::string message = message_of([&] { lock_for(a).acquire(); });
  EXPECT_NE(message.find("cannot make the owner mark in lockfile."), std::string::npos) << message;
  EXPECT_NE(message.find(dir.string()), std::string::npos) << message;
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(list(dir / "lockfile").empty());

  a->fail(op::list_directory, "data.lock/lockfile.", EIO);
  std::error_code ec;
  lock_handle h = lock_for(a).acquire(ec);
  EXPECT_EQ(ec, std::errc::io_error);
  EXPECT_FALSE(h.owns());
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(list(dir / "lockfile").empty());
}

// GlusterFS answers ESTALE now and then for a name another client renamed.
// Once is mended by asking again; if it persists, the token may no longer
// be ours, and a rename through our name might move another holder's: the
// acquisition holds nothing and renames nothing more.
TEST_F(OwnerMarkTest, AStaleHandleIsAskedAgainAndWhenItPersistsNothingIsRenamed) {
  make_free();
  auto a = process(100);
  a->fail(op::make_directory, "/h.", ESTALE, 2);
  a->fail(op::list_directory, "data.lock/lockfile.", ESTALE, 2);
  lock_handle h = lock_for(a).acquire();
  EXPECT_EQ(list(dir / h.token()), std::vector<std::string>{mark_of(h.token())});
  h.release();
  EXPECT_TRUE(list(dir / "lockfile").empty());

  a->fail(op::make_directory, "/h.", ESTALE, -1);
  a->calls.clear();
  EXPECT_FALSE(lock_for(a).try_acquire().has_value());
  const std::vector<std::string> held = entries();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_NE(held[0], "lockfile") << "left as it was: ours until its lease ends";
  EXPECT_TRUE(list(dir / held[0]).empty());
  EXPECT_EQ(std::count_if(a->calls.begin(), a->calls.end(),
                          [](const std::string& c) { return c.rfind("rename", 0) == 0; }),
            1)
      << "only the acquiring rename";
}

TEST_F(OwnerMarkTest, AReleaseThatCannotRemoveItsMarkKeepsTheLockAndCanBeRetried) {
  make_free();
  auto a = process(100);
  lock_handle h = lock_for(a).acquire();
  const std::string token = h.token();
  a->fail(op::remove_directory, "/h.", EIO);
  std::error_code ec;
  h.release(ec);
  EXPECT_EQ(ec, std::errc::io_error);
  EXPECT_NE(tokenlock::last_error_message().find("cannot remove our owner mark"), std::string::npos)
      << tokenlock::last_error_message();
  EXPECT_TRUE(h.owns());
  EXPECT_EQ(entries(), std::vector<std::string>{token});
  h.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(list(dir / "lockfile").empty());
}

TEST_F(OwnerMarkTest, ARefreshRenamesTheMarkAndAnAdoptedTokenReleasesIt) {
  make_free();
  auto a = process(100);
  lock_handle h = lock_for(a).acquire();
  world->advance(1'000'000);
  h.refresh();
  EXPECT_EQ(list(dir / h.token()), std::vector<std::string>{mark_of(h.token())});
  // Another command releases it by name (tokenlock release TOKEN).
  const std::string token = h.detach();
  lock_handle adopted = lock_for(process(100)).adopt(token);
  adopted.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(list(dir / "lockfile").empty());
}

TEST_F(OwnerMarkTest, BreakMarksAndStepsBackFromAConcurrentTaker) {
  const std::string stale = plant_dead_token(999);
  auto a = process(100);
  lock_handle h = lock_for(a).take_over(stale, false);
  EXPECT_EQ(list(dir / h.token()), std::vector<std::string>{mark_of(h.token())});
  h.release();

  fs::remove(dir / "lockfile");
  const std::string stale2 = plant_dead_token(998);
  const std::string tc = before_marking_300_took_it(a, false);
  const std::string message = message_of([&] { lock_for(a).take_over(stale2, false); });
  EXPECT_NE(message.find("another process took " + stale2 + " at the same moment"), std::string::npos)
      << message;
  EXPECT_EQ(entries(), std::vector<std::string>{tc});
}

// A mark that named the first lease would look expired after that lease
// ends, though its owner refreshed: the thief would then hold beside it.
TEST_F(OwnerMarkTest, ARefreshedHolderIsStillSeenLiveAfterItsFirstLeaseEnds) {
  make_free();
  auto a = process(100), b = process(200);
  lock_handle ha = lock_for(a).acquire();
  for (int i = 0; i < 3; ++i) {
    world->advance(8'000'000);  // 10 s leases: the first one has ended
    ha.refresh();
  }
  const std::string ta = ha.token();
  b->when(op::rename, "data.lock/lockfile", [&] { fs::rename(dir / ta, dir / "lockfile"); });
  EXPECT_FALSE(lock_for(b).try_acquire().has_value());
  EXPECT_EQ(entries(), std::vector<std::string>{ta}) << "not handed back to the current name";
  EXPECT_EQ(list(dir / ta), std::vector<std::string>{mark_of(ta)});
  ha.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
}

TEST_F(OwnerMarkTest, ARefreshThatCannotRenameTheMarkSaysSoAndTheReleaseStillFindsIt) {
  make_free();
  auto a = process(100);
  lock_handle h = lock_for(a).acquire();
  const std::string first = h.token();
  world->advance(1'000'000);
  a->fail(op::rename, "/h.", EIO);
  std::error_code ec;
  h.refresh(ec);
  EXPECT_EQ(ec, std::errc::io_error);
  EXPECT_NE(tokenlock::last_error_message().find("the lease was renewed, but our owner mark"),
            std::string::npos)
      << tokenlock::last_error_message();
  EXPECT_NE(h.token(), first);
  EXPECT_EQ(list(dir / h.token()), std::vector<std::string>{mark_of(first)});
  h.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(list(dir / "lockfile").empty());
}

TEST_F(OwnerMarkTest, ATokenThatVanishedBeforeItsListingIsConfirmedWhenItShowsUpAgain) {
  make_free();
  auto a = process(100);
  a->fail(op::list_directory, "data.lock/lockfile.", ENOENT);
  lock_options o = options();
  o.wait = 2s;
  lock_handle h = tokenlock::detail::with_os::lock(dir, o, a).acquire();
  ASSERT_TRUE(h.owns());
  EXPECT_EQ(entries(), std::vector<std::string>{h.token()});
  EXPECT_EQ(list(dir / h.token()), std::vector<std::string>{mark_of(h.token())});
  EXPECT_EQ(std::count_if(a->calls.begin(), a->calls.end(),
                          [](const std::string& c) { return c.rfind("rename", 0) == 0; }),
            1)
      << "the same token, confirmed on a later look";
  h.release();
  EXPECT_TRUE(list(dir / "lockfile").empty());
}

TEST_F(OwnerMarkTest, APersistentlyStaleListingHoldsNothingAndLeavesNoMark) {
  make_free();
  auto a = process(100);
  a->fail(op::list_directory, "data.lock/lockfile.", ESTALE, 3);
  EXPECT_FALSE(lock_for(a).try_acquire().has_value());
  const std::vector<std::string> held = entries();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_TRUE(list(dir / held[0]).empty());
}

TEST_F(OwnerMarkTest, AFailureThatCannotFreeTheTokenSaysItStays) {
  make_free();
  auto a = process(100);
  a->fail(op::make_directory, "/h.", EACCES);
  a->fail(op::rename, "data.lock/lockfile.", EIO);
  const std::string message = message_of([&] { lock_for(a).acquire(); });
  EXPECT_NE(message.find("cannot make the owner mark in"), std::string::npos) << message;
  EXPECT_NE(message.find("the token stays until its lease ends"), std::string::npos) << message;
  const std::vector<std::string> held = entries();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_NE(held[0], "lockfile");
  EXPECT_TRUE(list(dir / held[0]).empty());
}

TEST_F(OwnerMarkTest, AReleaseWhoseRenameFailsPutsTheMarkBack) {
  make_free();
  auto a = process(100);
  lock_handle h = lock_for(a).acquire();
  a->fail(op::rename, "data.lock/lockfile.", EIO);
  std::error_code ec;
  h.release(ec);
  EXPECT_EQ(ec, std::errc::io_error);
  EXPECT_TRUE(h.owns());
  EXPECT_EQ(list(dir / h.token()), std::vector<std::string>{mark_of(h.token())});
  h.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(list(dir / "lockfile").empty());
}

TEST_F(OwnerMarkTest, AForcedBreakOfALiveOwnerRemovesThatOwnersMark) {
  make_free();
  auto owner = process(300);
  lock_handle held = lock_for(owner).acquire();
  const std::string token = held.detach();
  auto a = process(100);
  lock_handle h = lock_for(a).take_over(token, true);
  EXPECT_EQ(list(dir / h.token()), std::vector<std::string>{mark_of(h.token())});
  h.release();
  EXPECT_TRUE(list(dir / "lockfile").empty());
}

}  // namespace
