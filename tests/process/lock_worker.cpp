// A process that uses the lock, driven by the multi-process tests.
//
//   lock_worker count LOCKDIR COUNTER CANARY CYCLES LOG
//     Waits for its start barrier (fd 3 reaching EOF) when fd 3 is open, then
//     CYCLES times: acquire; create CANARY with O_EXCL (finding it present
//     with a live creator means two holders at once: exit 3); increment the
//     20-digit counter in COUNTER; append the new value to LOG; remove CANARY;
//     release. Prints "board" when it first opens or creates the wait
//     board (a waiter joining the line tries it, usable or not), and at the
//     end "waited N": how many acquisitions found the lock held
//     (a first try failed), then "stepped back N" when owner marks made it
//     step back N times (GlusterFS: a token moved by another client's stale
//     rename).
//   lock_worker hold LOCKDIR LEASE_MS SKEW_MS
//     Acquires (waiting up to 30 s), prints "H <token>", then waits for a
//     line on stdin and releases, printing "released" or the error code's
//     name ("lock_lost").
//   lock_worker wait LOCKDIR
//     Prints "W", acquires (waiting up to 30 s), prints "A <monotonic ns>"
//     at the moment it holds the lock, and releases.
//
//   lock_worker rewrite TARGET SIZE SYNC
//     Replaces TARGET with distinct complete versions of SIZE bytes
//     (versioned_content.hpp) with atomic_write, forever; prints "R" after
//     the first. SYNC: none, file or file_and_dir.
//   lock_worker stall-update LOCKDIR TARGET LEASE_MS VALUE
//     update_file(TARGET) to VALUE, but stops itself (SIGSTOP) after the
//     temporary file is written and before the commit, printing "T" first.
//     When continued, prints "committed" or "lock_lost".
//   lock_worker update LOCKDIR TARGET VALUE
//     update_file(TARGET) to VALUE, waiting up to 30 s; prints "committed".
//   lock_worker append LOCKDIR TARGET LEASE_MS ID COUNT LOG
//     Up to COUNT times, until the file TARGET.stop exists: update_file
//     appending the line "ID.i"; after each success appends the same line
//     to LOG. A lost lock is counted, not fatal. Prints "lost N" at the end.
//   lock_worker signal-cleanup LOCKDIR TARGET INSTALL IGNORE_HUP FORK [FSTYPE]
//     Ignores SIGHUP if IGNORE_HUP is 1, calls install_signal_cleanup() if
//     INSTALL is 1, acquires LOCKDIR and refreshes it once, starts an
//     atomic_file on TARGET (written, not committed), and prints
//     "ready <token>". If FORK is 1 it then forks a child that prints
//     "child <pid>" and waits on stdin like its parent. Then, for each line
//     on stdin, prints "alive". FSTYPE plays that filesystem type for the
//     lock directory (fuse.glusterfs: the token gets an owner mark).
//   lock_worker incr COUNTER COUNT LOG
//     COUNT times increment_counter(COUNTER) under COUNTER.lock, logging each
//     new value to LOG; prints "corrupt" and exits 4 on corrupt_data, and
//     "stale" and exits 5 on stale_data (a network client's stale cache,
//     detected: nothing written), "lost" and exits 6 on lock_lost (fenced:
//     nothing written).
//
//   lock_worker sigbus LOCKDIR SCRATCH OWN
//     With OWN 1, first installs a SIGBUS handler of its own that prints
//     "own handler" and exits 42. Waits 100 ms for LOCKDIR, which another
//     process holds, so that the wait board gets mapped (LOCKDIR "-": no
//     lock, no board, for comparison); prints "board";
//     then stores into a page past the end of an empty file in SCRATCH (a
//     SIGBUS that is not the board's), and prints "survived" if it does.
//
// Exit status: 0 success, 2 usage or unexpected error, 3 canary violation,
// 4 corrupt data, 5 stale data, 6 lock lost before a commit.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <optional>
#include <string>

#include <csignal>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "with_os.hpp"
#include "canary.hpp"
#include "fake_os.hpp"
#include "tokenlock/tokenlock.hpp"
#include "files/update_impl.hpp"
#include "versioned_content.hpp"

using namespace std::chrono_literals;
using tokenlock::testing::enter_canary;
using tokenlock::testing::op;
using tokenlock::testing::read_counter;
using tokenlock::testing::wait_for_barrier;
using tokenlock::testing::write_counter;

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "lock_worker[%d]: %s\n", static_cast<int>(::getpid()), what.c_str());
  std::exit(2);
}


// Prints "board" at the first call that opens or creates the wait board:
// the tests of unusable boards hold the lock until then, so that they know
// the board was tried rather than hoping some worker waited.
void report_first_board_call(tokenlock::testing::fake_os& sys) {
  static std::function<void(op, const std::string&, const std::string&)> watch;
  watch = [&sys](op o, const std::string&, const std::string&) {
    if (o == op::open_wait_board || o == op::create_wait_board)
      std::cout << "board" << std::endl;
    else
      sys.before = watch;  // `before` is cleared each time it runs
  };
  sys.before = watch;
}

int count(int argc, char** argv) {
  if (argc != 7) die("usage: count LOCKDIR COUNTER CANARY CYCLES LOG");
  tokenlock::lock_options o;
  o.wait = 120s;
  // The real system, with its calls recorded: they tell how often an
  // owner mark made this process step back (token_mark.hpp).
  auto sys = std::make_shared<tokenlock::testing::fake_os>(tokenlock::testing::fake_os::real_process_t{});
  tokenlock::rename_lock lock = tokenlock::detail::with_os::lock(argv[2], o, sys);
  const std::string canary = argv[4];
  const int cycles = std::atoi(argv[5]);
  int counter = ::open(argv[3], O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  int log = ::open(argv[6], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (counter < 0 || log < 0) die("cannot open counter or log");
  report_first_board_call(*sys);
  if (::fcntl(3, F_GETFD) != -1) wait_for_barrier();
  long waited = 0;  // acquisitions that found the lock held and had to wait
  for (int i = 0; i < cycles; ++i) {
    std::optional<tokenlock::lock_handle> tried = lock.try_acquire();
    if (!tried) ++waited;
    tokenlock::lock_handle h = tried ? std::move(*tried) : lock.acquire();
    if (!enter_canary(canary, "lock_worker")) return 3;
    unsigned long long v = read_counter(counter, "lock_worker") + 1;
    write_counter(counter, v, "lock_worker");
    std::string line = std::to_string(v) + "\n";
    if (::write(log, line.data(), line.size()) != static_cast<ssize_t>(line.size())) die("log");
    ::unlink(canary.c_str());
    h.release();
  }
  // Every mark made that did not become one of our cycles was a step back:
  // our token had gone, or held another live owner's mark.
  long marks = 0;
  for (const std::string& c : sys->calls)
    if (c.rfind("make_directory ", 0) == 0 && c.find("/h.") != std::string::npos) ++marks;
  std::cout << "waited " << waited << std::endl;
  if (marks > cycles) std::cout << "stepped back " << (marks - cycles) << std::endl;
  return 0;
}

int hold(int argc, char** argv) {
  if (argc != 5) die("usage: hold LOCKDIR LEASE_MS SKEW_MS");
  tokenlock::lock_options o;
  o.lease = std::chrono::milliseconds(std::atoi(argv[3]));
  o.skew_allowance = std::chrono::milliseconds(std::atoi(argv[4]));
  o.wait = 30s;
  tokenlock::rename_lock lock(argv[2], o);
  tokenlock::lock_handle h = lock.acquire();
  std::cout << "H " << h.token() << std::endl;
  std::string line;
  std::getline(std::cin, line);
  std::error_code ec;
  h.release(ec);
  if (!ec)
    std::cout << "released" << std::endl;
  else if (ec == tokenlock::errc::lock_lost)
    std::cout << "lock_lost" << std::endl;
  else
    std::cout << "error " << tokenlock::last_error_message() << std::endl;
  return 0;
}

int signal_cleanup(int argc, char** argv) {
  if (argc != 7 && argc != 8) die("usage: signal-cleanup LOCKDIR TARGET INSTALL IGNORE_HUP FORK [FSTYPE]");
  if (std::string(argv[5]) == "1") std::signal(SIGHUP, SIG_IGN);
  if (std::string(argv[4]) == "1") tokenlock::install_signal_cleanup();
  tokenlock::lock_options o;
  o.wait = 30s;
  // FSTYPE: the lock directory's filesystem is taken to be that network
  // filesystem (fuse.glusterfs: holders leave owner marks).
  auto sys = std::make_shared<tokenlock::testing::fake_os>(tokenlock::testing::fake_os::real_process_t{});
  if (argc == 8) sys->filesystem = tokenlock::detail::filesystem_info{false, argv[7]};
  tokenlock::rename_lock lock = tokenlock::detail::with_os::lock(argv[2], o, sys);
  tokenlock::lock_handle h = lock.acquire();
  h.refresh();
  tokenlock::atomic_file f(argv[3]);
  f.write("partial");
  std::cout << "ready " << h.token() << std::endl;
  if (std::string(argv[6]) == "1") {
    const pid_t pid = ::fork();
    if (pid < 0) die("fork");
    if (pid == 0) std::cout << "child " << ::getpid() << std::endl;
  }
  std::string line;
  while (std::getline(std::cin, line)) std::cout << "alive" << std::endl;
  return 0;
}

int wait_mode(int argc, char** argv) {
  if (argc != 3) die("usage: wait LOCKDIR");
  tokenlock::lock_options o;
  o.wait = 30s;
  tokenlock::rename_lock lock(argv[2], o);
  std::cout << "W" << std::endl;
  tokenlock::lock_handle h = lock.acquire();
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  std::cout << "A " << (static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec)
            << std::endl;
  h.release();
  return 0;
}

// Another SIGBUS than a board's, with the board's handler installed: it
// must reach the handler installed before, or end the process by default.
void own_sigbus_handler(int) {
  static const char said[] = "own handler\n";
  (void)!::write(1, said, sizeof said - 1);
  ::_exit(42);
}

int sigbus(int argc, char** argv) {
  if (argc != 5) die("usage: sigbus LOCKDIR SCRATCH OWN");
  if (std::string(argv[4]) == "1") {
    struct sigaction sa {};
    sa.sa_handler = own_sigbus_handler;
    sigemptyset(&sa.sa_mask);
    if (::sigaction(SIGBUS, &sa, nullptr) != 0) die("sigaction");
  }
  if (std::string(argv[2]) != "-") {
    tokenlock::lock_options o;
    o.wait = 100ms;
    tokenlock::rename_lock lock(argv[2], o);
    std::error_code ec;
    tokenlock::lock_handle h = lock.acquire(ec);
    if (ec != tokenlock::errc::timed_out) die("the wait did not time out behind the holder");
    struct stat st {};
    const std::string board = std::string(argv[2]) + ".wait";
    if (::stat(board.c_str(), &st) != 0) die("no board beside the lock after a wait");
  }
  std::cout << "board" << std::endl;
  // A page past the end of an empty file: SIGBUS on the store.
  const std::string empty = std::string(argv[3]) + "/empty";
  const int fd = ::open(empty.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) die("open " + empty);
  void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) die("mmap");
  static_cast<volatile char*>(p)[0] = 1;
  std::cout << "survived" << std::endl;
  return 0;
}

tokenlock::durability parse_sync(const std::string& s) {
  if (s == "none") return tokenlock::durability::none;
  if (s == "file") return tokenlock::durability::file;
  if (s == "file_and_dir") return tokenlock::durability::file_and_dir;
  die("SYNC must be none, file or file_and_dir");
}

void append_line(const std::string& path, const std::string& line) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  std::string s = line + "\n";
  if (fd < 0 || ::write(fd, s.data(), s.size()) != static_cast<ssize_t>(s.size())) die("log");
  ::close(fd);
}

int rewrite(int argc, char** argv) {
  if (argc != 5) die("usage: rewrite TARGET SIZE SYNC");
  const std::size_t size = std::strtoull(argv[3], nullptr, 10);
  tokenlock::write_options o;
  o.sync = parse_sync(argv[4]);
  const std::uint64_t base = static_cast<std::uint64_t>(::getpid()) << 24;
  for (std::uint64_t i = 0;; ++i) {
    tokenlock::atomic_write(argv[2], tokenlock::testing::versioned_content(base + i, size), o);
    if (i == 0) std::cout << "R" << std::endl;
  }
}

tokenlock::lock_options lease_options(const char* lease_ms) {
  tokenlock::lock_options o;
  o.lease = std::chrono::milliseconds(std::atoi(lease_ms));
  o.skew_allowance = std::chrono::milliseconds(0);
  o.wait = std::chrono::seconds(30);
  return o;
}

int stall_update(int argc, char** argv) {
  if (argc != 6) die("usage: stall-update LOCKDIR TARGET LEASE_MS VALUE");
  auto sys = std::make_shared<tokenlock::testing::fake_os>(tokenlock::testing::fake_os::real_process_t{});
  const std::string temp_marker = "/." + boost::filesystem::path(argv[3]).filename().string() + ".tmp.";
  sys->when(op::rename, temp_marker, [] {
    std::cout << "T" << std::endl;
    std::raise(SIGSTOP);
  });
  tokenlock::rename_lock lock = tokenlock::detail::with_os::lock(argv[2], lease_options(argv[4]), sys);
  const std::string value = std::string(argv[5]) + "\n";
  tokenlock::update_result r;
  tokenlock::detail::failure f = tokenlock::detail::update_impl(
      *sys, argv[3], lock,
      [&](const std::optional<std::string>&, std::string& out) -> tokenlock::detail::failure {
        out = value;
        return {};
      },
      {}, r);
  if (!f)
    std::cout << "committed" << std::endl;
  else if (f.code == tokenlock::errc::lock_lost)
    std::cout << "lock_lost" << std::endl;
  else
    std::cout << "error " << f.message << std::endl;
  return 0;
}

int update(int argc, char** argv) {
  if (argc != 5) die("usage: update LOCKDIR TARGET VALUE");
  tokenlock::lock_options o;
  o.wait = std::chrono::seconds(30);
  o.skew_allowance = std::chrono::milliseconds(0);
  tokenlock::rename_lock lock(argv[2], o);
  const std::string value = std::string(argv[4]) + "\n";
  tokenlock::update_file(argv[3], lock, [&](const std::optional<std::string>&) { return value; });
  std::cout << "committed" << std::endl;
  return 0;
}

int append(int argc, char** argv) {
  if (argc != 8) die("usage: append LOCKDIR TARGET LEASE_MS ID COUNT LOG");
  tokenlock::rename_lock lock(argv[2], lease_options(argv[4]));
  tokenlock::update_options uo;
  // The fsync of the temporary file widens the window between reading and
  // committing, where a stop makes a stale commit possible.
  uo.write.sync = tokenlock::durability::file;
  const int count = std::atoi(argv[6]);
  const std::string stop_file = std::string(argv[3]) + ".stop";
  int lost = 0;
  for (int i = 0; i < count && ::access(stop_file.c_str(), F_OK) != 0; ++i) {
    const std::string line = std::string(argv[5]) + "." + std::to_string(i);
    std::error_code ec;
    tokenlock::update_file(
        argv[3], lock,
        [&](const std::optional<std::string>& cur) { return cur.value_or("") + line + "\n"; }, uo,
        ec);
    if (!ec)
      append_line(argv[7], line);
    else if (ec == tokenlock::errc::lock_lost)
      ++lost;
    else
      die(tokenlock::last_error_message());
  }
  std::cout << "lost " << lost << std::endl;
  return 0;
}

int incr(int argc, char** argv) {
  if (argc != 5) die("usage: incr COUNTER COUNT LOG");
  tokenlock::lock_options o;
  o.wait = std::chrono::seconds(60);
  tokenlock::rename_lock lock(std::string(argv[2]) + ".lock", o);
  const int count = std::atoi(argv[3]);
  for (int i = 0; i < count; ++i) {
    std::error_code ec;
    std::uint64_t v = tokenlock::increment_counter(argv[2], lock, 1, {}, ec);
    if (ec == tokenlock::errc::corrupt_data) {
      std::cout << "corrupt" << std::endl;
      return 4;
    }
    if (ec == tokenlock::errc::stale_data) {
      std::cerr << "lock_worker: " << tokenlock::last_error_message() << std::endl;
      std::cout << "stale" << std::endl;
      return 5;
    }
    if (ec == tokenlock::errc::lock_lost) {
      std::cerr << "lock_worker: " << tokenlock::last_error_message() << std::endl;
      std::cout << "lost" << std::endl;
      return 6;
    }
    if (ec) die(tokenlock::last_error_message());
    append_line(argv[4], std::to_string(v));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "count") return count(argc, argv);
    if (mode == "hold") return hold(argc, argv);
    if (mode == "wait") return wait_mode(argc, argv);
    if (mode == "rewrite") return rewrite(argc, argv);
    if (mode == "stall-update") return stall_update(argc, argv);
    if (mode == "update") return update(argc, argv);
    if (mode == "append") return append(argc, argv);
    if (mode == "incr") return incr(argc, argv);
    if (mode == "signal-cleanup") return signal_cleanup(argc, argv);
    if (mode == "sigbus") return sigbus(argc, argv);
    die("unknown mode; see the comment at the top of lock_worker.cpp");
  } catch (const std::exception& e) {
    die(e.what());
  }
}
