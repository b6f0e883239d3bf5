// The contract of tokenlock::lock with real processes, written once and
// run on every backend: lock_worker processes (tests/support) on this
// test's spec, killed with SIGKILL, stopped with SIGSTOP past their lease,
// and sixteen of them counting at once with a canary. Lease lengths are
// the backends' own (contract_fixture.hpp: etcd grants nothing shorter
// than its minimum TTL). Where the backends differ by design (a server
// cannot tell a dead client from a slow one; a lock directory has no
// fences and names its grants by token), a case checks each one's side.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <sys/wait.h>

#include <gtest/gtest.h>

#include "child.hpp"
#include "contract_fixture.hpp"
#include "inspect.hpp"
#include "temp_dir.hpp"

namespace {

using namespace std::chrono_literals;
using namespace tokenlock::contract;
using std::chrono::milliseconds;
using std::chrono::steady_clock;
using tokenlock::handle;
using tokenlock::testing::child;
using tokenlock::testing::slurp;
using tokenlock::testing::start_barrier;
using tokenlock::testing::temp_files_below;

// A worker's "H ID FENCE WATCHES WAKES" (lock_worker.cpp, mode hold).
struct grant_line {
  std::string id;
  std::string fence;  // "-" without fences
  std::uint64_t watches = 0;
  std::uint64_t wakes = 0;
};

grant_line grant_of(const std::string& line) {
  std::istringstream in(line);
  std::string h;
  grant_line g;
  in >> h >> g.id >> g.fence >> g.watches >> g.wakes;
  EXPECT_TRUE(in && h == "H") << "not a grant: " << line;
  return g;
}

std::string ms(milliseconds d) { return std::to_string(d.count()); }

// Whether a worker ended by exiting with 0 (3: two holders met at the canary).
::testing::AssertionResult exited_cleanly(int status) {
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return ::testing::AssertionSuccess();
  if (WIFEXITED(status))
    return ::testing::AssertionFailure()
           << "exit " << WEXITSTATUS(status)
           << (WEXITSTATUS(status) == 3 ? " (two processes were inside at once)" : "");
  return ::testing::AssertionFailure() << "killed by signal " << WTERMSIG(status);
}

template <class Backend>
class ProcessContract : public LockContract<Backend> {
 protected:
  // lock_worker --lock SPEC MODE ARGS... on this test's lock.
  child worker(const std::vector<std::string>& mode, const start_barrier* gate = nullptr) {
    std::vector<std::string> argv{LOCK_WORKER_PATH, "--lock", this->backend_.spec(this->name_)};
    argv.insert(argv.end(), mode.begin(), mode.end());
    return child(argv, gate);
  }
  // A lock directory's entries (D/lockfile or the holder's token), exactly.
  std::vector<std::string> lock_dir_entries() {
    if constexpr (Backend::kind == lock_backend::directory)
      return tokenlock::testing::entries(this->backend_.dir / this->name_);
    else
      return {};
  }
  std::string file(const std::string& name) const { return (files_ / name).string(); }
  // Temporary files left below the files (fence directories included)
  // and, for a lock directory, in its workspace.
  std::vector<std::string> leftovers() const {
    std::vector<std::string> found = temp_files_below(files_.path());
    if constexpr (Backend::kind == lock_backend::directory) {
      for (auto& f : temp_files_below(this->backend_.dir.path())) found.push_back(f);
    }
    return found;
  }

  // Sixteen processes at once, as many cycles each as a backend does in a
  // few seconds here (an etcd grant is a round of consensus among three
  // members).
  static constexpr int processes = 16;
  static constexpr int cycles = Backend::kind == lock_backend::directory ? 150
                                : Backend::kind == lock_backend::redis   ? 25
                                                                         : 10;
  static constexpr int increments = Backend::kind == lock_backend::etcd ? 10 : 20;

  tokenlock::testing::temp_dir files_;
};

TYPED_TEST_SUITE(ProcessContract, backends, backend_names);

// A holder killed with SIGKILL never releases: its lock goes to the next
// waiter, never before the lease ends on a server (which cannot tell a
// dead client from a slow one), at the latest when it ends on a lock
// directory (which also sees its holder's death on this host).
TYPED_TEST(ProcessContract, AKilledHoldersLockGoesToTheNextWaiter) {
  const milliseconds lease = TypeParam::short_lease;
  const auto spawned = steady_clock::now();  // the grant is later
  child holder = this->worker({"hold", ms(lease)});
  const grant_line dead = grant_of(holder.read_line());
  const auto granted_by = steady_clock::now();  // the grant is earlier
  holder.signal(SIGKILL);
  holder.wait();
  auto lock = this->open_leased(30s, lease + 10s);
  std::optional<handle> at_once = lock->try_acquire();
  if (at_once && this->on_a_server()) {
    EXPECT_GE(steady_clock::now() - spawned, lease) << "freed before the dead holder's lease ended";
  }
  handle next = at_once ? std::move(*at_once) : lock->acquire();
  EXPECT_LT(steady_clock::now() - granted_by, lease + 3s) << "waited well past the lease";
  ASSERT_TRUE(next.owns());
  if (this->has_fences()) {
    EXPECT_GT(*next.fence(), std::stoull(dead.fence));
  }
  EXPECT_NE(next.id(), dead.id);
  EXPECT_EQ(this->records(), 1);
  next.release();
  EXPECT_EQ(this->records(), 0);
  EXPECT_TRUE(this->free_now());
}

// What the stalled holder's late release says, by backend: it lost the
// lock to `next`.
template <class Backend>
std::string lost_to_says(const grant_line& next) {
  if (Backend::kind == lock_backend::redis) return "a newer grant (fence " + next.fence + ")";
  if (Backend::kind == lock_backend::etcd) return "our lease ended";
  return "taken over by another process";
}

// A holder stopped (SIGSTOP) past its lease is alive but silent: the next
// process takes the lock when the lease ends, and the stalled one, going
// on, learns at its release that it lost the lock, and frees nothing of
// the new holder's.
TYPED_TEST(ProcessContract, AHolderStoppedPastItsLeaseIsTakenOverAndLearnsItLostTheLock) {
  // Skew allowance 0 (a lock directory's; the servers keep their own
  // time): the lease ends when it says.
  child a = this->worker({"hold", ms(TypeParam::short_lease), "0"});
  const grant_line stalled = grant_of(a.read_line());
  a.signal(SIGSTOP);
  ASSERT_TRUE(a.wait_stopped());
  // Long enough for every check below on a loaded machine: the new holder
  // must not lose its grant before its release (an etcd waiter keeps its
  // own lease alive while it waits, so the wait is the same).
  child b = this->worker({"hold", ms(20s), "0"});
  const grant_line next = grant_of(b.read_line(TypeParam::short_lease + 20s));
  EXPECT_NE(next.id, stalled.id);
  if (this->has_fences()) {
    EXPECT_GT(std::stoull(next.fence), std::stoull(stalled.fence));
  } else {
    EXPECT_EQ(next.fence, "-");
    EXPECT_EQ(next.watches + next.wakes, 0u);
    EXPECT_EQ(this->lock_dir_entries(), std::vector<std::string>{next.id});
  }
  if (TypeParam::kind == lock_backend::etcd) {
    // Woken once by the lease's end: not a loop of watches that end at once.
    EXPECT_LE(next.watches, 10u);
    EXPECT_EQ(next.wakes, 1u);
  }
  a.signal(SIGCONT);
  a.write_line("release");
  const std::string said = a.read_line();
  EXPECT_EQ(said.rfind("lock_lost ", 0), 0u) << said;
  EXPECT_NE(said.find(lost_to_says<TypeParam>(next)), std::string::npos) << said;
  const std::optional<tokenlock::lock_holder> who = this->open()->holder();
  ASSERT_TRUE(who.has_value()) << "the late release freed the new holder's lock";
  EXPECT_EQ(who->id, next.id);
  EXPECT_EQ(this->records(), 1);
  if (!this->has_fences()) {
    EXPECT_EQ(this->lock_dir_entries(), std::vector<std::string>{next.id});
  }
  b.write_line("release");
  EXPECT_EQ(b.read_line(), "released") << "the new grant was untouched by the late release";
  EXPECT_TRUE(exited_cleanly(a.wait()));
  EXPECT_TRUE(exited_cleanly(b.wait()));
  EXPECT_EQ(this->records(), 0);
  if (!this->has_fences()) {
    EXPECT_EQ(this->lock_dir_entries(), std::vector<std::string>{"lockfile"});
  }
  EXPECT_TRUE(this->free_now());
}

// A worker's last lines of mode count: "fences ascending" (servers), then
// "waited N"; a lock directory may also say "board" or "stepped back N".
::testing::AssertionResult counted(child& w, bool fences) {
  bool ascending = false;
  for (std::string line = w.read_line(240s);; line = w.read_line(240s)) {
    if (line == "fences ascending") ascending = true;
    if (line.rfind("waited ", 0) == 0) break;
  }
  if (fences && !ascending) return ::testing::AssertionFailure() << "a fence did not increase";
  return ::testing::AssertionSuccess();
}

// Every value the workers logged as committed, sorted.
std::vector<unsigned long long> logged(const tokenlock::testing::temp_dir& d, int processes) {
  std::vector<unsigned long long> all;
  for (int i = 0; i < processes; ++i) {
    std::ifstream in((d / ("log." + std::to_string(i))).string());
    for (unsigned long long v; in >> v;) all.push_back(v);
  }
  std::sort(all.begin(), all.end());
  return all;
}

// Sixteen processes started at once, each taking the lock `cycles` times:
// never two inside at once (the canary), every increment of the plain
// counter file saw the previous one, fences grow with every grant.
TYPED_TEST(ProcessContract, SixteenProcessesNeverOverlapAndCountExactly) {
  constexpr int n = TestFixture::processes, cycles = TestFixture::cycles;
  start_barrier gate;
  std::vector<child> workers;
  for (int i = 0; i < n; ++i)
    workers.push_back(this->worker({"count", this->file("counter"), this->file("canary"),
                                    std::to_string(cycles), this->file("log." + std::to_string(i))},
                                   &gate));
  gate.open_gate();
  for (child& w : workers) {
    EXPECT_TRUE(counted(w, this->has_fences()));
    EXPECT_TRUE(exited_cleanly(w.wait()));
  }
  EXPECT_EQ(std::stoull(slurp(this->file("counter"))), static_cast<unsigned long long>(n * cycles));
  const std::vector<unsigned long long> values = logged(this->files_, n);
  ASSERT_EQ(values.size(), static_cast<std::size_t>(n * cycles));
  for (std::size_t i = 0; i < values.size(); ++i)
    ASSERT_EQ(values[i], i + 1) << "every increment saw the previous one";
  EXPECT_EQ(this->records(), 0);
  if (!this->has_fences()) {
    EXPECT_EQ(this->lock_dir_entries(), std::vector<std::string>{"lockfile"});
  }
  EXPECT_TRUE(this->free_now());
}

// Sixteen processes incrementing one counter file with increment_counter
// (fenced commits): every value handed out once, none lost.
TYPED_TEST(ProcessContract, SixteenProcessesIncrementOneCounterFileExactly) {
  constexpr int n = TestFixture::processes, count = TestFixture::increments;
  const std::string hits = this->file("hits");
  start_barrier gate;
  std::vector<child> workers;
  for (int i = 0; i < n; ++i)
    workers.push_back(this->worker({"incr", hits, std::to_string(count)}, &gate));
  gate.open_gate();
  std::set<unsigned long long> seen;
  for (child& w : workers) {
    for (std::string l = w.read_line(240s); l != "done"; l = w.read_line(240s))
      EXPECT_TRUE(seen.insert(std::stoull(l)).second) << "value " << l << " handed out twice";
    EXPECT_TRUE(exited_cleanly(w.wait()));
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(n * count));
  EXPECT_EQ(slurp(hits), std::to_string(n * count) + "\n");
  EXPECT_TRUE(this->leftovers().empty());
  EXPECT_EQ(this->records(), 0);
  EXPECT_TRUE(this->free_now());
}

// A counter file that is not a number is never overwritten: every process
// that comes to increment it stops with corrupt_data (the worker's exit 4),
// and nothing is written beside it.
TYPED_TEST(ProcessContract, ACorruptCounterIsNeverOverwrittenByAnyProcess) {
  const std::string hits = this->file("hits");
  tokenlock::testing::spit(hits, "12 apples\n");
  std::vector<child> workers;
  for (int i = 0; i < 8; ++i) workers.push_back(this->worker({"incr", hits, "5"}));
  for (child& w : workers) {
    EXPECT_EQ(w.read_line(), "corrupt");
    const int status = w.wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 4) << "status " << status;
  }
  EXPECT_EQ(slurp(hits), "12 apples\n");
  EXPECT_TRUE(this->leftovers().empty());
  EXPECT_EQ(this->records(), 0);
  EXPECT_TRUE(this->free_now());
}

}  // namespace
