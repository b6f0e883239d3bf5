// A process that uses a lock of any backend, for the tests that need real
// processes: the process, Redis and etcd tests, the language torture, the
// netfs rig, the legacy interop test and bench/lang/turnstile/mixed.sh.
//
//   lock_worker --lock SPEC [--shared | --slots N] MODE ARGS...
//   lock_worker rewrite TARGET SIZE SYNC          (no lock)
//
// --shared takes the lock as a shared holder (a reader), --slots N as one
// of N holders of a semaphore (open_options::mode and slots), in every mode
// that takes the lock; without them, exclusively.
//
// SPEC is what tokenlock::open_lock takes (open_lock.hpp): a lock
// directory's path, redis://HOST:PORT#NAME, unix:///SOCKET#NAME,
// etcd://HOST:PORT[,...]#NAME. Every mode goes through tokenlock::lock and
// tokenlock::handle, on every backend, except where it says "a lock
// directory": those are about a lock directory's own extras (its wait
// board, owner marks, filesystem type, commit seam), watched or played
// through the test seam of its system calls (tests/support/fake_os.hpp).
//
//   count COUNTER CANARY CYCLES [LOG]
//     Waits for its start barrier (fd 3, a pipe, reaching EOF) when fd 3
//     is one, then CYCLES times: one try, and when the lock is held an
//     acquire (waiting up to 120 s); create CANARY with O_EXCL (finding it
//     present with a live creator means two holders at once: exit 3);
//     increment the 20-digit counter in COUNTER; append the new value to
//     LOG; remove CANARY; release. At the end prints "fences ascending"
//     when every grant had a fence larger than the one before (Redis,
//     etcd), then "waited N": how many acquisitions found the lock held.
//     On a lock directory also prints "board" when it first opens or
//     creates the wait board (a waiter joining the line tries it, usable or
//     not), and at the end "stepped back N" when owner marks made it step
//     back N times (GlusterFS: a token moved by another client's stale
//     rename).
//   hold LEASE_MS [SKEW_MS]
//     Acquires (waiting up to 60 s; SKEW_MS: a lock directory's skew
//     allowance), prints "H ID FENCE WATCHES WAKES": the grant's id
//     (handle::id(): a lock directory's token name, a server grant's owner
//     id), its fence ("-" without one), how many watches its wait opened
//     (etcd) and how many wake-ups reached it (a release seen by etcd's
//     watch or Redis's wake list). Then, for each line "refresh" on stdin,
//     refreshes and prints "refreshed", "lock_lost MESSAGE" or "error
//     MESSAGE"; at any other line (or EOF) releases, printing "released",
//     "lock_lost MESSAGE" or "error MESSAGE".
//   wait [stamp]
//     Prints "W" ("W <monotonic ns>" with stamp), acquires (waiting up to
//     30 s), prints "A <monotonic ns>" at the moment it holds the lock, and
//     releases.
//   visit LOG CYCLES HOLD_US LEASE_MS [COUNTER]
//     Waits for its start barrier like count, then CYCLES times (until the
//     file LOG.stop exists): holds the lock (waiting up to 120 s, skew
//     allowance 0) for HOLD_US µs, appending "E KIND PID I" to LOG once it
//     holds and "L KIND PID I" before it releases (O_APPEND: one order for
//     every process); KIND is W (exclusive), R (shared) or S (a slot). A
//     release that finds the lock lost appends "X PID I". With COUNTER, a
//     writer holds through update_file(COUNTER) and adds 1, appending
//     "C VALUE" once committed; a reader reads the counter when it enters
//     and before it leaves, and exits 3 when it went backwards or (its
//     share not lost) changed while it held. Prints "visited N lost M".
//     With LOCK_WORKER_STOP_EVERY=N in the environment, turn 50 and every
//     N-th turn after it append "S PID" and stop the worker with SIGSTOP
//     while it holds, before its commit or release, for its parent to
//     continue.
//   signal-cleanup TARGET INSTALL IGNORE_HUP FORK [FSTYPE]
//     Ignores SIGHUP if IGNORE_HUP is 1, calls install_signal_cleanup() if
//     INSTALL is 1, acquires and refreshes once, starts an atomic_file on
//     TARGET (written, not committed), and prints "ready ID". If FORK is 1
//     it then forks a child that prints "child <pid>" and waits on stdin
//     like its parent. Then, for each line on stdin, prints "alive".
//     FSTYPE (a lock directory): plays that filesystem type for it
//     (fuse.glusterfs: the token gets an owner mark).
//   sigbus SCRATCH OWN            (--lock optional: a lock directory)
//     With OWN 1, first installs a SIGBUS handler of its own that prints
//     "own handler" and exits 42. With --lock, waits 100 ms for the lock,
//     which another process holds, so that its wait board gets mapped
//     (checked beside it); without, no lock and no board, for comparison.
//     Prints "board", then stores into a page past the end of an empty
//     file in SCRATCH (a SIGBUS that is not the board's), and prints
//     "survived" if it does.
//
//   update TARGET VALUE
//     update_file(TARGET) to VALUE, waiting up to 30 s; prints "committed".
//   append TARGET LEASE_MS ID COUNT LOG
//     Up to COUNT times, until the file TARGET.stop exists: update_file
//     appending the line "ID.i"; after each success appends the same line
//     to LOG. A lost lock is counted, not fatal. Prints "lost N" at the end.
//   incr FILE COUNT [LOG]
//     Waits for its start barrier like count, then COUNT times
//     increment_counter(FILE), waiting up to 120 s: each new value goes to
//     LOG as it is committed, or without LOG to stdout; then "done". Prints
//     "corrupt" and exits 4 on corrupt_data, "stale" and exits 5 on
//     stale_data (a network client's stale cache, detected: nothing
//     written), "lost" and exits 6 on lock_lost (fenced: nothing written).
//   stall-update TARGET LEASE_MS VALUE       (a lock directory)
//     update_file(TARGET) to VALUE, but stops itself (SIGSTOP) after the
//     temporary file is written and before the commit, printing "T" first.
//     When continued, prints "committed", "lock_lost MESSAGE" or "error
//     MESSAGE".
//   rewrite TARGET SIZE SYNC
//     Replaces TARGET with distinct complete versions of SIZE bytes
//     (versioned_content.hpp) with atomic_write, forever; prints "R" after
//     the first. SYNC: none, file or file_and_dir.
//
// Exit status: 0 success, 2 usage or unexpected error, 3 canary violation
// (or a counter changed under a reader), 4 corrupt data, 5 stale data, 6
// lock lost before a commit.
#include "lock_worker.hpp"

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <optional>
#include <string>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "canary.hpp"
#include "tokenlock/tokenlock.hpp"
#include "with_os.hpp"
#if TOKENLOCK_HAVE_REDIS
#include "redis/redis_wait_stats.hpp"
#endif
#if TOKENLOCK_HAVE_ETCD
#include "etcd/etcd_wait_stats.hpp"
#endif

using namespace std::chrono_literals;

namespace tokenlock::testing::worker {

void die(const std::string& what) {
  std::fprintf(stderr, "lock_worker[%d]: %s\n", static_cast<int>(::getpid()), what.c_str());
  std::exit(2);
}

std::chrono::milliseconds millis(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < 0) die("not milliseconds: " + text);
  return std::chrono::milliseconds(v);
}

held_as& chosen_mode() {
  static held_as chosen;
  return chosen;
}

// --backoff-ms N: a lock directory's backoff_min and backoff_max (0: the
// defaults).
std::chrono::milliseconds& chosen_backoff() {
  static std::chrono::milliseconds chosen{0};
  return chosen;
}

tokenlock::open_options lock_settings(std::chrono::milliseconds wait,
                                      std::chrono::milliseconds lease) {
  tokenlock::open_options o;
  o.wait = wait;
  o.lease = lease;
  o.mode = chosen_mode().mode;
  o.slots = chosen_mode().slots;
  if (chosen_backoff().count() > 0) o.directory.backoff_min = o.directory.backoff_max = chosen_backoff();
  return o;
}

tokenlock::open_options lock_settings(std::chrono::milliseconds wait,
                                      std::chrono::milliseconds lease,
                                      std::chrono::milliseconds skew) {
  tokenlock::open_options o = lock_settings(wait, lease);
  o.directory.skew_allowance = skew;
  return o;
}

std::shared_ptr<fake_os> recording_os() {
  return std::make_shared<fake_os>(fake_os::real_process_t{});
}

std::unique_ptr<tokenlock::lock> open_through(const std::string& spec,
                                              const tokenlock::open_options& options,
                                              std::shared_ptr<fake_os> sys) {
  std::unique_ptr<tokenlock::lock> lock = tokenlock::open_lock(spec, options);
  const auto* dir = dynamic_cast<const tokenlock::rename_lock*>(lock.get());
  if (!dir) return lock;
  // As open_lock sets a lock directory up (open/open_lock.cpp).
  tokenlock::lock_options d = options.directory;
  d.lease = options.lease;
  d.wait = options.wait;
  return std::make_unique<tokenlock::rename_lock>(
      tokenlock::detail::with_os::lock(dir->directory(), d, std::move(sys)));
}

void wait_for_start() {
  struct stat st {};
  if (::fstat(3, &st) == 0 && S_ISFIFO(st.st_mode)) wait_for_barrier();
}

void append_line(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const std::string s = line + "\n";
  const bool ok = fd >= 0 && ::write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size());
  const int err = errno;  // before close() can change it
  if (fd >= 0) ::close(fd);
  if (!ok) die("cannot append to " + path + ": " + std::strerror(err));
}

void report(const char* success, const std::error_code& ec) {
  if (!ec)
    std::cout << success << std::endl;
  else if (ec == tokenlock::errc::lock_lost)
    std::cout << "lock_lost " << tokenlock::last_error_message() << std::endl;
  else
    std::cout << "error " << tokenlock::last_error_message() << std::endl;
}

namespace {

// Prints "board" at the first call that opens or creates the wait board:
// the tests of unusable boards hold the lock until then, so that they know
// the board was tried rather than hoping some worker waited.
void report_first_board_call(fake_os& sys) {
  static std::function<void(op, const std::string&, const std::string&)> watch;
  watch = [&sys](op o, const std::string&, const std::string&) {
    if (o == op::open_wait_board || o == op::create_wait_board)
      std::cout << "board" << std::endl;
    else
      sys.before = watch;  // `before` is cleared each time it runs
  };
  sys.before = watch;
}

// Every owner mark made that did not become one of our `cycles` was a
// step back: our token had gone, or held another live owner's mark.
long step_backs(const fake_os& sys, int cycles) {
  long marks = 0;
  for (const std::string& c : sys.calls)
    if (c.rfind("make_directory ", 0) == 0 && c.find("/h.") != std::string::npos) ++marks;
  return marks > cycles ? marks - cycles : 0;
}

struct count_files {
  std::string canary;
  int counter = -1;
  std::string log;  // empty: none
};

struct count_result {
  long waited = 0;  // acquisitions that found the lock held and had to wait
  bool fences_ascending = true;
};

// One cycle: the lock (left in `h`), the canary, the counter, the log.
// False when another holder was inside the canary.
bool count_once(tokenlock::lock& lock, const count_files& f, count_result& r,
                tokenlock::handle& h) {
  std::optional<tokenlock::handle> tried = lock.try_acquire();
  if (!tried) ++r.waited;
  h = tried ? std::move(*tried) : lock.acquire();
  if (!enter_canary(f.canary, "lock_worker")) return false;
  const unsigned long long v = read_counter(f.counter, "lock_worker") + 1;
  write_counter(f.counter, v, "lock_worker");
  if (!f.log.empty()) append_line(f.log, std::to_string(v));
  ::unlink(f.canary.c_str());
  return true;
}

int count(const mode_args& m) {
  std::shared_ptr<fake_os> sys = recording_os();
  std::unique_ptr<tokenlock::lock> lock = open_through(m.spec, lock_settings(120s), sys);
  count_files f{m.a[1], ::open(m.a[0].c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644),
                m.a.size() > 3 ? m.a[3] : ""};
  if (f.counter < 0) die("cannot open the counter " + m.a[0] + ": " + std::strerror(errno));
  const int cycles = std::atoi(m.a[2].c_str());
  report_first_board_call(*sys);
  wait_for_start();
  count_result r;
  std::uint64_t last = 0;
  for (int i = 0; i < cycles; ++i) {
    tokenlock::handle h;
    if (!count_once(*lock, f, r, h)) return 3;
    const std::optional<std::uint64_t> fence = h.fence();
    r.fences_ascending = r.fences_ascending && fence && *fence > last;
    last = fence.value_or(0);
    h.release();
  }
  if (r.fences_ascending && cycles > 0) std::cout << "fences ascending" << std::endl;
  std::cout << "waited " << r.waited << std::endl;
  if (const long back = step_backs(*sys, cycles)) std::cout << "stepped back " << back << std::endl;
  return 0;
}

// What the waiting of this thread did so far, as the backends count it.
struct wait_counts {
  std::uint64_t watches = 0;
  std::uint64_t wakes = 0;
};

wait_counts wait_counts_now() {
  wait_counts c;
#if TOKENLOCK_HAVE_ETCD
  c.watches += tokenlock::detail::this_thread_etcd_wait_stats().watches;
  c.wakes += tokenlock::detail::this_thread_etcd_wait_stats().wakes;
#endif
#if TOKENLOCK_HAVE_REDIS
  c.wakes += tokenlock::detail::this_thread_redis_wait_stats().wakes;
#endif
  return c;
}

std::string fence_text(const tokenlock::handle& h) {
  return h.fence() ? std::to_string(*h.fence()) : "-";
}

int hold(const mode_args& m) {
  const std::chrono::milliseconds lease = millis(m.a[0]);
  const tokenlock::open_options o =
      m.a.size() > 1 ? lock_settings(60s, lease, millis(m.a[1])) : lock_settings(60s, lease);
  std::unique_ptr<tokenlock::lock> lock = tokenlock::open_lock(m.spec, o);
  const wait_counts before = wait_counts_now();
  tokenlock::handle h = lock->acquire();
  const wait_counts after = wait_counts_now();
  std::cout << "H " << h.id() << " " << fence_text(h) << " " << after.watches - before.watches
            << " " << after.wakes - before.wakes << std::endl;
  std::string line;
  std::error_code ec;
  while (std::getline(std::cin, line) && line == "refresh") {
    h.refresh(ec);
    report("refreshed", ec);
  }
  h.release(ec);
  report("released", ec);
  return 0;
}

long long monotonic_now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

int wait_mode(const mode_args& m) {
  std::unique_ptr<tokenlock::lock> lock = tokenlock::open_lock(m.spec, lock_settings(30s));
  if (!m.a.empty() && m.a[0] != "stamp") die("wait takes only the word stamp, not " + m.a[0]);
  std::cout << "W" << (m.a.empty() ? "" : " " + std::to_string(monotonic_now_ns())) << std::endl;
  tokenlock::handle h = lock->acquire();
  std::cout << "A " << monotonic_now_ns() << std::endl;
  h.release();
  return 0;
}

int signal_cleanup(const mode_args& m) {
  if (m.a[2] == "1") std::signal(SIGHUP, SIG_IGN);
  if (m.a[1] == "1") tokenlock::install_signal_cleanup();
  std::shared_ptr<fake_os> sys = recording_os();
  if (m.a.size() > 4) sys->filesystem = tokenlock::detail::filesystem_info{false, m.a[4]};
  std::unique_ptr<tokenlock::lock> lock = open_through(m.spec, lock_settings(30s), sys);
  tokenlock::handle h = lock->acquire();
  h.refresh();
  tokenlock::atomic_file f(m.a[0]);
  f.write("partial");
  std::cout << "ready " << h.id() << std::endl;
  if (m.a[3] == "1") {
    const pid_t pid = ::fork();
    if (pid < 0) die(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) std::cout << "child " << ::getpid() << std::endl;
  }
  std::string line;
  while (std::getline(std::cin, line)) std::cout << "alive" << std::endl;
  return 0;
}

// Another SIGBUS than a board's, with the board's handler installed: it
// must reach the handler installed before, or end the process by default.
void own_sigbus_handler(int) {
  static const char said[] = "own handler\n";
  (void)!::write(1, said, sizeof said - 1);
  ::_exit(42);
}

// Waits 100 ms behind the holder of the lock directory `spec`, which maps
// its wait board, and checks the board is there.
void wait_behind_holder(const std::string& spec) {
  std::unique_ptr<tokenlock::lock> lock = tokenlock::open_lock(spec, lock_settings(100ms));
  const auto* dir = dynamic_cast<const tokenlock::rename_lock*>(lock.get());
  if (!dir) die("sigbus: " + lock->spec() + " is no lock directory, which has the wait board");
  std::error_code ec;
  tokenlock::handle h = lock->acquire(ec);
  if (ec != tokenlock::errc::timed_out) die("the wait did not time out behind the holder");
  struct stat st {};
  const std::string board = dir->directory().string() + ".wait";
  if (::stat(board.c_str(), &st) != 0) die("no board beside the lock after a wait: " + board);
}

int sigbus(const mode_args& m) {
  if (m.a[1] == "1") {
    struct sigaction sa {};
    sa.sa_handler = own_sigbus_handler;
    sigemptyset(&sa.sa_mask);
    if (::sigaction(SIGBUS, &sa, nullptr) != 0) die("sigaction");
  }
  if (!m.spec.empty()) wait_behind_holder(m.spec);
  std::cout << "board" << std::endl;
  // A page past the end of an empty file: SIGBUS on the store.
  const std::string empty = m.a[0] + "/empty";
  const int fd = ::open(empty.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) die("open " + empty + ": " + std::strerror(errno));
  void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) die(std::string("mmap: ") + std::strerror(errno));
  static_cast<volatile char*>(p)[0] = 1;
  std::cout << "survived" << std::endl;
  return 0;
}

enum class needs { lock, no_lock, maybe };

struct mode {
  const char* name;
  const char* usage;  // its arguments
  const char* note;   // what it needs beyond tokenlock::lock, or ""
  std::size_t min_args, max_args;
  needs lock;
  int (*run)(const mode_args&);
};

const char* const directory_only = "SPEC: a lock directory";
const mode modes[] = {
    {"count", "COUNTER CANARY CYCLES [LOG]", "", 3, 4, needs::lock, count},
    {"hold", "LEASE_MS [SKEW_MS]", "", 1, 2, needs::lock, hold},
    {"wait", "[stamp]", "", 0, 1, needs::lock, wait_mode},
    {"visit", "LOG CYCLES HOLD_US LEASE_MS [COUNTER]", "", 4, 5, needs::lock, visit},
    {"signal-cleanup", "TARGET INSTALL IGNORE_HUP FORK [FSTYPE]",
     "FSTYPE: a lock directory's filesystem type", 4, 5, needs::lock, signal_cleanup},
    {"sigbus", "SCRATCH OWN", directory_only, 2, 2, needs::maybe, sigbus},
    {"update", "TARGET VALUE", "", 2, 2, needs::lock, update},
    {"append", "TARGET LEASE_MS ID COUNT LOG", "", 5, 5, needs::lock, append},
    {"incr", "FILE COUNT [LOG]", "", 2, 3, needs::lock, incr},
    {"stall-update", "TARGET LEASE_MS VALUE", directory_only, 3, 3, needs::lock, stall_update},
    {"rewrite", "TARGET SIZE SYNC", "", 3, 3, needs::no_lock, rewrite},
};

const char* lock_usage(needs n) {
  return n == needs::lock    ? "--lock SPEC [--shared | --slots N] [--backoff-ms N] "
         : n == needs::maybe ? "[--lock SPEC] "
                             : "";
}

// --shared, --slots N and --backoff-ms N, after --lock.
int parse_held_as(int argc, char** argv, int i) {
  if (i < argc && std::string(argv[i]) == "--shared") {
    chosen_mode().mode = tokenlock::lock_mode::shared;
    return parse_held_as(argc, argv, i + 1);
  }
  if (i + 1 < argc && std::string(argv[i]) == "--slots") {
    char* end = nullptr;
    const unsigned long n = std::strtoul(argv[i + 1], &end, 10);
    if (*end != '\0' || n == 0 || n > tokenlock::max_slots) die(std::string("not a slot count: ") + argv[i + 1]);
    chosen_mode().mode = tokenlock::lock_mode::shared;
    chosen_mode().slots = static_cast<std::uint32_t>(n);
    return parse_held_as(argc, argv, i + 2);
  }
  if (i + 1 < argc && std::string(argv[i]) == "--backoff-ms") {
    chosen_backoff() = millis(argv[i + 1]);
    return parse_held_as(argc, argv, i + 2);
  }
  return i;
}

[[noreturn]] void usage(const std::string& why) {
  std::string text = why + "\nusage (tests/support/lock_worker.cpp has the manual):";
  for (const mode& md : modes)
    text += std::string("\n  lock_worker ") + lock_usage(md.lock) + md.name +
            (*md.usage ? " " : "") + md.usage + (*md.note ? "  (" : "") + md.note +
            (*md.note ? ")" : "");
  die(text);
}

int run(int argc, char** argv) {
  mode_args m;
  int i = 1;
  if (i + 1 < argc && std::string(argv[i]) == "--lock") {
    m.spec = argv[i + 1];
    i += 2;
  }
  i = parse_held_as(argc, argv, i);
  if (i >= argc) usage("no mode");
  const std::string name = argv[i++];
  m.a.assign(argv + i, argv + argc);
  for (const mode& md : modes) {
    if (name != md.name) continue;
    if (m.a.size() < md.min_args || m.a.size() > md.max_args)
      usage(name + ": " + std::to_string(m.a.size()) + " arguments");
    if (md.lock == needs::lock && m.spec.empty()) usage(name + " needs --lock SPEC");
    if (md.lock == needs::no_lock && !m.spec.empty()) usage(name + " takes no lock");
    return md.run(m);
  }
  usage("unknown mode " + name);
}

}  // namespace
}  // namespace tokenlock::testing::worker

int main(int argc, char** argv) {
  try {
    return tokenlock::testing::worker::run(argc, argv);
  } catch (const std::exception& e) {
    tokenlock::testing::worker::die(e.what());
  }
}
