// The strategy torture test (docs/verification.md): one counter workload,
// run through several lock strategies by real processes under real faults.
//
//   torture [--seconds S] [--workers W] [--stop-every N] [--strategies a,b,...] [--check]
//
// Workers loop: lock, read the counter, write the next value to a temporary
// file, rename it over the counter, unlock. Faults:
//  - the supervisor SIGKILLs a random worker (holder or waiter) every 50 to
//    250 ms and starts a new one in its place;
//  - about one critical section in 1000 (--stop-every) stops itself with SIGSTOP at
//    the worst moment, just before its final rename (after any ownership
//    check). The supervisor continues it after STALL, longer than the lease
//    and the age limits, so that takeovers by age happen. The stop point is
//    chosen by the worker, not by timing.
// Measured per strategy: lost updates (commits the final value does not
// count), values committed twice, entries into the critical section while
// another process was inside (all of them, and those where both had a
// valid lease or age claim), the time from a holder's SIGKILL to the next
// commit (for holders with a valid claim killed while nobody was stopped),
// and commits per second.
// --check fails unless the rename-token lock with the fenced commit lost
// nothing and never overlapped with a valid lease, and the faults and the
// detectors were exercised (no lock at all must show losses).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <new>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <boost/filesystem.hpp>

#include "tokenlock/tokenlock.hpp"

namespace fs = boost::filesystem;
namespace tl = tokenlock;
using namespace std::chrono_literals;

namespace {

constexpr int max_workers = 32;
constexpr std::size_t max_commits = 1 << 21;
constexpr auto lease = 200ms;
constexpr auto skew = 50ms;              // the rename-token lock's skew allowance
constexpr auto age_limit = lease + skew; // "older than this is stale", for age-based locks
constexpr auto stall = 2 * age_limit;    // how long a self-stopped holder stays stopped
int stop_every = 1000;                    // one critical section in this many stops itself
constexpr std::int64_t forever = INT64_MAX;

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Shared between the supervisor and its forked workers (MAP_SHARED).
struct slot {
  std::atomic<int> pid{0};
  std::atomic<int> inside{0};
  std::atomic<std::int64_t> valid_until{0};  // steady clock, µs; `forever` for no limit
  std::atomic<int> doomed{0};                // set before the supervisor's SIGKILL
};
struct commit_record {
  std::atomic<std::uint64_t> value{0};
  std::atomic<std::int64_t> at{0};
};
struct shared_state {
  std::atomic<int> running{1};
  std::atomic<std::uint64_t> overlaps_any{0};
  std::atomic<std::uint64_t> overlaps_valid{0};
  std::atomic<std::uint64_t> lost_locks{0};   // commits refused because the lock was lost
  std::atomic<std::size_t> commits{0};
  slot slots[max_workers];
  commit_record log[max_commits];
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "torture: %s: %s\n", what.c_str(), std::strerror(errno));
  _exit(2);
}

// ---- the critical section's bookkeeping ---------------------------------

void enter(shared_state& s, int me, std::int64_t valid_until) {
  slot& mine = s.slots[me];
  mine.valid_until.store(valid_until);
  mine.inside.store(1);
  const std::int64_t now = now_us();
  for (int i = 0; i < max_workers; ++i) {
    if (i == me) continue;
    slot& other = s.slots[i];
    if (!other.inside.load() || other.doomed.load()) continue;
    s.overlaps_any.fetch_add(1);
    if (other.valid_until.load() > now && valid_until > now) s.overlaps_valid.fetch_add(1);
  }
}

void leave(shared_state& s, int me) { s.slots[me].inside.store(0); }

void record_commit(shared_state& s, std::uint64_t value) {
  const std::size_t i = s.commits.fetch_add(1);
  if (i < max_commits) {
    s.log[i].value.store(value);
    s.log[i].at.store(now_us());
  }
}

std::uint64_t read_counter(const fs::path& file) {
  std::optional<std::string> text = tl::read_file(file);
  return text ? std::strtoull(text->c_str(), nullptr, 10) : 0;
}

void write_plain(const fs::path& file, const std::string& text) {
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die("open " + file.string());
  if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    die("write " + file.string());
  ::close(fd);
}

void maybe_stop(std::mt19937_64& rng) {
  if (rng() % stop_every == 0) ::raise(SIGSTOP);
}

// ---- the strategies --------------------------------------------------------

struct context {
  shared_state* s;
  int me;
  fs::path dir;      // the workload's directory
  fs::path counter;  // dir/count
  std::mt19937_64 rng;
};

// One round: returns after one attempt at one update (committed or not).
using strategy_fn = std::function<void(context&)>;

// Counter, temp file, commit: shared by the lock strategies that commit by
// renaming a temp file beside the target.
void update_beside(context& c, std::int64_t valid_until,
                   const std::function<bool()>& check = {}) {
  enter(*c.s, c.me, valid_until);
  const std::uint64_t next = read_counter(c.counter) + 1;
  const fs::path tmp = c.dir / (".count.tmp." + std::to_string(::getpid()));
  write_plain(tmp, std::to_string(next) + "\n");
  if (check && !check()) {
    ::unlink(tmp.c_str());
    c.s->lost_locks.fetch_add(1);
    leave(*c.s, c.me);
    return;
  }
  maybe_stop(c.rng);
  if (::rename(tmp.c_str(), c.counter.c_str()) != 0) die("rename");
  record_commit(*c.s, next);
  leave(*c.s, c.me);
}

std::int64_t steady_deadline(std::chrono::system_clock::time_point expires) {
  return now_us() + std::chrono::duration_cast<std::chrono::microseconds>(
                        expires - std::chrono::system_clock::now())
                        .count();
}

// One per worker process, made on its first use (after the fork).
const tl::rename_lock& token_lock(const context& c) {
  static const tl::rename_lock lock = [&] {
    tl::lock_options o;
    o.lease = lease;
    o.skew_allowance = skew;
    o.wait = 2s;
    return tl::rename_lock(c.dir / "count.lock", o);
  }();
  return lock;
}

// The rename-token lock with the fenced commit: the temp file is written in
// the held token directory and renamed over the counter through the token's
// path, as update_file does on one filesystem.
void token_fenced(context& c) {
  std::error_code ec;
  tl::lock_handle h = token_lock(c).acquire(ec);
  if (ec) return;
  enter(*c.s, c.me, steady_deadline(h.expires()));
  const std::uint64_t next = read_counter(c.counter) + 1;
  const fs::path tmp = h.path() / "count.tmp";
  write_plain(tmp, std::to_string(next) + "\n");
  maybe_stop(c.rng);
  if (::rename(tmp.c_str(), c.counter.c_str()) == 0) {
    record_commit(*c.s, next);
  } else if (errno == ENOENT) {
    c.s->lost_locks.fetch_add(1);  // the token's path is gone: taken over
  } else {
    die("rename through the token");
  }
  leave(*c.s, c.me);
  h.release(ec);
}

// The same lock with the unfenced commit of update_file's cross-filesystem
// fallback: temp beside the target, ownership proved by a refresh rename,
// then the rename over the target.
void token_unfenced(context& c) {
  std::error_code ec;
  tl::lock_handle h = token_lock(c).acquire(ec);
  if (ec) return;
  update_beside(c, steady_deadline(h.expires()), [&] {
    std::error_code rec;
    h.refresh(rec);
    return !rec;
  });
  h.release(ec);
}

void with_flock(context& c) {
  static int fd = -1;
  if (fd < 0) fd = ::open((c.dir / "count.flock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) die("open the flock file");
  if (::flock(fd, LOCK_EX) != 0) die("flock");
  update_beside(c, forever);
  ::flock(fd, LOCK_UN);
}

// mkdir or symlink to acquire; "older than the age limit" is removed.
void age_based(context& c, bool use_symlink) {
  const fs::path lock = c.dir / "count.lck";
  for (;;) {
    if (!c.s->running.load()) return;
    const int r = use_symlink ? ::symlink(std::to_string(::getpid()).c_str(), lock.c_str())
                              : ::mkdir(lock.c_str(), 0755);
    if (r == 0) break;
    if (errno != EEXIST) die("take the lock");
    struct stat st;
    if (::lstat(lock.c_str(), &st) == 0) {
      const auto mtime = std::chrono::system_clock::time_point(
          std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec));
      if (std::chrono::system_clock::now() - mtime > age_limit) {
        if (use_symlink) ::unlink(lock.c_str()); else ::rmdir(lock.c_str());
        continue;
      }
    }
    ::usleep(500);
  }
  update_beside(c, now_us() + std::chrono::duration_cast<std::chrono::microseconds>(age_limit).count());
  if (use_symlink) ::unlink(lock.c_str()); else ::rmdir(lock.c_str());
}

// O_EXCL PID file; a file naming a dead process (or none yet: its creator
// has not written it) is removed.
void pid_file(context& c) {
  const fs::path lock = c.dir / "count.pid";
  for (;;) {
    if (!c.s->running.load()) return;
    int fd = ::open(lock.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      const std::string pid = std::to_string(::getpid());
      if (::write(fd, pid.data(), pid.size()) < 0) die("write the pid file");
      ::close(fd);
      break;
    }
    if (errno != EEXIST) die("create the pid file");
    std::optional<std::string> text = tl::read_file(lock);
    const long pid = text ? std::strtol(text->c_str(), nullptr, 10) : 0;
    if (text && (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH))) {
      ::unlink(lock.c_str());
      continue;
    }
    ::usleep(500);
  }
  update_beside(c, forever);
  // A careful script removes the file only while it still names itself.
  std::optional<std::string> text = tl::read_file(lock);
  if (text && std::strtol(text->c_str(), nullptr, 10) == ::getpid()) ::unlink(lock.c_str());
}

void no_lock(context& c) { update_beside(c, forever); }

struct strategy {
  const char* name;
  const char* description;
  strategy_fn run;
};

const std::vector<strategy>& strategies() {
  static const std::vector<strategy> all = {
      {"token-fenced", "rename-token lock, fenced commit", token_fenced},
      {"token-unfenced", "rename-token lock, unfenced commit", token_unfenced},
      {"flock", "flock(2)", with_flock},
      {"mkdir-age", "mkdir, removed when older than 250 ms",
       [](context& c) { age_based(c, false); }},
      {"symlink-age", "symlink, removed when older than 250 ms",
       [](context& c) { age_based(c, true); }},
      {"pid-file", "O_EXCL PID file, removed when its process is dead", pid_file},
      {"none", "no lock", no_lock},
  };
  return all;
}

// ---- the supervisor ---------------------------------------------------------

pid_t start_worker(shared_state& s, int me, const strategy& st, const fs::path& dir,
                   std::uint64_t seed) {
  s.slots[me].inside.store(0);
  s.slots[me].doomed.store(0);
  const pid_t pid = ::fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    context c{&s, me, dir, dir / "count", std::mt19937_64(seed)};
    while (s.running.load()) st.run(c);
    _exit(0);
  }
  s.slots[me].pid.store(pid);
  return pid;
}

struct result {
  std::string name, description;
  std::uint64_t commits = 0, final_value = 0, lost = 0, twice = 0;
  std::uint64_t overlaps_any = 0, overlaps_valid = 0, lost_locks = 0;
  int kills = 0, holder_kills = 0, stops = 0;
  std::vector<double> recovery_ms;
  double seconds = 0;
};

// Waits for every worker to end, continuing any that stops on the way. Any
// child, not one at a time: a worker may stop itself (its self-stop came
// just after the last SIGCONT) while holding a lock that the worker waited
// for in order is blocked on, and only its own stop can be answered.
void reap_all(const std::map<pid_t, int>& workers) {
  std::size_t left = workers.size();
  while (left > 0) {
    int status;
    const pid_t p = ::waitpid(-1, &status, WUNTRACED);
    if (p < 0) die("waitpid");
    if (!workers.count(p)) continue;
    if (WIFSTOPPED(status)) ::kill(p, SIGCONT);
    else --left;
  }
}

result run_strategy(const strategy& st, int workers, double seconds, std::uint64_t seed) {
  const fs::path dir = fs::temp_directory_path() / fs::unique_path("tokenlock-torture-%%%%%%%%");
  fs::create_directories(dir);
  void* mem = ::mmap(nullptr, sizeof(shared_state), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) die("mmap");
  shared_state& s = *new (mem) shared_state();

  std::mt19937_64 rng(seed);
  std::map<pid_t, int> slot_of;
  for (int i = 0; i < workers; ++i) slot_of[start_worker(s, i, st, dir, rng())] = i;

  result r;
  r.name = st.name;
  r.description = st.description;
  std::vector<std::int64_t> holder_killed_at;
  std::map<pid_t, std::int64_t> stopped_at;
  const std::int64_t start = now_us();
  const std::int64_t end = start + static_cast<std::int64_t>(seconds * 1e6);
  std::int64_t next_kill = start + 50000 + static_cast<std::int64_t>(rng() % 200000);
  const std::int64_t stall_us = std::chrono::duration_cast<std::chrono::microseconds>(stall).count();

  while (now_us() < end) {
    int status;
    pid_t p;
    while ((p = ::waitpid(-1, &status, WNOHANG | WUNTRACED)) > 0) {
      if (WIFSTOPPED(status)) {
        stopped_at[p] = now_us();
        ++r.stops;
      } else {
        std::fprintf(stderr, "torture: %s: worker %d ended unexpectedly (status %d)\n", st.name,
                     static_cast<int>(p), status);
        std::exit(2);
      }
    }
    for (auto it = stopped_at.begin(); it != stopped_at.end();) {
      if (now_us() - it->second >= stall_us) {
        ::kill(it->first, SIGCONT);
        it = stopped_at.erase(it);
      } else {
        ++it;
      }
    }
    if (now_us() >= next_kill) {
      const int victim = static_cast<int>(rng() % workers);
      slot& v = s.slots[victim];
      const pid_t pid = v.pid.load();
      v.doomed.store(1);
      // Recovery is measured from the kills of a holder with a valid claim
      // while no one is stopped: a stall in progress would be measured too.
      const bool was_inside = v.inside.load() != 0;
      const bool timed = was_inside && v.valid_until.load() > now_us() && stopped_at.empty();
      ::kill(pid, SIGKILL);
      if (::waitpid(pid, &status, 0) != pid) die("waitpid");
      const std::int64_t at = now_us();
      ++r.kills;
      if (was_inside) ++r.holder_kills;
      if (timed) holder_killed_at.push_back(at);
      stopped_at.erase(pid);
      slot_of.erase(pid);
      slot_of[start_worker(s, victim, st, dir, rng())] = victim;
      next_kill = at + 50000 + static_cast<std::int64_t>(rng() % 200000);
    }
    ::usleep(1000);  // the fault scheduler's tick; workers never wait on it
  }
  r.seconds = (now_us() - start) / 1e6;
  s.running.store(0);
  for (auto& [pid, i] : slot_of) ::kill(pid, SIGCONT);
  reap_all(slot_of);

  const std::size_t n = std::min(s.commits.load(), max_commits);
  std::vector<std::pair<std::int64_t, std::uint64_t>> log;
  std::set<std::uint64_t> values;
  for (std::size_t i = 0; i < n; ++i) {
    log.emplace_back(s.log[i].at.load(), s.log[i].value.load());
    values.insert(s.log[i].value.load());
  }
  std::sort(log.begin(), log.end());
  r.commits = n;
  r.final_value = read_counter(dir / "count");
  r.lost = r.commits > r.final_value ? r.commits - r.final_value : 0;
  r.twice = n - values.size();
  r.overlaps_any = s.overlaps_any.load();
  r.overlaps_valid = s.overlaps_valid.load();
  r.lost_locks = s.lost_locks.load();
  for (std::int64_t k : holder_killed_at) {
    auto it = std::upper_bound(log.begin(), log.end(), std::make_pair(k, UINT64_MAX));
    if (it != log.end()) r.recovery_ms.push_back((it->first - k) / 1000.0);
  }
  s.~shared_state();
  ::munmap(mem, sizeof(shared_state));
  fs::remove_all(dir);
  return r;
}

std::string recovery(const result& r) {
  if (r.recovery_ms.empty()) return "-";
  std::vector<double> v = r.recovery_ms;
  std::sort(v.begin(), v.end());
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f / %.1f (%zu)", v[v.size() / 2], v.back(), v.size());
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 4;
  int workers = 6;
  bool check = false;
  std::set<std::string> chosen;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a == "--workers" && i + 1 < argc) workers = std::atoi(argv[++i]);
    else if (a == "--stop-every" && i + 1 < argc) stop_every = std::atoi(argv[++i]);
    else if (a == "--check") check = true;
    else if (a == "--strategies" && i + 1 < argc) {
      std::string list = argv[++i];
      for (std::size_t p = 0; p != std::string::npos;) {
        const std::size_t q = list.find(',', p);
        chosen.insert(list.substr(p, q == std::string::npos ? q : q - p));
        p = q == std::string::npos ? q : q + 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: torture [--seconds S] [--workers W] [--stop-every N] [--strategies a,b,...] "
                   "[--check]\n");
      return 64;
    }
  }
  if (workers < 2 || workers > max_workers || seconds <= 0 || stop_every < 1) {
    std::fprintf(stderr, "torture: need 2..%d workers, a positive duration and --stop-every\n",
                 max_workers);
    return 64;
  }

  std::printf("%d workers, %.0f s per strategy; lease %lld ms (skew %lld ms), age limit %lld ms, "
              "stalls %lld ms, 1 in %d critical sections stops itself before its commit\n\n",
              workers, seconds, static_cast<long long>(lease.count()),
              static_cast<long long>(skew.count()), static_cast<long long>(age_limit.count()),
              static_cast<long long>(stall.count()), stop_every);
  std::printf("| strategy | commits/s | lost updates | values committed twice | entries while another "
              "was inside | the same, both claims valid | commits refused | SIGKILLs (of holders) | "
              "self-stops | "
              "recovery after a holder's SIGKILL, median / max ms (kills timed) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);

  std::vector<result> results;
  std::uint64_t seed = std::random_device{}();
  for (const strategy& st : strategies()) {
    if (!chosen.empty() && !chosen.count(st.name)) continue;
    result r = run_strategy(st, workers, seconds, seed++);
    std::printf("| %s | %.0f | %llu | %llu | %llu | %llu | %llu | %d (%d) | %d | %s |\n",
                r.description.c_str(), r.commits / r.seconds,
                static_cast<unsigned long long>(r.lost), static_cast<unsigned long long>(r.twice),
                static_cast<unsigned long long>(r.overlaps_any),
                static_cast<unsigned long long>(r.overlaps_valid),
                static_cast<unsigned long long>(r.lost_locks), r.kills, r.holder_kills, r.stops,
                recovery(r).c_str());
    std::fflush(stdout);
    results.push_back(std::move(r));
  }
  if (!check) return 0;

  int failures = 0;
  auto fail = [&](const std::string& why) {
    std::fprintf(stderr, "FAIL: %s\n", why.c_str());
    ++failures;
  };
  for (const result& r : results) {
    if (r.name == "token-fenced") {
      if (r.lost || r.twice) fail("the fenced rename-token lock lost updates");
      if (r.overlaps_valid) fail("the fenced rename-token lock let two valid leases overlap");
      if (r.commits == 0) fail("the fenced rename-token lock committed nothing");
      if (r.stops == 0 || r.holder_kills == 0)
        fail("no stall or no holder kill happened: the run proves little; run it longer");
    }
    if (r.name == "none" && r.lost == 0 && r.twice == 0)
      fail("no lock at all lost nothing: the loss detector is not working");
  }
  return failures ? 1 : 0;
}
