// The etcd lock against its four targets, side by side in one run on one
// cluster (docs/etcd.md, Figures; bench/etcd_bench.sh starts the cluster):
//
//   etcd_bench [--rounds N] [--cycles N] [--process-cycles N] [--handoffs N]
//              [--jain-procs N] [--jain-total N] [--command PATH] URL
//
//   pair      acquire + release in a warm process against the four bare
//             requests they make (lease grant, put-if-absent Txn,
//             compare-delete Txn, revoke) sent bare by a second instance
//             of the library's client class (the lock's own is private),
//             kept alive to the same first member; ROUNDS rounds of CYCLES
//             each, shuffled; target: ratio <= 1.3.
//   process   a process per cycle that takes the lock, runs `true` under
//             it and releases: this program through the library
//             (--child run), `tokenlock run --etcd URL NAME true` when
//             --command names a tokenlock whose run knows --etcd, against
//             `etcdctl lock NAME true`; target: ratio < 1.
//   handoff   a holder and one waiter blocked in its watch (the members'
//             watcher count has risen by one before the release): from the
//             moment the release's delete was answered to the waiter's
//             acquire returning (one host, one CLOCK_MONOTONIC), against
//             the median round trip of a bare put by the holder's side;
//             target: median <= put + 1 ms.
//   jain      JAIN_PROCS processes, started together, take the lock until
//             JAIN_TOTAL grants were counted; Jain's index over their
//             counts; target: >= 0.95.
//
// Output: "TARGET name=... value=... reference=... ratio=... target=...
// result=PASS|MISS", "FIGURE name=... value=... unit=..." and a table.
// The exit status says whether every workload ran correctly (every acquire
// granted, nobody inside twice, samples taken), never whether a target was
// met: times on a shared machine are for people to read.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include <curl/curl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "etcd/etcd_wait_stats.hpp"
#include "etcd_bench_support.hpp"
#include "tokenlock/etcd_lock.hpp"

namespace {

using tokenlock::bench::median;
using tokenlock::bench::percentile;

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "etcd_bench: %s\n", m.c_str());
  std::exit(2);
}

long long mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// When the release's delete was answered. release() sends the delete Txn
// and then the revoke, and the next holder wakes from the delete: the
// time after release() returns is a revoke later than the hand-off's start.
// So, while armed, this program notes when each request's answer arrived
// (the client's on_answer hook, etcd_wait_stats.hpp).
struct answer_clock {
  bool armed = false;
  int answers = 0;
  long long first_ns = 0;
};
answer_clock g_answers;

void note_answer() {
  if (g_answers.armed && g_answers.answers++ == 0) g_answers.first_ns = mono_ns();
}

}  // namespace

namespace {

// One target's line.
struct target_row {
  std::string name, unit, goal;
  double value = 0, reference = 0, ratio = 0;
  bool pass = false;
};
std::vector<target_row> g_rows;

void report(target_row r) {
  std::printf("TARGET name=%s value=%.3f reference=%.3f unit=%s ratio=%.3f target=\"%s\" result=%s\n",
              r.name.c_str(), r.value, r.reference, r.unit.c_str(), r.ratio, r.goal.c_str(),
              r.pass ? "PASS" : "MISS");
  g_rows.push_back(std::move(r));
}

void figure(const std::string& name, double value, const char* unit) {
  std::printf("FIGURE name=%s value=%.3f unit=%s\n", name.c_str(), value, unit);
}

void print_table() {
  std::printf("\n%-18s %12s %12s %-6s %8s  %-16s %s\n", "target", "measured", "reference", "unit",
              "ratio", "target", "result");
  for (const auto& r : g_rows)
    std::printf("%-18s %12.3f %12.3f %-6s %8.3f  %-16s %s\n", r.name.c_str(), r.value, r.reference,
                r.unit.c_str(), r.ratio, r.goal.c_str(), r.pass ? "PASS" : "MISS");
}

// ---- pair: the lock against the requests it makes ---------------------------

void pair_target(const std::string& url, int rounds, int cycles) {
  tokenlock::etcd_lock lock(url, "bench-pair");
  auto bare = tokenlock::bench::etcd_bare_client(url);
  const auto us = tokenlock::bench::run_rounds(
      {{"lock", [&] { lock.acquire().release(); }},
       {"bare", [&] { tokenlock::bench::etcd_bare_cycle(*bare, "tokenlock/bench-bare/"); }}},
      rounds, cycles);
  const double ratio = tokenlock::bench::median_ratio(us.at("lock"), us.at("bare"));
  report({"acquire_release", "us", "ratio <= 1.30", median(us.at("lock")), median(us.at("bare")), ratio,
          ratio <= 1.3});
}

// ---- process: a process per lock, against etcdctl ---------------------------

// The lock in a child process, as a command would use it: acquire, run
// `true` under the lock (etcdctl lock NAME true does the same), release.
int child_run(const std::string& url, const std::string& name) {
  tokenlock::etcd_lock_options o;
  o.wait = std::chrono::seconds(30);
  tokenlock::etcd_lock lock(url, name, o);
  tokenlock::etcd_handle h = lock.acquire();
  tokenlock::bench::run_process({"true"});
  h.release();
  return 0;
}

// Whether `command run --help` mentions --etcd.
bool command_knows_etcd(const std::string& command) {
  const std::string probe = "'" + command + "' run --help 2>&1";
  FILE* p = ::popen(probe.c_str(), "r");
  if (!p) return false;
  std::string text;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) text.append(buf, n);
  ::pclose(p);
  return text.find("--etcd") != std::string::npos;
}

void process_target(const std::string& url, const std::string& self, const std::string& command,
                    int rounds, int cycles) {
  const std::string endpoints = tokenlock::bench::etcdctl_endpoints(url);
  using tokenlock::bench::run_process;
  tokenlock::bench::workloads w{
      {"library", [&] { run_process({self, "--child", "run", url, "bench-process-library"}); }},
      {"etcdctl",
       [&] { run_process({"etcdctl", "--endpoints=" + endpoints, "lock", "bench-process-etcdctl", "true"}); }},
  };
  const bool with_command = !command.empty() && command_knows_etcd(command);
  if (with_command)
    w["command"] = [&] { run_process({command, "run", "--etcd", url, "bench-process-command", "true"}); };
  else if (!command.empty())
    std::printf("# note: %s run --help does not mention --etcd; the command's workload is left out\n",
                command.c_str());
  else
    std::printf("# note: no --command PATH (a tokenlock); the command's workload is left out\n");
  const auto us = tokenlock::bench::run_rounds(w, rounds, cycles);
  const double ctl = median(us.at("etcdctl"));
  for (const char* who : {"library", "command"}) {
    if (!us.count(who)) continue;
    const double ratio = tokenlock::bench::median_ratio(us.at(who), us.at("etcdctl"));
    report({std::string("process_") + who, "us", "ratio < 1.00", median(us.at(who)), ctl,
            ratio, ratio < 1.0});
  }
}

// ---- handoff: from the release's delete to the next holder's grant ----------

size_t append_text(char* p, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(p, size * n);
  return size * n;
}

// The watchers open on the whole cluster: the sum over the members of
// etcd's etcd_debugging_mvcc_watcher_total gauge (/metrics).
long cluster_watchers(CURL* h, const std::vector<std::string>& members) {
  long total = 0;
  for (const auto& m : members) {
    std::string text;
    const std::string url = m + "/metrics";
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, append_text);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &text);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 2000L);
    if (curl_easy_perform(h) != CURLE_OK) die("GET " + url + " failed: is the member running?");
    const char* name = "\netcd_debugging_mvcc_watcher_total ";
    const auto at = text.find(name);
    if (at == std::string::npos) die(url + " has no etcd_debugging_mvcc_watcher_total (etcd 3.4 has)");
    total += std::atol(text.c_str() + at + std::strlen(name));
  }
  return total;
}

// Polls the gauge (every millisecond, for at most 10 s) until it is
// `want`; `waiter`, when given, must not end meanwhile.
void await_watchers(CURL* h, const std::vector<std::string>& members, long want, pid_t waiter = 0) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  long seen = 0;
  while ((seen = cluster_watchers(h, members)) != want) {
    if (waiter > 0 && ::waitpid(waiter, nullptr, WNOHANG) == waiter)
      die("handoff: the waiter ended before it was seen waiting (its message is above)");
    if (std::chrono::steady_clock::now() > deadline)
      die("handoff: the cluster has " + std::to_string(seen) + " watchers after 10 s, not " +
          std::to_string(want) + ": is another client watching it?");
    ::usleep(1000);
  }
}

// The waiter: takes the lock behind the parent and sends back when its
// acquire returned.
[[noreturn]] void handoff_waiter(const std::string& url, int out) {
  try {
    tokenlock::etcd_lock_options o;
    o.wait = std::chrono::seconds(30);
    tokenlock::etcd_lock lock(url, "bench-handoff", o);
    tokenlock::etcd_handle g = lock.acquire();
    const long long granted = mono_ns();
    if (::write(out, &granted, sizeof granted) != sizeof granted) ::_exit(3);
    g.release();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "etcd_bench: handoff waiter: %s\n", e.what());
    ::_exit(3);
  }
  ::_exit(0);
}

// Releases `h` and returns when its first request (the delete) was
// answered; release() must have sent two (delete, revoke). `called` is
// when release() was called.
long long release_timed(tokenlock::etcd_handle& h, long long& called) {
  g_answers = answer_clock{true, 0, 0};
  tokenlock::detail::this_thread_etcd_wait_stats().on_answer = note_answer;
  called = mono_ns();
  h.release();
  const answer_clock a = g_answers;
  g_answers.armed = false;
  tokenlock::detail::this_thread_etcd_wait_stats().on_answer = nullptr;
  if (a.answers != 2)
    die("handoff: release() sent " + std::to_string(a.answers) +
        " requests, not the delete and the revoke (a member failed over?)");
  return a.first_ns;
}

struct handoff_sample {
  double from_delete_us = 0;  // the target's measure
  double from_call_us = 0;    // from release() being called, as redis_bench measures it
};

handoff_sample one_handoff(const std::string& url, tokenlock::etcd_lock& holder, CURL* metrics,
                           const std::vector<std::string>& members, long idle) {
  await_watchers(metrics, members, idle);  // the last waiter's watch has closed
  tokenlock::etcd_handle h = holder.acquire();
  int fd[2];
  if (::pipe(fd)) die("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) die("fork failed");
  if (pid == 0) {
    ::close(fd[0]);
    handoff_waiter(url, fd[1]);
  }
  ::close(fd[1]);
  await_watchers(metrics, members, idle + 1, pid);  // the waiter is in its watch
  long long called = 0;
  const long long deleted = release_timed(h, called);
  long long granted = 0;
  const bool got = ::read(fd[0], &granted, sizeof granted) == sizeof granted;
  ::close(fd[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (!got || !WIFEXITED(st) || WEXITSTATUS(st) != 0) die("handoff: the waiter got no grant");
  if (granted < called) die("handoff: the waiter was granted the lock before the holder released it");
  return {static_cast<double>(granted - deleted) / 1000.0, static_cast<double>(granted - called) / 1000.0};
}

void handoff_target(const std::string& url, int n) {
  tokenlock::detail::etcd_url u;
  if (auto f = tokenlock::detail::parse_etcd_url(url, u)) die(f.message);
  CURL* metrics = curl_easy_init();
  if (!metrics) die("curl_easy_init failed");
  auto bare = tokenlock::bench::etcd_bare_client(url);
  tokenlock::etcd_lock holder(url, "bench-handoff");
  const long idle = cluster_watchers(metrics, u.members);
  const tokenlock::detail::json put{{"key", tokenlock::detail::base64_encode("tokenlock-bench/rtt")},
                                    {"value", tokenlock::detail::base64_encode("x")}};
  std::vector<double> rtt, lat, from_call;
  for (int i = 0; i < n; ++i) {
    // Round trips between the hand-offs: what one costs drifts over a run.
    for (int k = 0; k < 5; ++k) {
      tokenlock::detail::json out;
      const long long t = mono_ns();
      if (auto f = bare->call("put", "/v3/kv/put", put, out)) die(f.message);
      rtt.push_back(static_cast<double>(mono_ns() - t) / 1000.0);
    }
    const handoff_sample h = one_handoff(url, holder, metrics, u.members, idle);
    lat.push_back(h.from_delete_us);
    from_call.push_back(h.from_call_us);
  }
  curl_easy_cleanup(metrics);
  if (lat.size() != static_cast<std::size_t>(n)) die("handoff: samples missing");
  const double m = median(lat), r = median(rtt);
  figure("handoff_samples", static_cast<double>(lat.size()), "count");
  figure("handoff_p90", percentile(lat, 0.9), "us");
  figure("handoff_from_release_call", median(from_call), "us");
  figure("put_rtt", r, "us");
  report({"handoff", "us", "<= put + 1000 us", m, r, m / r, m <= r + 1000.0});
}

// ---- jain: fairness among processes contending for one lock -----------------

// Shared by the contenders (MAP_SHARED); changed only while holding the
// lock, except `inside`, which catches two holders at once.
struct contention {
  std::atomic<long> granted{0};
  std::atomic<int> inside{0};
  std::atomic<long> overlaps{0};
};

// A contender: takes the lock until `total` grants were counted by all.
[[noreturn]] void contender(const std::string& url, contention& s, long total, int gate, int out) {
  char c;
  if (::read(gate, &c, 1) < 0) ::_exit(3);  // EOF: everyone starts together
  long mine = 0;
  try {
    tokenlock::etcd_lock_options o;
    o.wait = std::chrono::seconds(120);
    tokenlock::etcd_lock lock(url, "bench-jain", o);
    for (;;) {
      tokenlock::etcd_handle h = lock.acquire();
      if (s.inside.exchange(1) != 0) ++s.overlaps;
      const bool done = s.granted.load() >= total;
      if (!done) {
        ++s.granted;
        ++mine;
      }
      s.inside.store(0);
      h.release();
      if (done) break;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "etcd_bench: jain contender: %s\n", e.what());
    ::_exit(3);
  }
  if (::write(out, &mine, sizeof mine) != sizeof mine) ::_exit(3);
  ::_exit(0);
}

// Starts the contenders behind one gate; returns each one's grants.
std::vector<long> contend(const std::string& url, contention& s, int procs, long total) {
  int gate[2];
  if (::pipe(gate)) die("pipe failed");
  std::vector<int> fds;
  std::vector<pid_t> pids;
  for (int p = 0; p < procs; ++p) {
    int fd[2];
    if (::pipe(fd)) die("pipe failed");
    const pid_t pid = ::fork();
    if (pid < 0) die("fork failed");
    if (pid == 0) {
      ::close(fd[0]);
      ::close(gate[1]);
      contender(url, s, total, gate[0], fd[1]);
    }
    ::close(fd[1]);
    fds.push_back(fd[0]);
    pids.push_back(pid);
  }
  ::close(gate[0]);
  ::close(gate[1]);
  std::vector<long> counts;
  for (int p = 0; p < procs; ++p) {
    long n = -1;
    const bool got = ::read(fds[p], &n, sizeof n) == sizeof n;
    ::close(fds[p]);
    int st = 0;
    ::waitpid(pids[p], &st, 0);
    if (!got || !WIFEXITED(st) || WEXITSTATUS(st) != 0) die("jain: a contender failed (see above)");
    counts.push_back(n);
  }
  return counts;
}

void jain_target(const std::string& url, int procs, long total) {
  void* mem = ::mmap(nullptr, sizeof(contention), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) die("mmap failed");
  auto* s = new (mem) contention;
  const long long t0 = mono_ns();
  const std::vector<long> counts = contend(url, *s, procs, total);
  const double seconds = static_cast<double>(mono_ns() - t0) / 1e9;
  double sum = 0, sq = 0;
  long lo = counts.front(), hi = counts.front();
  for (long c : counts) {
    sum += static_cast<double>(c);
    sq += static_cast<double>(c) * static_cast<double>(c);
    lo = std::min(lo, c);
    hi = std::max(hi, c);
  }
  if (s->overlaps.load() != 0) die("jain: two contenders held the lock at once");
  if (sum != static_cast<double>(total) || sq <= 0)
    die("jain: the contenders counted " + std::to_string(sum) + " grants, not " + std::to_string(total));
  ::munmap(mem, sizeof(contention));
  const double jain = sum * sum / (procs * sq);
  figure("jain_grants_min", static_cast<double>(lo), "grants");
  figure("jain_grants_max", static_cast<double>(hi), "grants");
  figure("jain_grants_per_s", sum / seconds, "grants/s");
  report({"jain_" + std::to_string(procs), "index", ">= 0.95", jain, 1.0, jain, jain >= 0.95});
}

struct options {
  int rounds = 31, cycles = 20, process_cycles = 5, handoffs = 101, jain_procs = 16;
  long jain_total = 1600;
  std::string command, url;
};

options parse(int argc, char** argv) {
  options o;
  const auto number = [&](int& i) { return i + 1 < argc ? std::atol(argv[++i]) : 0L; };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rounds") o.rounds = static_cast<int>(number(i));
    else if (a == "--cycles") o.cycles = static_cast<int>(number(i));
    else if (a == "--process-cycles") o.process_cycles = static_cast<int>(number(i));
    else if (a == "--handoffs") o.handoffs = static_cast<int>(number(i));
    else if (a == "--jain-procs") o.jain_procs = static_cast<int>(number(i));
    else if (a == "--jain-total") o.jain_total = number(i);
    else if (a == "--command" && i + 1 < argc) o.command = argv[++i];
    else if (a.rfind("etcd://", 0) == 0) o.url = a;
    else {
      o.url.clear();  // an unknown argument: the usage below
      break;
    }
  }
  if (o.url.empty() || o.rounds < 1 || o.cycles < 1 || o.process_cycles < 1 || o.handoffs < 1 ||
      o.jain_procs < 1 || o.jain_total < 1)
    die("usage: etcd_bench [--rounds N] [--cycles N] [--process-cycles N] [--handoffs N] "
        "[--jain-procs N] [--jain-total N] [--command PATH] etcd://host:port[,...]");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 5 && std::string(argv[1]) == "--child" && std::string(argv[2]) == "run")
      return child_run(argv[3], argv[4]);
    const options o = parse(argc, argv);
    pair_target(o.url, o.rounds, o.cycles);
    process_target(o.url, argv[0], o.command, o.rounds, o.process_cycles);
    handoff_target(o.url, o.handoffs);
    jain_target(o.url, o.jain_procs, o.jain_total);
  } catch (const std::exception& e) {
    die(e.what());
  }
  print_table();
  return 0;
}
