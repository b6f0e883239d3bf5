// tokenlock side by side with the locks people use instead, in one run on
// one filesystem:
//   tokenlock   rename_lock (library), its own waiting
//   flock       flock(2) on a lock file: blocks in the kernel
//   liblockfile lockfile_create(3) (Debian's NFS-safe dot-lock: link(2) of a
//               unique file), one attempt each time, polled
//   excl        open(O_CREAT|O_EXCL) of a lock file, unlink to release, polled
//   mkdir       mkdir(2) of a lock directory, rmdir to release, polled
// Polled locks retry with tokenlock's own default backoff (100 us doubling to
// 50 ms, +-25 %), so that the comparison is of the locks, not of the waiting.
//
//   bench/peers [--dir DIR] [--procs 4,16] [--seconds S] [--uncontended-ms MS]
//
// Uncontended: acquire+release per second by one process, the locks in
// shuffled rounds. Contended: N processes each loop (acquire, read a shared
// counter file, +1, write it in place, release) for S seconds in all, split
// into the same shuffled rounds: operations per second, Jain's index over
// the processes' counts, the slowest process's share, and lost updates (the
// sum of the counts minus the counter: must be 0). Prints a table and
// FIGURE lines (name, value, unit) for bench/plots.sh.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <lockfile.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/filesystem.hpp>

#include "tokenlock/tokenlock.hpp"

namespace fs = boost::filesystem;

namespace {

using clock_type = std::chrono::steady_clock;

// One lock of each kind, over a path it owns; acquire() waits.
struct lock_kind {
  std::string name;
  std::function<void(const std::string& path)> acquire, release;
};

// tokenlock's default backoff, for the locks that have no waiting of their own.
void poll_until(const std::function<bool()>& attempt) {
  std::mt19937 rng(static_cast<unsigned>(::getpid()) ^
                   static_cast<unsigned>(clock_type::now().time_since_epoch().count()));
  std::uniform_real_distribution<double> jitter(0.75, 1.25);
  std::chrono::microseconds delay(100);
  while (!attempt()) {
    std::this_thread::sleep_for(std::chrono::microseconds(
        static_cast<long>(static_cast<double>(delay.count()) * jitter(rng))));
    delay = std::min<std::chrono::microseconds>(delay * 2, std::chrono::milliseconds(50));
  }
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "peers: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

std::vector<lock_kind> kinds() {
  std::vector<lock_kind> k;
  // tokenlock: a lock object per process, as a program keeps one.
  static std::map<std::string, std::unique_ptr<tokenlock::rename_lock>> locks;
  static std::map<std::string, tokenlock::lock_handle> held;
  k.push_back({"tokenlock",
               [](const std::string& p) {
                 auto& l = locks[p];
                 if (!l) {
                   tokenlock::lock_options o;
                   o.wait = std::chrono::hours(1);
                   l = std::make_unique<tokenlock::rename_lock>(p, o);
                 }
                 held[p] = l->acquire();
               },
               [](const std::string& p) { held[p].release(); }});
  static std::map<std::string, int> fds;
  k.push_back({"flock",
               [](const std::string& p) {
                 int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
                 if (fd < 0) die("open " + p);
                 while (::flock(fd, LOCK_EX) != 0)
                   if (errno != EINTR) die("flock " + p);
                 fds[p] = fd;
               },
               [](const std::string& p) {
                 ::flock(fds[p], LOCK_UN);
                 ::close(fds[p]);
               }});
  k.push_back({"liblockfile",
               [](const std::string& p) {
                 poll_until([&] {
                   const int r = lockfile_create(p.c_str(), 0, L_PID);
                   if (r == L_SUCCESS) return true;
                   if (r != L_MAXTRYS) die("lockfile_create " + p + " (" + std::to_string(r) + ")");
                   return false;
                 });
               },
               [](const std::string& p) { lockfile_remove(p.c_str()); }});
  k.push_back({"excl",
               [](const std::string& p) {
                 poll_until([&] {
                   int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
                   if (fd >= 0) {
                     ::close(fd);
                     return true;
                   }
                   if (errno != EEXIST) die("open O_EXCL " + p);
                   return false;
                 });
               },
               [](const std::string& p) { ::unlink(p.c_str()); }});
  k.push_back({"mkdir",
               [](const std::string& p) {
                 poll_until([&] {
                   if (::mkdir(p.c_str(), 0755) == 0) return true;
                   if (errno != EEXIST) die("mkdir " + p);
                   return false;
                 });
               },
               [](const std::string& p) { ::rmdir(p.c_str()); }});
  return k;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double jain(const std::vector<long long>& x) {
  double s = 0, q = 0;
  for (long long v : x) {
    s += static_cast<double>(v);
    q += static_cast<double>(v) * static_cast<double>(v);
  }
  return q == 0 ? 0 : s * s / (static_cast<double>(x.size()) * q);
}

long long read_counter(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return 0;
  long long v = 0;
  if (std::fscanf(f, "%lld", &v) != 1) v = 0;
  std::fclose(f);
  return v;
}

void write_counter(const std::string& path, long long v) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die("write " + path);
  const std::string s = std::to_string(v) + "\n";
  if (::write(fd, s.data(), s.size()) != static_cast<ssize_t>(s.size())) die("write " + path);
  ::close(fd);
}

struct contended {
  double ops = 0, jain = 0;
  // The slowest process's updates against an equal share (1 = equal):
  // what the unluckiest client of a busy lock sees.
  double slowest = 0;
  long long lost = 0;
};

// N processes incrementing one counter under `k` for `seconds`; they start
// together on a pipe.
contended contend(const lock_kind& k, const fs::path& dir, int procs, double seconds) {
  const std::string lock = (dir / (k.name + ".lock")).string();
  const std::string counter = (dir / (k.name + ".count")).string();
  write_counter(counter, 0);
  int go[2], back[2];
  if (::pipe(go) != 0 || ::pipe(back) != 0) die("pipe");
  std::vector<pid_t> pids;
  for (int i = 0; i < procs; ++i) {
    pid_t pid = ::fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
      ::close(go[1]);
      ::close(back[0]);
      char c;
      if (::read(go[0], &c, 1) != 1) _exit(1);
      const auto end = clock_type::now() + std::chrono::duration<double>(seconds);
      long long n = 0;
      while (clock_type::now() < end) {
        k.acquire(lock);
        write_counter(counter, read_counter(counter) + 1);
        k.release(lock);
        ++n;
      }
      if (::write(back[1], &n, sizeof n) != static_cast<ssize_t>(sizeof n)) _exit(1);
      _exit(0);
    }
    pids.push_back(pid);
  }
  ::close(go[0]);
  ::close(back[1]);
  const auto start = clock_type::now();
  const std::string start_all(static_cast<std::size_t>(procs), 'g');
  if (::write(go[1], start_all.data(), start_all.size()) != static_cast<ssize_t>(start_all.size()))
    die("start");
  ::close(go[1]);
  std::vector<long long> counts;
  long long n = 0;
  while (::read(back[0], &n, sizeof n) == static_cast<ssize_t>(sizeof n)) counts.push_back(n);
  const double took = std::chrono::duration<double>(clock_type::now() - start).count();
  ::close(back[0]);
  for (pid_t p : pids) {
    int status = 0;
    ::waitpid(p, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("a " + k.name + " worker failed");
  }
  if (static_cast<int>(counts.size()) != procs) die("a " + k.name + " worker did not report");
  long long sum = 0;
  for (long long c : counts) sum += c;
  contended r;
  r.ops = static_cast<double>(sum) / took;
  r.jain = jain(counts);
  const double mean = static_cast<double>(sum) / static_cast<double>(counts.size());
  r.slowest = mean > 0 ? static_cast<double>(*std::min_element(counts.begin(), counts.end())) / mean : 0;
  r.lost = sum - read_counter(counter);
  return r;
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::atoi(item.c_str()));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string where = fs::temp_directory_path().string();
  std::vector<int> procs{4, 16};
  double seconds = 3, uncontended_ms = 300;
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "peers: %s needs a value\n", a.c_str());
        std::exit(64);
      }
      return argv[++i];
    };
    if (a == "--dir") where = next();
    else if (a == "--procs") procs = parse_list(next());
    else if (a == "--seconds") seconds = std::atof(next().c_str());
    else if (a == "--uncontended-ms") uncontended_ms = std::atof(next().c_str());
    else if (a == "--rounds") rounds = std::atoi(next().c_str());
    else {
      std::fprintf(stderr,
                   "usage: peers [--dir DIR] [--procs 4,16] [--seconds S] [--uncontended-ms MS] "
                   "[--rounds N]\n");
      return 64;
    }
  }
  const fs::path dir = fs::path(where) / fs::unique_path("tokenlock-peers-%%%%-%%%%");
  fs::create_directories(dir);
  std::vector<lock_kind> all = kinds();

  // Uncontended: each round runs every lock for uncontended_ms, in a new order.
  std::map<std::string, std::vector<double>> rates;
  std::mt19937 rng(std::random_device{}());
  std::vector<size_t> order(all.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (int r = 0; r < rounds; ++r) {
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t i : order) {
      const lock_kind& k = all[i];
      const std::string lock = (dir / (k.name + ".solo")).string();
      long long n = 0;
      const auto start = clock_type::now();
      const auto end = start + std::chrono::duration<double, std::milli>(uncontended_ms);
      while (clock_type::now() < end) {
        for (int j = 0; j < 64; ++j) {
          k.acquire(lock);
          k.release(lock);
        }
        n += 64;
      }
      rates[k.name].push_back(static_cast<double>(n) /
                              std::chrono::duration<double>(clock_type::now() - start).count());
    }
  }
  std::printf("uncontended acquire+release, median of %d rounds (%s)\n", rounds, dir.c_str());
  std::printf("%-12s %14s %16s\n", "lock", "per second", "tokenlock / it");
  const double ours = median(rates["tokenlock"]);
  for (const auto& k : all) {
    const double m = median(rates[k.name]);
    std::printf("%-12s %14.0f %15.2fx\n", k.name.c_str(), m, ours / m);
    std::printf("FIGURE name=uncontended_%s value=%.0f unit=ops/s\n", k.name.c_str(), m);
  }

  // Contended: each round runs every lock for seconds / rounds, in a new
  // order; medians over the rounds, lost updates summed. A machine whose
  // speed drifts over a run then moves every lock alike.
  for (int n : procs) {
    std::map<std::string, std::vector<double>> ops, jains, slowest;
    std::map<std::string, long long> lost;
    for (int r = 0; r < rounds; ++r) {
      std::shuffle(order.begin(), order.end(), rng);
      for (size_t i : order) {
        const contended c = contend(all[i], dir, n, seconds / rounds);
        ops[all[i].name].push_back(c.ops);
        jains[all[i].name].push_back(c.jain);
        slowest[all[i].name].push_back(c.slowest);
        lost[all[i].name] += c.lost;
      }
    }
    std::printf("\n%d processes incrementing one counter, %d rounds of %.2f s, medians\n", n, rounds,
                seconds / rounds);
    std::printf("%-12s %14s %8s %8s %6s\n", "lock", "ops/s", "Jain", "slowest", "lost");
    for (const auto& k : all) {
      const std::string& m = k.name;
      std::printf("%-12s %14.0f %8.3f %8.3f %6lld\n", m.c_str(), median(ops[m]), median(jains[m]),
                  median(slowest[m]), lost[m]);
      std::printf("FIGURE name=contended_%d_%s_ops value=%.0f unit=ops/s\n", n, m.c_str(), median(ops[m]));
      std::printf("FIGURE name=contended_%d_%s_jain value=%.3f unit=index\n", n, m.c_str(),
                  median(jains[m]));
      std::printf("FIGURE name=contended_%d_%s_slowest value=%.3f unit=share\n", n, m.c_str(),
                  median(slowest[m]));
      std::printf("FIGURE name=contended_%d_%s_lost value=%lld unit=updates\n", n, m.c_str(), lost[m]);
    }
  }
  fs::remove_all(dir);
  return 0;
}
