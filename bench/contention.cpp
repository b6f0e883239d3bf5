// Throughput of the lock under contention from real processes.
//
//   bench/contention [--procs 1,2,4,8,16] [--seconds S] [--wake on|off|both]
//                    [--queue on|off|both]
//                    [--hold-us N] [--backoff-us N] [--dir DIR]
//
// For each process count N, N forked processes loop doing acquire,
// read-increment-write of a shared counter file, release; S seconds per row,
// split into three rounds that each pair a single-process run with an
// N-process run. Prints the N-process rate, the median ratio to the paired
// single-process runs, the Jain fairness index over the processes' counts
// (median of the rounds), and the lost
// increments (counter minus the sum of the counts; must be 0). --hold-us
// sleeps that long inside the critical section (I/O); --backoff-us sets
// lock_options::backoff_min. --wake
// chooses lock_options::wake_on_release (inotify) or runs both side by side;
// --queue does the same for lock_options::queue_waiters (the line of
// waiters, "+line" in the table).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <boost/filesystem.hpp>

#include "monotonic.hpp"
#include "tokenlock/tokenlock.hpp"

namespace fs = boost::filesystem;

namespace {

using tokenlock::bench::now_s;

struct result {
  double rate = 0, jain = 0;
  long long lost = 0;
};

struct mode {
  bool wake, queue;
  std::string name() const {
    return std::string(wake ? "inotify" : "polling") + (queue ? "+line" : "");
  }
};

long long worker(const fs::path& lock_dir, const std::string& counter_path, mode m,
                 double seconds, int barrier, long hold_us, long backoff_us) {
  tokenlock::lock_options o;
  o.wake_on_release = m.wake;
  o.queue_waiters = m.queue;
  if (backoff_us > 0) o.backoff_min = std::chrono::microseconds(backoff_us);
  o.wait = std::chrono::seconds(60);
  tokenlock::rename_lock lock(lock_dir, o);
  int fd = ::open(counter_path.c_str(), O_RDWR | O_CLOEXEC);
  char c;
  while (::read(barrier, &c, 1) < 0 && errno == EINTR) {
  }
  long long ops = 0;
  const double end = now_s() + seconds;
  char buf[32];
  while (now_s() < end) {
    tokenlock::lock_handle h = lock.acquire();
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    unsigned long long v = std::strtoull(buf, nullptr, 10) + 1;
    int len = std::snprintf(buf, sizeof buf, "%020llu\n", v);
    if (::pwrite(fd, buf, static_cast<size_t>(len), 0) != len) std::abort();
    if (hold_us > 0) {
      // Models a critical section that waits for I/O.
      timespec ts{hold_us / 1000000, (hold_us % 1000000) * 1000};
      ::nanosleep(&ts, nullptr);
    }
    h.release();
    ++ops;
  }
  return ops;
}

result run(const fs::path& root, int procs, mode m, double seconds, long hold_us,
           long backoff_us) {
  const std::string name = "c" + std::to_string(procs) + m.name();
  const fs::path lock_dir = root / (name + ".lock");
  const std::string counter = (root / name).string();
  { int fd = ::open(counter.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644); ::close(fd); }
  tokenlock::rename_lock(lock_dir).acquire().release();  // create before timing
  int barrier[2], results[2];
  if (::pipe(barrier) != 0 || ::pipe(results) != 0) std::abort();
  std::vector<pid_t> pids;
  for (int i = 0; i < procs; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(barrier[1]);
      ::close(results[0]);
      long long ops = worker(lock_dir, counter, m, seconds, barrier[0], hold_us, backoff_us);
      if (::write(results[1], &ops, sizeof ops) != sizeof ops) ::_exit(1);
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  ::close(barrier[0]);
  ::close(results[1]);
  const double start = now_s();
  ::close(barrier[1]);  // go
  std::vector<long long> counts;
  long long ops;
  while (::read(results[0], &ops, sizeof ops) == sizeof ops) counts.push_back(ops);
  const double elapsed = now_s() - start;
  ::close(results[0]);
  for (pid_t p : pids) ::waitpid(p, nullptr, 0);
  double sum = 0, sq = 0;
  for (long long x : counts) {
    sum += static_cast<double>(x);
    sq += static_cast<double>(x) * static_cast<double>(x);
  }
  result r;
  r.rate = sum / elapsed;
  r.jain = sq > 0 ? sum * sum / (static_cast<double>(counts.size()) * sq) : 0;
  FILE* f = std::fopen(counter.c_str(), "r");
  unsigned long long final_value = 0;
  if (f) {
    if (std::fscanf(f, "%llu", &final_value) != 1) final_value = 0;
    std::fclose(f);
  }
  r.lost = static_cast<long long>(sum) - static_cast<long long>(final_value);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> procs{1, 2, 4, 8, 16};
  double seconds = 2;
  std::string wake = "both", queue = "both";
  long hold_us = 0, backoff_us = 0;
  fs::path base = fs::temp_directory_path();
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--procs") {
      procs.clear();
      std::stringstream ss(v);
      for (std::string p; std::getline(ss, p, ',');) procs.push_back(std::atoi(p.c_str()));
    } else if (k == "--seconds") {
      seconds = std::atof(v.c_str());
    } else if (k == "--wake") {
      wake = v;
    } else if (k == "--queue") {
      queue = v;
    } else if (k == "--backoff-us") {
      backoff_us = std::atol(v.c_str());
    } else if (k == "--hold-us") {
      hold_us = std::atol(v.c_str());
    } else if (k == "--dir") {
      base = v;
    } else {
      std::fprintf(stderr, "usage: contention [--procs 1,2,4] [--seconds S] [--wake on|off|both] [--queue on|off|both] [--hold-us N] [--backoff-us N] [--dir DIR]\n");
      return 64;
    }
  }
  const fs::path root = base / fs::unique_path("tokenlock-contention-%%%%-%%%%");
  fs::create_directories(root);
  std::vector<mode> modes;
  for (bool w : {true, false})
    for (bool q : {true, false})
      if ((w ? wake != "off" : wake != "on") && (q ? queue != "off" : queue != "on"))
        modes.push_back({w, q});
  // Each row alternates `rounds` single-process runs with N-process runs and
  // reports the median of the paired ratios: the machine's speed drifts by
  // tens of percent over seconds, so a baseline measured once, rows earlier,
  // would make the ratios mostly noise.
  std::printf("%-13s %6s %12s %10s %7s %5s\n", "wake", "procs", "ops/s", "vs 1 proc", "Jain", "lost");
  int failures = 0;
  const int rounds = 3;
  for (const mode& w : modes) {
    for (int n : procs) {
      std::vector<double> ratios, rates, jains;
      long long lost = 0;
      for (int r = 0; r < rounds; ++r) {
        result single = run(root, 1, w, seconds / rounds, hold_us, backoff_us);
        result many = run(root, n, w, seconds / rounds, hold_us, backoff_us);
        ratios.push_back(single.rate > 0 ? many.rate / single.rate : 0);
        rates.push_back(many.rate);
        jains.push_back(many.jain);
        lost += single.lost + many.lost;
      }
      auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      std::printf("%-13s %6d %12.0f %9.2fx %7.3f %5lld\n", w.name().c_str(), n,
                  median(rates), median(ratios), median(jains), lost);
      // The same, for bench/plots.sh.
      std::printf("FIGURE name=contention_%s_%d_vs1 value=%.3f unit=x\n", w.name().c_str(), n,
                  median(ratios));
      std::printf("FIGURE name=contention_%s_%d_jain value=%.3f unit=index\n", w.name().c_str(),
                  n, median(jains));
      std::fflush(stdout);
      failures += lost != 0;
    }
  }
  fs::remove_all(root);
  return failures ? 1 : 0;
}
