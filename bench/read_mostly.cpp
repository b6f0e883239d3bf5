// A read-mostly load from real processes: each of P processes loops, and
// each turn is a read (shared hold) with probability 1 - W, else a write
// (exclusive hold); either holds for H µs (a sleep: a request waiting for
// I/O). Three locks carry the same load, run interleaved round by round
// (the machine's speed drifts by tens of percent over seconds):
//   shared     tokenlock, reads shared (lock_options::mode), writes exclusive
//   exclusive  tokenlock, every turn exclusive (what a program without
//              shared locks does)
//   flock      flock(2) on one file, LOCK_SH for reads, LOCK_EX for writes
// Prints each round's operations per second, and the median, the minimum
// and the maximum over the rounds of shared/exclusive and shared/flock
// (docs/benchmarks.md, Shared locks; issue 32's targets: >= 4 and >= 0.8).
//
//   bench/read_mostly [--procs P] [--seconds S] [--rounds R] [--hold-us H]
//                     [--writes W] [--lease-ms L] [--dir DIR] [--keep 1]
//                     [--only shared|exclusive|flock]
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <boost/filesystem.hpp>

#include "monotonic.hpp"
#include "tokenlock/tokenlock.hpp"

namespace fs = boost::filesystem;

namespace {

using tokenlock::bench::now_s;

enum class kind { shared, exclusive, flock };  // the columns, in this order

struct load {
  int procs = 8;
  double seconds = 1;
  int rounds = 5;
  long hold_us = 1000;
  double writes = 0.1;
  bool keep = false;  // leave the lock directory for a look afterwards
  long lease_ms = 60000;  // the library's default lease
  std::string only;       // one lock alone (for a profile), or all three
};

void hold_for(long us) {
  timespec ts{us / 1000000, (us % 1000000) * 1000};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

// One process's turns until `end`; returns how many.
long long turns(kind k, const fs::path& where, const load& l, double end) {
  std::mt19937 rng(static_cast<unsigned>(::getpid()));
  std::bernoulli_distribution is_write(l.writes);
  tokenlock::lock_options ro, wo;
  ro.mode = k == kind::shared ? tokenlock::lock_mode::shared : tokenlock::lock_mode::exclusive;
  ro.wait = wo.wait = std::chrono::seconds(120);
  ro.lease = wo.lease = std::chrono::milliseconds(l.lease_ms);
  const tokenlock::rename_lock readers(where / "page.lock", ro), writers(where / "page.lock", wo);
  const int fd = ::open((where / "page.flock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  long long n = 0;
  for (; now_s() < end; ++n) {
    const bool write = is_write(rng);
    if (k == kind::flock) {
      if (::flock(fd, write ? LOCK_EX : LOCK_SH) != 0) std::abort();
      hold_for(l.hold_us);
      ::flock(fd, LOCK_UN);
    } else {
      tokenlock::lock_handle h = (write ? writers : readers).acquire();
      hold_for(l.hold_us);
      h.release();
    }
  }
  ::close(fd);
  return n;
}

// Operations per second of P processes on the lock `k`.
double run(kind k, const fs::path& root, const load& l) {
  int barrier[2], results[2];
  if (::pipe(barrier) != 0 || ::pipe(results) != 0) std::abort();
  std::vector<pid_t> pids;
  for (int i = 0; i < l.procs; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(barrier[1]);
      ::close(results[0]);
      char c;
      while (::read(barrier[0], &c, 1) < 0 && errno == EINTR) {
      }
      const long long n = turns(k, root, l, now_s() + l.seconds);
      ::_exit(::write(results[1], &n, sizeof n) == sizeof n ? 0 : 1);
    }
    pids.push_back(pid);
  }
  ::close(barrier[0]);
  ::close(results[1]);
  const double start = now_s();
  ::close(barrier[1]);
  long long total = 0, n = 0;
  while (::read(results[0], &n, sizeof n) == sizeof n) total += n;
  const double elapsed = now_s() - start;
  ::close(results[0]);
  for (pid_t p : pids) ::waitpid(p, nullptr, 0);
  return static_cast<double>(total) / elapsed;
}

struct spread {
  double median, min, max;
};
spread spread_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

bool parse(int argc, char** argv, load& l, fs::path& base) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--procs") l.procs = std::atoi(v);
    else if (k == "--seconds") l.seconds = std::atof(v);
    else if (k == "--rounds") l.rounds = std::atoi(v);
    else if (k == "--hold-us") l.hold_us = std::atol(v);
    else if (k == "--writes") l.writes = std::atof(v);
    else if (k == "--dir") base = v;
    else if (k == "--keep") l.keep = std::atoi(v) != 0;
    else if (k == "--lease-ms") l.lease_ms = std::atol(v);
    else if (k == "--only") l.only = v;
    else return false;
  }
  return argc % 2 == 1 && l.procs > 0 && l.rounds > 0;
}

}  // namespace

int main(int argc, char** argv) {
  load l;
  fs::path base = fs::temp_directory_path();
  if (!parse(argc, argv, l, base)) {
    std::fprintf(stderr, "usage: read_mostly [--procs P] [--seconds S] [--rounds R] [--hold-us H] "
                         "[--writes W] [--lease-ms L] [--dir DIR] [--keep 1] [--only shared|exclusive|flock]\n");
    return 64;
  }
  const fs::path root = base / fs::unique_path("tokenlock-read-mostly-%%%%-%%%%");
  fs::create_directories(root);
  tokenlock::rename_lock(root / "page.lock").acquire().release();  // created before timing
  std::printf("%d processes, %.0f %% writes, holding %ld us, %d rounds of %.1f s each\n", l.procs,
              l.writes * 100, l.hold_us, l.rounds, l.seconds);
  std::printf("%5s %12s %12s %12s\n", "round", "shared/s", "exclusive/s", "flock/s");
  std::vector<double> vs_exclusive, vs_flock;
  std::vector<kind> order{kind::shared, kind::exclusive, kind::flock};
  std::mt19937 rng(std::random_device{}());
  for (int r = 0; r < l.rounds; ++r) {
    std::shuffle(order.begin(), order.end(), rng);
    double rate[3] = {0, 0, 0};
    for (kind k : order)
      if (l.only.empty() || l.only == (k == kind::shared ? "shared" : k == kind::exclusive ? "exclusive" : "flock"))
        rate[static_cast<int>(k)] = run(k, root, l);
    std::printf("%5d %12.0f %12.0f %12.0f\n", r + 1, rate[0], rate[1], rate[2]);
    std::fflush(stdout);
    vs_exclusive.push_back(rate[0] / rate[1]);
    vs_flock.push_back(rate[0] / rate[2]);
  }
  const spread e = spread_of(vs_exclusive), f = spread_of(vs_flock);
  std::printf("shared / exclusive = %.2f (rounds %.2f..%.2f; target >= 4)\n", e.median, e.min, e.max);
  std::printf("shared / flock     = %.2f (rounds %.2f..%.2f; target >= 0.8)\n", f.median, f.min, f.max);
  std::printf("FIGURE name=read_mostly_vs_exclusive value=%.3f unit=x\n", e.median);
  std::printf("FIGURE name=read_mostly_vs_flock value=%.3f unit=x\n", f.median);
  if (!l.keep) fs::remove_all(root);
  return 0;
}
