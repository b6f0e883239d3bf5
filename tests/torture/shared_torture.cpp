// The shared torture (docs/verification.md): readers, writers and slot
// holders as real processes (lock_worker visit) on local disk, under kill -9
// and SIGSTOP, on two lock directories:
//   rw.lock   readers (--shared) and writers; the writers add 1 to a
//             counter with update_file under the exclusive lock, the
//             readers read it when they enter and before they leave;
//   sem.lock  slot holders of a semaphore of 3 (--slots 3).
// The supervisor, every 50 to 250 ms, kills a random worker with SIGKILL
// (and starts another in its place) or stops one with SIGSTOP, for 50 ms or
// past its lease, then continues it; and each worker's 50th turn, and one
// in 1000 after it, stops itself while it holds (before a writer's commit,
// before a release), which the supervisor continues past the lease.
// Checked after the run, from the
// workers' O_APPEND logs (tests/support/visit_log.hpp): a writer never
// beside anybody, a reader never beside a writer, never more than 3 slot
// holders; the counter exact (every committed value distinct, none lost
// but those of writers killed between their commit and their log line);
// no reader saw it go backwards or move while it held (the worker exits 3);
// both locks free at the end.
//
//   shared_torture --worker PATH [--seconds S] [--check]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/filesystem.hpp>

#include "child.hpp"
#include "tokenlock/tokenlock.hpp"
#include "visit_log.hpp"

namespace fs = boost::filesystem;
using namespace std::chrono_literals;
using tokenlock::testing::child;
using tokenlock::testing::monotonic_ns;

namespace {

constexpr int lease_ms = 400;  // the workers' lease; their skew allowance is 0
constexpr unsigned slots = 3;

enum class role { reader, writer, slot_holder };

struct setup {
  std::string worker;
  fs::path root;
  fs::path rw_lock() const { return root / "rw.lock"; }
  fs::path sem_lock() const { return root / "sem.lock"; }
  fs::path rw_log() const { return root / "rw.log"; }
  fs::path sem_log() const { return root / "sem.log"; }
  fs::path counter() const { return root / "counter"; }
  fs::path log_of(role r) const { return r == role::slot_holder ? sem_log() : rw_log(); }
};

struct worker_process {
  role r;
  std::unique_ptr<child> c;
  std::int64_t continue_at_ns = 0;  // stopped itself: when to continue it
};

std::unique_ptr<child> start(const setup& s, role r) {
  std::vector<std::string> argv{s.worker, "--lock",
                                (r == role::slot_holder ? s.sem_lock() : s.rw_lock()).string()};
  if (r == role::reader) argv.push_back("--shared");
  if (r == role::slot_holder) argv.insert(argv.end(), {"--slots", std::to_string(slots)});
  const std::string hold_us = r == role::writer ? "300" : "500";
  argv.insert(argv.end(), {"visit", s.log_of(r).string(), "100000000", hold_us,
                           std::to_string(lease_ms)});
  if (r != role::slot_holder) argv.push_back(s.counter().string());
  return std::make_unique<child>(argv);
}

struct faults {
  int kills = 0, writer_kills = 0, stops = 0, long_stops = 0;
  int self_stops = 0;   // workers that stopped themselves holding (continued past the lease)
  int ended_alone = 0;  // workers found ended before their kill: a failure
};

// One fault on a random worker, in a fixed order: a kill (and a new worker
// in its place), or a stop for 50 ms or past the lease.
void strike(const setup& s, std::vector<worker_process>& all, std::mt19937& rng, faults& f) {
  worker_process& victim = all[rng() % all.size()];
  if (victim.continue_at_ns) return;  // stopped itself: continue_self_stopped's
  const std::string pid = std::to_string(victim.c->pid());
  // Kill, kill, a long stop, kill, a short stop: every run of a few
  // seconds has each fault.
  const int turn = f.kills + f.stops;
  if (turn % 5 != 2 && turn % 5 != 4) {
    victim.c->signal(SIGKILL);
    const int status = victim.c->wait();
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) ++f.ended_alone;
    tokenlock::testing::note_in_visit_log(s.log_of(victim.r).string(), "D " + pid);
    ++f.kills;
    f.writer_kills += victim.r == role::writer;
    victim.c = start(s, victim.r);
    return;
  }
  const bool past_lease = turn % 5 == 2;
  tokenlock::testing::note_in_visit_log(s.log_of(victim.r).string(), "S " + pid);
  victim.c->signal(SIGSTOP);
  // The fault's length, not a wait for something to happen.
  std::this_thread::sleep_for(past_lease ? std::chrono::milliseconds(lease_ms + 200) : 50ms);
  victim.c->signal(SIGCONT);
  ++f.stops;
  f.long_stops += past_lease;
}

// Continues, once its lease has ended, each worker that stopped itself
// while it held (LOCK_WORKER_STOP_EVERY): found stopped, it is due 200 ms
// past its lease; one found ended instead is replaced.
void continue_self_stopped(const setup& s, std::vector<worker_process>& all, faults& f) {
  const std::int64_t now = monotonic_ns();
  for (worker_process& w : all) {
    if (w.continue_at_ns) {
      if (now < w.continue_at_ns) continue;
      w.c->signal(SIGCONT);
      w.continue_at_ns = 0;
      ++f.self_stops;
      continue;
    }
    int status = 0;
    const child::state st = w.c->poll(status);
    if (st == child::state::stopped) w.continue_at_ns = now + (lease_ms + 200) * 1'000'000LL;
    if (st != child::state::ended) continue;
    ++f.ended_alone;
    w.c = start(s, w.r);
  }
}

// The lock is free now: an exclusive holder gets it at once (stale names
// of killed holders are taken over, not waited for).
bool free_now(const fs::path& dir) {
  tokenlock::lock_options o;
  o.wait = 2s;
  std::error_code ec;
  tokenlock::lock_handle h = tokenlock::rename_lock(dir, o).acquire(ec);
  if (ec) return false;
  h.release(ec);
  return !ec;
}

struct verdict {
  int failures = 0;
  void expect(bool ok, const std::string& what) {
    if (ok) return;
    std::printf("FAILED: %s\n", what.c_str());
    ++failures;
  }
};

void check_counter(const setup& s, const tokenlock::testing::visit_report& rw, const faults& f,
                   verdict& v) {
  std::vector<std::uint64_t> committed = rw.committed;
  std::sort(committed.begin(), committed.end());
  const std::set<std::uint64_t> distinct(committed.begin(), committed.end());
  v.expect(distinct.size() == committed.size(), "a counter value was committed twice");
  const std::uint64_t final_value = tokenlock::read_counter(s.counter()).value_or(0);
  v.expect(final_value >= committed.size(), "a committed increment was lost");
  v.expect(final_value - committed.size() <= static_cast<std::uint64_t>(f.writer_kills),
           "more unlogged commits than writers killed");
  std::printf("counter %llu, %zu commits logged, %d writers killed\n",
              static_cast<unsigned long long>(final_value), committed.size(), f.writer_kills);
}

void report(const char* name, const tokenlock::testing::visit_report& r) {
  std::printf("%s: %ld writes, %ld reads, %ld slot turns, %ld lost turns; most at once: "
              "%d readers, %d slot holders\n",
              name, r.writes, r.reads, r.slot_turns, r.lost, r.most_readers, r.most_slots);
  for (const std::string& x : r.violations) std::printf("  %s\n", x.c_str());
}

int finish(const setup& s, std::vector<worker_process>& all, const faults& f, bool check) {
  tokenlock::testing::note_in_visit_log(s.rw_log().string() + ".stop", "");
  tokenlock::testing::note_in_visit_log(s.sem_log().string() + ".stop", "");
  verdict v;
  // Those found stopped and not yet due are continued now: their stop was
  // reported once already, and a wait would not see it again.
  for (worker_process& w : all)
    if (w.continue_at_ns) w.c->signal(SIGCONT);
  for (worker_process& w : all) {
    const int status = w.c->wait_continuing();  // one may stop itself once more
    v.expect(WIFEXITED(status) && WEXITSTATUS(status) != 3,
             "a reader saw the counter go backwards or move while it held");
    v.expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
             "a worker failed (status " + std::to_string(status) + ")");
  }
  const auto rw = tokenlock::testing::check_visit_log(s.rw_log().string(), 0);
  const auto sem = tokenlock::testing::check_visit_log(s.sem_log().string(), slots);
  std::printf("faults: %d kills (%d writers), %d stops (%d past the lease), %d self-stops "
              "while holding\n",
              f.kills, f.writer_kills, f.stops, f.long_stops, f.self_stops);
  report("rw.lock", rw);
  report("sem.lock", sem);
  v.expect(rw.violations.empty() && sem.violations.empty(), "a promise was broken (above)");
  v.expect(f.ended_alone == 0, std::to_string(f.ended_alone) +
                                   " workers had ended on their own before their kill");
  check_counter(s, rw, f, v);
  v.expect(free_now(s.rw_lock()) && free_now(s.sem_lock()), "a lock was not free at the end");
  if (!check) return 0;
  v.expect(f.kills > 0 && f.long_stops > 0 && f.self_stops > 0, "the faults were not exercised");
  v.expect(rw.writes > 0 && rw.reads > 0 && sem.slot_turns > 0, "a role never got in");
  v.expect(rw.most_readers >= 2 && sem.most_slots == static_cast<int>(slots),
           "the readers never shared, or the semaphore never filled");
  return v.failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  setup s;
  double seconds = 3;
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--worker" && i + 1 < argc) s.worker = argv[++i];
    else if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a == "--check") check = true;
    else {
      std::fprintf(stderr, "usage: shared_torture --worker PATH [--seconds S] [--check]\n");
      return 64;
    }
  }
  if (s.worker.empty()) {
    std::fprintf(stderr, "shared_torture: --worker PATH (tests/support/lock_worker) is needed\n");
    return 64;
  }
  s.root = fs::temp_directory_path() / fs::unique_path("tokenlock-shared-torture-%%%%-%%%%");
  fs::create_directories(s.root);
  // Turn 50 and one turn in 1000 after it stop themselves holding
  // (lock_worker's visit), so that takeovers of live, stopped holders
  // happen, not only of dead ones.
  ::setenv("LOCK_WORKER_STOP_EVERY", "1000", 1);
  std::vector<worker_process> all;
  for (role r : {role::reader, role::reader, role::reader, role::reader, role::writer,
                 role::writer, role::slot_holder, role::slot_holder, role::slot_holder,
                 role::slot_holder, role::slot_holder})
    all.push_back({r, start(s, r), 0});
  std::mt19937 rng(std::random_device{}());
  faults f;
  const std::int64_t end = monotonic_ns() + static_cast<std::int64_t>(seconds * 1e9);
  while (monotonic_ns() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + rng() % 200));  // the fault rate
    strike(s, all, rng, f);
    continue_self_stopped(s, all, f);
  }
  const int status = finish(s, all, f, check);
  if (status == 0) fs::remove_all(s.root);
  else std::printf("left for a look: %s\n", s.root.c_str());
  return status;
}
