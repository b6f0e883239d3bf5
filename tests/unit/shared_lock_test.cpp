// Shared holders and semaphores on a lock directory (docs/protocol.md,
// Shared locks and semaphores), with processes played by fake_os: each
// transition and what it leaves on disk.
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <sys/stat.h>

#include "lock_fixture.hpp"
#include "lockdir/lock_directory.hpp"
#include "lockdir/shared_name.hpp"

namespace tokenlock::testing {
namespace {

namespace fs = boost::filesystem;
using detail::share_kind;

class SharedLockTest : public RenameLockTest {
 protected:
  // Whether the path's last name is a shared name of this kind (read from
  // its mode field, never guessed from a substring a nonce may hold too).
  static bool named_as(const std::string& path, share_kind kind) {
    const std::string name = path.substr(path.rfind('/') + 1);
    detail::held_token t;
    if (detail::classify_name(name, &t) != detail::name_kind::held) return false;
    detail::shared_token s;
    return detail::read_shared(detail::observed(name, t, detail::name_kind::held), s) &&
           s.kind == kind;
  }
  static lock_options shared(std::uint32_t slots = 0) {
    lock_options o = options();
    o.mode = lock_mode::shared;
    o.slots = slots;
    return o;
  }
  // The one token in the lock directory, read as a shared name.
  detail::shared_token token_kind() {
    std::vector<std::string> names = entries();
    EXPECT_EQ(names.size(), 1u);
    detail::held_token t;
    EXPECT_EQ(detail::classify_name(names.front(), &t), detail::name_kind::held);
    detail::shared_token s;
    s.kind = share_kind::reserved;
    EXPECT_TRUE(detail::read_shared(detail::observed(names.front(), t, detail::name_kind::held), s))
        << names.front() << " is no shared name";
    return s;
  }
  using call_test = std::function<bool(op, const std::string& path, const std::string& to)>;
  // Runs `action` (with the call's path) ahead of the first call of `p` that
  // `match` accepts. fake_os's `before` fires once: a call that does not
  // match arms it again.
  struct first_call {
    fake_os* p;
    call_test match;
    std::function<void(const std::string&)> action;
    void operator()(op o, const std::string& path, const std::string& to) {
      if (!match(o, path, to)) {
        p->before = *this;
        return;
      }
      action(path);
    }
  };
  static void at_first(const std::shared_ptr<fake_os>& p, call_test match,
                       std::function<void(const std::string&)> action) {
    p->before = first_call{p.get(), std::move(match), std::move(action)};
  }
  // A rename to a shared name of this kind.
  static call_test renames_to(share_kind kind) {
    return [kind](op o, const std::string&, const std::string& to) {
      return o == op::rename && named_as(to, kind);
    };
  }
  // Runs `action` at the first listing by the writer `w`, of a path holding
  // `path_has`, after it marked the shared holders' token (renamed it to its
  // draining cover).
  static void after_mark(const std::shared_ptr<fake_os>& w, std::function<void()> action,
                         const std::string& path_has = "") {
    auto marked = std::make_shared<bool>(false);
    at_first(
        w,
        [marked, path_has](op o, const std::string& path, const std::string& to) {
          if (o == op::rename && named_as(to, share_kind::draining)) *marked = true;
          return o == op::list_directory && *marked && path.find(path_has) != std::string::npos;
        },
        [action](const std::string&) { action(); });
  }
  // The share entries inside the one token.
  std::vector<std::string> share_entries() {
    std::vector<std::string> out;
    std::vector<std::string> names = entries();
    if (names.size() != 1 || names.front() == "lockfile") {
      if (names.size() == 1)
        for (auto& e : fs::directory_iterator(dir / names.front()))
          out.push_back(e.path().filename().string());
      return out;
    }
    for (auto& e : fs::directory_iterator(dir / names.front()))
      if (e.path().filename().string().rfind("s.", 0) == 0)
        out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

TEST_F(SharedLockTest, ALoneReaderTakesTheFastPathBothWays) {
  auto a = process(100), maker = process(99);
  lock_for(maker).acquire().release();
  lock_handle h = lock_for(a, shared()).acquire();
  ASSERT_TRUE(h.owns());
  EXPECT_EQ(h.mode(), lock_mode::shared);
  EXPECT_TRUE(h.path().empty()) << "a shared hold has no workspace";
  EXPECT_EQ(token_kind().kind, share_kind::lone);
  EXPECT_EQ(entries(), std::vector<std::string>{h.token()});
  h.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  std::size_t renames = 0;
  for (auto& c : a->calls) renames += c.rfind("rename", 0) == 0;
  EXPECT_EQ(renames, 2u) << "an uncontended share costs two renames, as a writer's lock does";
}

// The filesystem is asked once per lock (whether holders leave owner
// marks there), not at every acquire: afterwards the fast path is the two
// renames alone.
TEST_F(SharedLockTest, TheFilesystemIsAskedOncePerLock) {
  auto a = process(100);
  rename_lock readers = lock_for(a, shared());
  readers.acquire().release();
  a->calls.clear();
  readers.acquire().release();
  EXPECT_EQ(a->calls.size(), 2u) << ::testing::PrintToString(a->calls);
}

// How many listings in `calls` were of the lock directory itself, and how
// many of a token in it.
std::pair<int, int> listings(const std::vector<std::string>& calls, const fs::path& dir) {
  int of_dir = 0, of_token = 0;
  const std::string d = "list_directory " + dir.string();
  for (const std::string& c : calls) {
    if (c == d) ++of_dir;
    else if (c.rfind(d + "/lockfile", 0) == 0) ++of_token;
  }
  return {of_dir, of_token};
}

// A reader's join is an entry and a rename: no count, so no listing of the
// token (docs/protocol.md, A shared holder joins a group cover, step 1).
TEST_F(SharedLockTest, AReaderJoinsAGroupWithoutListingItsToken) {
  auto a = process(100), b = process(101), c = process(102);
  lock_handle ha = lock_for(a, shared()).acquire(), hb = lock_for(b, shared()).acquire();
  c->calls.clear();
  lock_handle hc = lock_for(c, shared()).acquire();
  ASSERT_TRUE(hc.owns());
  EXPECT_EQ(share_entries().size(), 3u);
  EXPECT_EQ(listings(c->calls, dir).second, 0) << ::testing::PrintToString(c->calls);
  hc.release(), hb.release(), ha.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
}

// A member that leaves others behind finds one of them in the token it
// left, through the descriptor it removed its entry by, and lists the lock
// directory once (to find the token), not a second time to settle it.
TEST_F(SharedLockTest, AMemberLeavingOthersBehindListsTheLockDirectoryOnce) {
  auto a = process(100), b = process(101), c = process(102);
  lock_handle ha = lock_for(a, shared()).acquire(), hb = lock_for(b, shared()).acquire();
  lock_handle hc = lock_for(c, shared()).acquire();
  c->calls.clear();
  hc.release();
  EXPECT_EQ(listings(c->calls, dir).first, 1) << ::testing::PrintToString(c->calls);
  EXPECT_EQ(token_kind().kind, share_kind::group);
  EXPECT_EQ(share_entries().size(), 2u);
  // The last one out still lists the directory again, and frees the lock.
  hb.release();
  a->calls.clear();
  ha.release();
  EXPECT_EQ(listings(a->calls, dir).first, 2) << ::testing::PrintToString(a->calls);
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(share_entries().empty());
}

TEST_F(SharedLockTest, ASecondReaderConvertsTheLoneShareAndTheLastOneOutFreesTheLock) {
  auto a = process(100), b = process(101);
  lock_handle ha = lock_for(a, shared()).acquire();
  lock_handle hb = lock_for(b, shared()).acquire();
  ASSERT_TRUE(ha.owns() && hb.owns());
  EXPECT_EQ(token_kind().kind, share_kind::group);
  EXPECT_EQ(share_entries().size(), 2u);
  ha.release();  // converted meanwhile: it leaves as a member
  EXPECT_EQ(token_kind().kind, share_kind::group);
  EXPECT_EQ(share_entries(), std::vector<std::string>{hb.token()});
  hb.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(share_entries().empty()) << "a freed token keeps no entry";
}

TEST_F(SharedLockTest, AWriterWaitsForReadersAndReadersWaitForAWriter) {
  auto a = process(100), w = process(200), b = process(101);
  lock_handle ha = lock_for(a, shared()).acquire();
  EXPECT_FALSE(lock_for(w).try_acquire()) << "a writer beside a reader";
  // Its mark was taken back when its one attempt ended: readers join again.
  lock_handle hb = lock_for(b, shared()).acquire();
  ha.release();
  hb.release();
  lock_handle hw = lock_for(w).acquire();
  EXPECT_FALSE(lock_for(a, shared()).try_acquire()) << "a reader beside a writer";
  hw.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
}

TEST_F(SharedLockTest, AWaitingWritersMarkBarsNewReadersAndTheLastOneOutHandsItOver) {
  auto a = process(100), w = process(200), b = process(101);
  lock_handle ha = lock_for(a, shared()).acquire();
  bool acted = false;
  std::optional<lock_handle> late;
  after_mark(w, [&] {
    acted = true;
    EXPECT_EQ(token_kind().kind, share_kind::draining);
    late = lock_for(b, shared()).try_acquire();
    ha.release();  // the last one out hands the token to the writer
  });
  lock_handle hw = lock_for(w, options(std::chrono::seconds(10), std::chrono::seconds(5))).acquire();
  ASSERT_TRUE(acted);
  EXPECT_FALSE(late) << "a reader joined a writer's mark";
  ASSERT_TRUE(hw.owns());
  EXPECT_EQ(hw.mode(), lock_mode::exclusive);
  EXPECT_EQ(entries(), std::vector<std::string>{hw.token()});
  EXPECT_TRUE(fs::is_directory(hw.path()));
  hw.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
}

// A converter that loses its race leaves no entry for a lone holder that
// has gone: had its copy stayed in the next group's cover, it would count
// as a share of a live process for that process's whole lease.
TEST_F(SharedLockTest, AConverterThatLosesRemovesItsCopyOfTheLoneHoldersShare) {
  auto h = process(100), c = process(101), r = process(102), x = process(103);
  lock_handle lone = lock_for(h, shared()).acquire();
  std::optional<lock_handle> hr, hx;
  bool acted = false;
  // Just before the converter's rename of the lone share: the lone holder
  // leaves, another reader takes the lock, a third converts it.
  at_first(
      c, renames_to(share_kind::group), [&](const std::string&) {
        acted = true;
        lone.release();
        hr = lock_for(r, shared()).acquire();
        hx = lock_for(x, shared()).acquire();
      });
  lock_handle hc = lock_for(c, shared()).acquire();
  ASSERT_TRUE(acted);
  std::vector<std::string> names = share_entries();
  EXPECT_EQ(names.size(), 3u) << "the copy of r's share, x's and c's entries";
  for (const auto& n : names)
    EXPECT_EQ(n.find(".100."), std::string::npos) << "a share of the lone holder that left: " << n;
  hc.release();
  hx->release();
  hr->release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(share_entries().empty());
}

// Two converters' copies of one lone share, seen together while the
// loser has not removed its own yet, are one holder.
TEST_F(SharedLockTest, CopiesOfOneLoneShareCountAsOneHolder) {
  auto a = process(100), b = process(101), c = process(102);
  lock_handle ha = lock_for(a, shared(2)).acquire();
  lock_handle hb = lock_for(b, shared(2)).acquire();  // converts a's share: a copy of it
  std::string copy;
  for (const auto& n : share_entries())
    if (n != hb.token()) copy = n;
  ASSERT_FALSE(copy.empty());
  std::string other = copy;
  other.back() = other.back() == '0' ? '1' : '0';  // another maker's half of the nonce
  fs::create_directory(dir / entries().front() / other);
  hb.release();
  std::optional<lock_handle> hc = lock_for(c, shared(2)).try_acquire();
  ASSERT_TRUE(hc) << "a's two copies were counted as two holders of 2 slots";
  EXPECT_EQ(lock_for(a).holders().size(), 2u);
  ha.release();  // both copies go
  hc->release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(share_entries().empty());
}

// A member's refresh renames a writer's mark (a later expiry) after the
// writer's last look: the writer, giving up, still takes its mark back (by
// its nonce, not by the name it saw), so readers are not barred by a
// writer that has gone home, nor is the lock handed over to it.
TEST_F(SharedLockTest, AWriterThatGivesUpTakesBackItsMarkAfterAMemberRenamedIt) {
  auto a = process(100), b = process(101), w = process(200), c = process(102);
  lock_handle ha = lock_for(a, shared()).acquire();
  lock_handle hb = lock_for(b, shared()).acquire();  // a group
  bool acted = false;
  // The writer lists its mark's token: it has seen the name it will give up.
  after_mark(
      w,
      [&] {
        acted = true;
        hb.refresh();               // renames the mark
        world->advance(2'000'000);  // past the writer's wait
      },
      "lockfile.");
  caught t = catch_of([&] {
    lock_for(w, options(std::chrono::seconds(10), std::chrono::milliseconds(500))).acquire();
  });
  ASSERT_TRUE(acted);
  EXPECT_EQ(t.code, make_error_code(errc::timed_out)) << t.message;
  EXPECT_EQ(token_kind().kind, share_kind::group) << "the writer's mark stayed out";
  std::optional<lock_handle> hc = lock_for(c, shared()).try_acquire();
  EXPECT_TRUE(hc) << "a reader was barred by the mark of a writer that gave up";
  if (hc) hc->release();
  ha.release();
  hb.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"}) << "handed over to a writer that left";
}

// A refresh whose share ended meanwhile (its lease over, a leaver removed
// its old entry and freed the token) leaves no new entry behind, wherever
// the token is by then: it would be a share of nobody for a whole lease.
TEST_F(SharedLockTest, ARefreshThatFailsLeavesNoEntryBehind) {
  auto a = process(100), m = process(101);
  lock_handle ha = lock_for(a, shared()).acquire();
  lock_options short_lease = shared();
  short_lease.lease = std::chrono::seconds(1);
  lock_handle hm = lock_for(m, short_lease).acquire();  // a group
  world->advance(3'000'000);                            // m's lease has ended
  m->when(op::make_directory, "/s.", [&] { ha.release(); });
  caught c = catch_of([&] { hm.refresh(std::chrono::seconds(60)); });
  EXPECT_EQ(c.code, make_error_code(errc::lock_lost)) << c.message;
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(share_entries().empty()) << "the failed refresh's entry stayed";
}

// A group of readers whose members all died holds nobody: a semaphore's
// holder (another limit) takes it over instead of waiting for its lease.
TEST_F(SharedLockTest, AGroupOfAnotherLimitWhoseMembersAreDeadIsTakenOver) {
  auto a = process(100), b = process(101), c = process(102);
  lock_handle ha = lock_for(a, shared()).acquire();
  lock_handle hb = lock_for(b, shared()).acquire();
  world->processes.erase(100);
  world->processes.erase(101);
  std::optional<lock_handle> hc = lock_for(c, shared(3)).try_acquire();
  ASSERT_TRUE(hc) << "waited for a group of dead readers";
  EXPECT_EQ(token_kind().kind, share_kind::lone);
  EXPECT_EQ(token_kind().limit, 3u);
  EXPECT_TRUE(share_entries().empty());
  hc->release();
}

// Breaking a lone share that was converted since: its copies go.
TEST_F(SharedLockTest, BreakingAConvertedLoneShareRemovesItsCopies) {
  auto a = process(100), b = process(101), c = process(102);
  lock_handle ha = lock_for(a, shared()).acquire();
  const std::string id = ha.detach();
  lock_handle hb = lock_for(b, shared()).acquire();  // converts a's share
  rename_lock breaker = lock_for(c);
  static_cast<tokenlock::lock&>(breaker).break_owner(id);
  EXPECT_EQ(share_entries(), std::vector<std::string>{hb.token()});
  hb.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
}

// What another user of the group may plant in a token (docs/security.md):
// a stale entry that is a FIFO or a link is removed by its name, never
// opened or followed; a regular file as the token admits no group.
TEST_F(SharedLockTest, PlantedStaleEntriesAreRemovedByNameNeverOpenedOrFollowed) {
  auto a = process(100), b = process(101), w = process(200);
  lock_handle ha = lock_for(a, shared()).acquire();
  lock_handle hb = lock_for(b, shared()).acquire();
  const fs::path token = dir / entries().front();
  // Entries of a lease that ended a minute ago (names of the grammar).
  auto stale = [&](std::uint64_t nonce) {
    return "s." + token_name(world->wall_us - 60'000'000, "testhost-0000abcd", 100, 5100, nonce)
                      .substr(std::string("lockfile.").size());
  };
  const fs::path target = tmp / "victim";
  { std::ofstream(target.string()) << "kept\n"; }
  ASSERT_EQ(::mkfifo((token / stale(1)).c_str(), 0600), 0);
  fs::create_symlink(target, token / stale(2));
  ha.release();
  hb.release();  // the last one out removes the stale plants, then frees the token
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(share_entries().empty());
  std::ifstream in(target.string());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "kept\n") << "the link was followed";
  EXPECT_TRUE(lock_for(w).try_acquire()) << "the lock stayed held by a plant";
}

TEST_F(SharedLockTest, AFileAsALoneSharesTokenAdmitsNoGroupAndIsLeftAlone) {
  auto a = process(100), b = process(101);
  fs::create_directories(dir);
  const std::string lone = detail::make_shared_name(world->wall_us + 30'000'000,
                                                    "testhost-0000abcd", 100, share_kind::lone, 0,
                                                    5100, 0x1234);
  { std::ofstream((dir / lone).string()) << "a file\n"; }
  EXPECT_FALSE(lock_for(b, shared()).try_acquire()) << "joined through a file";
  EXPECT_EQ(entries(), std::vector<std::string>{lone});
  EXPECT_TRUE(fs::is_regular_file(dir / lone));
}

TEST_F(SharedLockTest, ASemaphoreAdmitsNoMoreThanItsSlots) {
  auto a = process(100), b = process(101), c = process(102);
  lock_handle ha = lock_for(a, shared(2)).acquire();
  lock_handle hb = lock_for(b, shared(2)).acquire();
  EXPECT_FALSE(lock_for(c, shared(2)).try_acquire()) << "a third holder of 2 slots";
  EXPECT_EQ(token_kind().limit, 2u);
  ha.release();
  lock_handle hc = lock_for(c, shared(2)).acquire();
  EXPECT_EQ(share_entries().size(), 2u);
  hb.release();
  hc.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
}

TEST_F(SharedLockTest, AnotherLimitWaitsAndItsMessageNamesBoth) {
  auto a = process(100), b = process(101);
  lock_handle ha = lock_for(a, shared(3)).acquire();
  caught c = catch_of([&] { lock_for(b, shared(5)).acquire(); });
  EXPECT_EQ(c.code, make_error_code(errc::busy));
  EXPECT_NE(c.message.find("a semaphore of 3"), std::string::npos) << c.message;
  EXPECT_NE(c.message.find("a semaphore of 5"), std::string::npos) << c.message;
  EXPECT_FALSE(lock_for(b, shared()).try_acquire());
  EXPECT_EQ(token_kind().kind, share_kind::lone) << "a waiter of another limit changed it";
}

TEST_F(SharedLockTest, ADeadReaderIsTakenOverAtOnceAndItsEntryRemoved) {
  auto a = process(100), b = process(101), w = process(200);
  lock_handle ha = lock_for(a, shared()).acquire();
  lock_handle hb = lock_for(b, shared()).acquire();
  world->processes.erase(101);  // b is killed with kill -9
  ha.release();  // the last live one out: b's entry is stale
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(share_entries().empty());
  lock_handle lone = lock_for(a, shared()).acquire();
  world->processes.erase(100);
  lock_handle hw = lock_for(w).acquire();  // no wait: its owner is provably gone
  EXPECT_TRUE(hw.owns());
  caught c = catch_of([&] { hb.release(); });
  EXPECT_EQ(c.code, make_error_code(errc::lock_lost));
  EXPECT_EQ(entries(), std::vector<std::string>{hw.token()}) << "the writer's lock was touched";
}

// A writer marks a lone share by making its holder's entry and renaming
// the share; when the holder releases between the two, the rename fails
// and the entry belongs to nobody. Left behind, it counted as a live share
// (its owner is alive, its lease long) and barred the next writer behind
// the next reader until that lease ended.
TEST_F(SharedLockTest, AWriterWhoseMarkCameTooLateLeavesNoEntryBehind) {
  auto a = process(100), w = process(200), b = process(101), w2 = process(201);
  lock_handle ha = lock_for(a, shared()).acquire();
  w->when(op::rename, ha.token(), [&] { ha.release(); });
  lock_handle hw = lock_for(w, options(std::chrono::seconds(10), std::chrono::seconds(5))).acquire();
  ASSERT_TRUE(hw.owns());
  hw.release();
  ASSERT_EQ(entries(), std::vector<std::string>{"lockfile"});
  for (auto& e : fs::directory_iterator(dir / "lockfile"))
    EXPECT_NE(e.path().filename().string().rfind("s.", 0), 0u)
        << "an entry of no share was left: " << e.path().filename();
  // What it cost: the next writer marks the next reader, who leaves; the
  // last one out must hand the lock over, not count that entry as a share.
  lock_handle hb = lock_for(b, shared()).acquire();
  bool acted = false;
  after_mark(w2, [&] {
    acted = true;
    hb.release();
  });
  caught c = catch_of([&] {
    lock_for(w2, options(std::chrono::seconds(2), std::chrono::seconds(5))).acquire().release();
  });
  EXPECT_TRUE(acted);
  EXPECT_FALSE(c.code) << c.message;
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
}

// Two converters make the lone holder's entry; the one whose rename fails
// removes it, possibly between the other's mkdir and its check of what it
// made (ENOENT). That is a changed lock, not an error: the second converter,
// a joiner (whose own entry a takeover cleared) and a marking writer look
// again.
TEST_F(SharedLockTest, AnEntryRemovedAsItIsMadeMakesAConverterOrAWriterLookAgain) {
  auto a = process(100), b = process(101), w = process(200);
  lock_handle ha = lock_for(a, shared()).acquire();
  const std::string theirs = "/s." + ha.token().substr(std::string("lockfile.").size(), 17);
  b->fail(op::make_directory, theirs, ENOENT);
  lock_handle hb = lock_for(b, shared()).acquire();
  EXPECT_TRUE(hb.owns());
  EXPECT_EQ(token_kind().kind, share_kind::group);
  // Its own entry, cleared as soon as made (a takeover of the token clears
  // it whole): the same.
  auto c3 = process(103);
  c3->fail(op::make_directory, "-0000abcd.103.", ENOENT);
  lock_handle hc = lock_for(c3, shared()).acquire();
  EXPECT_TRUE(hc.owns());
  EXPECT_EQ(share_entries().size(), 3u);
  hc.release();
  hb.release();
  ha.release();
  ASSERT_EQ(entries(), std::vector<std::string>{"lockfile"});
  lock_handle again = lock_for(a, shared()).acquire();
  w->fail(op::make_directory, "/s." + again.token().substr(std::string("lockfile.").size(), 17),
          ENOENT);
  caught c = catch_of([&] {
    lock_for(w, options(std::chrono::seconds(10), std::chrono::milliseconds(300))).acquire();
  });
  EXPECT_EQ(c.code, make_error_code(errc::timed_out)) << c.message;
  EXPECT_EQ(again.mode(), lock_mode::shared);
  again.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
}

// A late converter: y saw the lone share L and opened its token; before
// its mkdir of its copy of L's share, b converted L and L's holder left
// the group (removing every copy). y's copy comes after that, its rename
// of L fails, and it removes its copy (docs/protocol.md, the conversion,
// step 5): no entry of a share of nobody keeps the lock held for a whole
// lease (with one name for every converter's entry, y kept it).
TEST_F(SharedLockTest, ALateConverterLeavesNoEntryOfAShareThatLeft) {
  auto a = process(100), b = process(101), y = process(102), w = process(200);
  lock_handle ha = lock_for(a, shared()).acquire();
  const std::string theirs = "/s." + ha.token().substr(std::string("lockfile.").size(), 17);
  std::optional<lock_handle> hb;
  y->when(op::make_directory, theirs, [&] {
    hb = lock_for(b, shared()).acquire();  // converts L
    ha.release();                          // leaves: L's entry goes
  });
  lock_handle hy = lock_for(y, shared()).acquire();
  ASSERT_TRUE(hb && hb->owns() && hy.owns());
  hy.release();
  hb->release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"}) << "an entry of no share holds it";
  caught c = catch_of([&] {
    lock_for(w, options(std::chrono::seconds(10), std::chrono::milliseconds(300))).acquire().release();
  });
  EXPECT_FALSE(c.code) << c.message;
}

TEST_F(SharedLockTest, ARefreshKeepsTheCoverAtLeastAsLateAsEveryEntry) {
  auto a = process(100), b = process(101);
  lock_handle ha = lock_for(a, shared()).acquire();
  lock_handle hb = lock_for(b, shared()).acquire();
  const std::string old = hb.token();
  world->advance(5'000'000);
  hb.refresh(std::chrono::seconds(60));
  EXPECT_NE(hb.token(), old);
  std::vector<std::string> names = share_entries();
  EXPECT_EQ(names.size(), 2u);
  EXPECT_TRUE(std::find(names.begin(), names.end(), old) == names.end()) << "old entry left";
  detail::held_token cover;
  detail::classify_name(entries().front(), &cover);
  EXPECT_GE(cover.expiry_us, hb.expires().time_since_epoch().count() / 1000)
      << "an old implementation would judge the cover stale before the share";
  ha.refresh();  // converted since it was a lone share: refreshed as a member
  EXPECT_EQ(share_entries().size(), 2u);
  ha.release();
  hb.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
}

TEST_F(SharedLockTest, AReaderWhoseLeaseEndedLosesItToAWriter) {
  auto a = process(100), w = process(200);
  lock_handle ha = lock_for(a, shared()).acquire();
  world->advance(11'000'000);
  lock_handle hw = lock_for(w).acquire();
  caught c = catch_of([&] { ha.refresh(); });
  EXPECT_EQ(c.code, make_error_code(errc::lock_lost));
  EXPECT_EQ(entries(), std::vector<std::string>{hw.token()});
}

TEST_F(SharedLockTest, HoldersListsEveryReaderAndAWaitingWriter) {
  auto a = process(100), b = process(101);
  lock_handle ha = lock_for(a, shared()).acquire();
  lock_handle hb = lock_for(b, shared()).acquire();
  std::vector<holder_info> all = lock_for(a).holders();
  ASSERT_EQ(all.size(), 2u);
  for (auto& h : all) {
    EXPECT_EQ(h.mode, lock_mode::shared);
    EXPECT_EQ(h.owner, owner_liveness::alive);
    EXPECT_FALSE(h.waiting_writer);
  }
  ha.release();
  hb.release();
  EXPECT_TRUE(lock_for(a).holders().empty());
}

TEST_F(SharedLockTest, AShareIsAdoptedByItsIdInAnotherProcess) {
  auto a = process(100), b = process(101), c = process(102);
  lock_handle ha = lock_for(a, shared()).acquire();
  const std::string lone = ha.detach();
  lock_handle hb = lock_for(b, shared()).acquire();  // converts a's share
  lock_handle again = lock_for(c).adopt(lone);
  EXPECT_EQ(again.mode(), lock_mode::shared);
  again.release();
  EXPECT_EQ(share_entries(), std::vector<std::string>{hb.token()});
  const std::string member = hb.detach();
  lock_for(c).adopt(member).release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
}

TEST_F(SharedLockTest, AnOldImplementationSeesAForeignHeldToken) {
  auto a = process(100);
  lock_handle ha = lock_for(a, shared()).acquire();
  detail::held_token t;
  ASSERT_EQ(detail::classify_name(ha.token(), &t), detail::name_kind::held);
  EXPECT_NE(std::string(t.host_tag), a->self().host_tag)
      << "an old implementation on this host would judge the share by its pid";
  EXPECT_EQ(detail::flipped_tag(detail::flipped_tag(a->self().host_tag)), a->self().host_tag);
}

TEST_F(SharedLockTest, AMalformedEntryIsNeverRemovedAndTheLastOneOutSaysSo) {
  auto a = process(100), b = process(101);
  lock_handle ha = lock_for(a, shared()).acquire();
  lock_handle hb = lock_for(b, shared()).acquire();
  fs::create_directory(dir / entries().front() / "s.not-a-share");
  ha.release();
  caught c = catch_of([&] { hb.release(); });
  EXPECT_EQ(c.code, make_error_code(errc::lock_corrupt));
  EXPECT_NE(c.message.find("s.not-a-share"), std::string::npos) << c.message;
  EXPECT_TRUE(fs::is_directory(dir / entries().front() / "s.not-a-share"));
}

TEST_F(SharedLockTest, ASlotCountAboveTheMaximumIsABadArgument) {
  auto a = process(100);
  caught c = catch_of([&] { lock_for(a, shared(max_slots + 1)).acquire(); });
  EXPECT_EQ(c.code, make_error_code(errc::bad_argument));
  EXPECT_FALSE(fs::exists(dir)) << "a refused acquire made the lock directory";
}

}  // namespace
}  // namespace tokenlock::testing

namespace tokenlock::testing {
namespace {

TEST_F(SharedLockTest, AFencedUpdateOrCommitUnderASharedHoldWritesNothing) {
  const fs::path target = tmp / "data.txt";
  { std::ofstream(target.string()) << "before\n"; }
  rename_lock readers(dir, shared());
  caught u = catch_of([&] {
    update_file(target, readers, [](const std::optional<std::string>&) { return std::string("x"); });
  });
  EXPECT_EQ(u.code, make_error_code(errc::bad_argument));
  EXPECT_NE(u.message.find("a shared hold gives no fence"), std::string::npos) << u.message;
  lock_handle h = readers.acquire();
  caught c = catch_of([&] { commit_file(h, target, "x"); });
  EXPECT_EQ(c.code, make_error_code(errc::bad_argument));
  h.release();
  std::ifstream in(target.string());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "before\n");
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  std::vector<std::string> around;
  for (auto& e : fs::directory_iterator(tmp.path())) around.push_back(e.path().filename().string());
  std::sort(around.begin(), around.end());
  EXPECT_EQ(around, (std::vector<std::string>{"data.lock", "data.txt"})) << "a temporary file was left";
}

}  // namespace
}  // namespace tokenlock::testing

namespace tokenlock::testing {
namespace {

// The entries of the one token other than `share`'s own: a converted lone
// share's copy, as a second reader's conversion made it.
std::string copy_beside(const std::vector<std::string>& names, const std::string& share) {
  for (const auto& n : names)
    if (n != share) return n;
  return {};
}

// A writer waiting under its own mark removes the stale entries it finds
// (docs/protocol.md, Leaving a group: "a waiting writer does"), so that the
// token does not fill with the entries of readers killed with kill -9; the
// live share stays.
TEST_F(SharedLockTest, AWriterWaitingUnderItsOwnMarkRemovesStaleEntries) {
  auto a = process(100), b = process(101), w = process(200);
  lock_handle ha = lock_for(a, shared()).acquire();
  lock_handle hb = lock_for(b, shared()).acquire();  // a group: a's copy and b's entry
  const std::string copy = copy_beside(share_entries(), hb.token());
  ASSERT_FALSE(copy.empty());
  bool killed = false;
  after_mark(w, [&] {
    killed = true;
    world->processes.erase(101);  // b is killed with kill -9 while w waits
  });
  caught c = catch_of([&] {
    lock_for(w, options(std::chrono::seconds(10), std::chrono::milliseconds(300))).acquire();
  });
  ASSERT_TRUE(killed);
  EXPECT_EQ(c.code, make_error_code(errc::timed_out)) << c.message;
  EXPECT_EQ(token_kind().kind, share_kind::group) << "the writer's mark stayed out";
  EXPECT_EQ(share_entries(), std::vector<std::string>{copy})
      << "the dead reader's entry stayed, or the live share went";
  ha.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(share_entries().empty());
}

// The same for a writer waiting behind another writer's mark: it removes
// the stale entries there, and leaves the mark and the live share alone.
TEST_F(SharedLockTest, AWriterWaitingBehindAnotherWritersMarkRemovesStaleEntries) {
  auto a = process(100), b = process(101), w1 = process(200), w2 = process(201);
  lock_handle ha = lock_for(a, shared()).acquire();
  lock_handle hb = lock_for(b, shared()).acquire();
  const std::string copy = copy_beside(share_entries(), hb.token());
  ASSERT_FALSE(copy.empty());
  // w1's mark, as w1 makes it while it waits (its pid and start, a nonce).
  detail::held_token cover;
  ASSERT_EQ(detail::classify_name(entries().front(), &cover), detail::name_kind::held);
  const std::string mark = detail::make_shared_name(
      cover.expiry_us + 1, "testhost-0000abcd", 200, share_kind::draining, 0, 5200, 0x7777);
  fs::rename(dir / entries().front(), dir / mark);
  world->processes.erase(101);  // b is killed with kill -9
  caught c = catch_of([&] {
    lock_for(w2, options(std::chrono::seconds(10), std::chrono::milliseconds(300))).acquire();
  });
  EXPECT_EQ(c.code, make_error_code(errc::timed_out)) << c.message;
  EXPECT_EQ(entries(), std::vector<std::string>{mark}) << "w1's mark was changed";
  EXPECT_EQ(share_entries(), std::vector<std::string>{copy})
      << "the dead reader's entry stayed, or the live share went";
  ha.release();  // the last one out hands the token to w1
  // held_token views the name: the listing is kept while it is read.
  const std::vector<std::string> names = entries();
  detail::held_token t;
  ASSERT_EQ(names.size(), 1u);
  ASSERT_EQ(detail::classify_name(names.front(), &t), detail::name_kind::held);
  EXPECT_EQ(t.pid, 200);
  EXPECT_EQ(std::string(t.host_tag), "testhost-0000abcd") << "not handed over: " << names.front();
  EXPECT_TRUE(share_entries().empty());
}

// A member's refresh that finds something at its next entry's name (unique
// to it by its nonce) made nothing there: a plant, lock_corrupt, and
// nothing removed; the share is held as before (docs/protocol.md, Hostile
// neighbours).
TEST_F(SharedLockTest, ARefreshThatFindsItsNextEntryTakenReportsAPlantAndRemovesNothing) {
  auto a = process(100), b = process(101);
  lock_handle ha = lock_for(a, shared()).acquire();
  lock_handle hb = lock_for(b, shared()).acquire();
  const std::string old = hb.token(), token = entries().front();
  std::string plant;
  at_first(
      b, [](op o, const std::string& path, const std::string&) {
        return o == op::make_directory && path.find("/s.") != std::string::npos;
      },
      [&](const std::string& path) {
        plant = path.substr(path.rfind('/') + 1);
        fs::create_directory(dir / entries().front() / plant);
      });
  caught c = catch_of([&] { hb.refresh(std::chrono::seconds(60)); });
  ASSERT_FALSE(plant.empty());
  EXPECT_EQ(c.code, make_error_code(errc::lock_corrupt)) << c.message;
  EXPECT_NE(c.message.find(plant), std::string::npos) << c.message;
  EXPECT_TRUE(hb.owns());
  EXPECT_EQ(hb.token(), old);
  EXPECT_EQ(entries(), std::vector<std::string>{token}) << "the cover was renamed";
  std::vector<std::string> want{copy_beside(share_entries(), old), old, plant};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(share_entries(), want) << "an entry was removed";
  fs::remove(dir / token / plant);
  hb.release();
  ha.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
}

// A slot holder whose lease is far from its end does not count the others
// at its refresh (docs/protocol.md, Refresh of a group member, step 2): a
// joiner's entry whose rename is still to come would fill the semaphore and
// end a live share for nothing.
TEST_F(SharedLockTest, ASlotHoldersRefreshFarFromItsLeasesEndDoesNotCount) {
  auto a = process(100), b = process(101), c = process(102), d = process(103);
  lock_handle ha = lock_for(a, shared(2)).acquire();
  lock_handle hb = lock_for(b, shared(2)).acquire();
  ha.release();  // b alone in the group cover
  std::optional<lock_handle> hd;
  caught r;
  bool refreshed = false;
  // c counted one holder, then d joined (counting one too); c's entry is
  // made, its rename still to come when b refreshes.
  c->when(op::make_directory, "-0000abcd.102.", [&] {
    hd = lock_for(d, shared(2)).acquire();
    c->when(op::rename, "lockfile.", [&] {
      r = catch_of([&] { hb.refresh(); });
      refreshed = true;
    });
  });
  std::optional<lock_handle> hc = lock_for(c, shared(2)).try_acquire();
  ASSERT_TRUE(refreshed && hd);
  EXPECT_FALSE(r.code) << r.message;
  EXPECT_TRUE(hb.owns());
  EXPECT_FALSE(hc) << "a third holder of 2 slots";
  EXPECT_EQ(token_kind().limit, 2u);
  std::vector<std::string> want{hb.token(), hd->token()};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(share_entries(), want);
  hd->release();
  hb.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(share_entries().empty());
}

// A slot holder whose lease ended and whose slot a joiner took counts the
// others at its refresh and finds its share ended: lock_lost, with its old
// and new entries gone, the others' kept (docs/protocol.md, Refresh of a
// group member).
TEST_F(SharedLockTest, ASlotHoldersRefreshAfterItsSlotWasTakenLosesIt) {
  auto a = process(100), b = process(101), c = process(102);
  lock_handle ha = lock_for(a, shared(2)).acquire();
  lock_options short_lease = shared(2);
  short_lease.lease = std::chrono::seconds(1);
  lock_handle hb = lock_for(b, short_lease).acquire();  // a's copy and b's entry
  const std::string copy = copy_beside(share_entries(), hb.token());
  world->advance(3'000'000);  // b's lease has ended, a's has not
  // c counts b out and takes its slot; b's stale entry stays (its removal
  // failed, or c leaves stale entries to others, as a reader does).
  c->fail(op::remove_directory, hb.token(), EBUSY);
  lock_handle hc = lock_for(c, shared(2)).acquire();
  caught r = catch_of([&] { hb.refresh(std::chrono::seconds(60)); });
  EXPECT_EQ(r.code, make_error_code(errc::lock_lost)) << r.message;
  EXPECT_FALSE(hb.owns());
  EXPECT_EQ(token_kind().kind, share_kind::group);
  std::vector<std::string> want{copy, hc.token()};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(share_entries(), want) << "three shares of 2 slots, or b's entries left";
  hc.release();
  ha.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
}

// A reader that takes a dead writer's token over clears it before anyone
// can join (docs/protocol.md, Takeovers by a shared holder): it holds the
// token as a writer's of its own while it clears, and only then renames it
// to its lone share. Cleared after that rename, the token lost the entries
// of a reader that converted the new lone share at once: its own and its
// copy of the taker's share, so both shares were gone.
TEST_F(SharedLockTest, AReaderTakingATokenOverClearsItBeforeAnyoneCanJoin) {
  auto w = process(200), a = process(100), b = process(101);
  lock_handle hw = lock_for(w).acquire();
  fs::create_directories(dir / hw.token() / "w" / "left-behind");
  world->processes.erase(200);  // the writer died holding the lock
  std::optional<lock_handle> hb;
  bool tried = false;
  // b comes the moment a's takeover rename has been made.
  at_first(
      a,
      [](op o, const std::string& from, const std::string&) {
        return o == op::open_directory && from.find("/lockfile.") != std::string::npos;
      },
      [&](const std::string&) {
        tried = true;
        hb = lock_for(b, shared()).try_acquire();
      });
  lock_handle ha = lock_for(a, shared()).acquire();
  ASSERT_TRUE(tried);
  EXPECT_FALSE(hb) << "b joined a token that was still being cleared";
  EXPECT_EQ(token_kind().kind, share_kind::lone);
  EXPECT_TRUE(share_entries().empty()) << "the dead writer's workspace stayed";
  hb = lock_for(b, shared()).acquire();  // converts a's lone share now
  ASSERT_EQ(token_kind().kind, share_kind::group);
  EXPECT_EQ(share_entries().size(), 2u);
  ha.release();  // finds its copy: its share was never lost
  EXPECT_EQ(share_entries(), std::vector<std::string>{hb->token()});
  hb->release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
}

// The takeover's second rename (our writer's token to our lone share)
// failing: the error names both, and the lock is left free, not held by a
// token of ours that nobody would release.
TEST_F(SharedLockTest, ATakeoverWhoseSecondRenameFailsLeavesTheLockFree) {
  auto w = process(200), a = process(100);
  lock_handle hw = lock_for(w).acquire();
  world->processes.erase(200);
  a->fail_after(op::rename, "/lockfile.", EIO, 1);
  caught c = catch_of([&] { lock_for(a, shared()).acquire(); });
  EXPECT_EQ(c.code, std::make_error_code(std::errc::io_error)) << c.message;
  EXPECT_NE(c.message.find("to our lone share"), std::string::npos) << c.message;
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(share_entries().empty());
}

// A reader that finds the mark of a writer provably dead on this host
// unmarks it (docs/protocol.md, Takeovers by a shared holder) and joins
// the readers in it, whose shares stay.
TEST_F(SharedLockTest, AReaderUnmarksADeadWritersMarkAndHolds) {
  auto a = process(100), b = process(101), w = process(200), c = process(102);
  lock_handle ha = lock_for(a, shared()).acquire();
  lock_handle hb = lock_for(b, shared()).acquire();
  const std::vector<std::string> before = share_entries();
  detail::held_token cover;
  ASSERT_EQ(detail::classify_name(entries().front(), &cover), detail::name_kind::held);
  const std::string mark = detail::make_shared_name(
      cover.expiry_us + 1, "testhost-0000abcd", 200, share_kind::draining, 0, 5200, 0x7777);
  fs::rename(dir / entries().front(), dir / mark);
  world->processes.erase(200);  // the writer died with its mark out
  std::optional<lock_handle> hc = lock_for(c, shared()).try_acquire();
  ASSERT_TRUE(hc) << "a reader waited for a dead writer's mark";
  EXPECT_EQ(token_kind().kind, share_kind::group);
  std::vector<std::string> want = before;
  want.push_back(hc->token());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(share_entries(), want) << "a share was lost";
  hc->release();
  hb.release();
  ha.release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
  EXPECT_TRUE(share_entries().empty());
}

// A writer whose wait ends while the last reader hands the lock over to it
// (between its last look and its unmarking) holds the lock and returns it
// (docs/protocol.md, A writer, Giving up): a success at the deadline is
// still a success, and the lock is not left to a writer that has gone.
TEST_F(SharedLockTest, AWriterWhoseWaitEndsAsTheLastReaderHandsItOverHoldsIt) {
  auto a = process(100), w = process(200);
  lock_handle ha = lock_for(a, shared()).acquire();
  bool acted = false;
  // Its mark going back to a group cover: the wait has ended.
  at_first(
      w, renames_to(share_kind::group), [&](const std::string&) {
        acted = true;
        ha.release();  // the last one out hands the token to the writer
      });
  std::optional<lock_handle> hw;
  caught c = catch_of([&] {
    hw = lock_for(w, options(std::chrono::seconds(10), std::chrono::milliseconds(300))).acquire();
  });
  ASSERT_TRUE(acted);
  EXPECT_FALSE(c.code) << c.message;
  ASSERT_TRUE(hw && hw->owns());
  EXPECT_FALSE(ha.owns());
  EXPECT_EQ(hw->mode(), lock_mode::exclusive);
  EXPECT_EQ(entries(), std::vector<std::string>{hw->token()});
  EXPECT_TRUE(fs::is_directory(hw->path()));
  EXPECT_TRUE(share_entries().empty()) << "a share entry was left in the writer's token";
  hw->release();
  EXPECT_EQ(entries(), std::vector<std::string>{"lockfile"});
}

}  // namespace
}  // namespace tokenlock::testing
