// A process that uses the lock, driven by the multi-process tests.
//
//   lock_worker count LOCKDIR COUNTER CANARY CYCLES LOG
//     Waits for its start barrier (fd 3 reaching EOF) when fd 3 is open, then
//     CYCLES times: acquire; create CANARY with O_EXCL (finding it present
//     with a live creator means two holders at once: exit 3); increment the
//     20-digit counter in COUNTER; append the new value to LOG; remove CANARY;
//     release.
//   lock_worker hold LOCKDIR LEASE_MS SKEW_MS
//     Acquires (waiting up to 30 s), prints "H <token>", then waits for a
//     line on stdin and releases, printing "released" or the error code's
//     name ("lock_lost").
//   lock_worker wait LOCKDIR
//     Prints "W", acquires (waiting up to 30 s), prints "A <monotonic ns>"
//     at the moment it holds the lock, and releases.
//
// Exit status: 0 success, 2 usage or unexpected error, 3 canary violation.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "tokenlock/tokenlock.hpp"

using namespace std::chrono_literals;

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "lock_worker[%d]: %s\n", static_cast<int>(::getpid()), what.c_str());
  std::exit(2);
}

void wait_for_barrier() {
  char c;
  while (::read(3, &c, 1) < 0 && errno == EINTR) {
  }
}

// The canary's creator is gone (killed while holding) when /proc has no
// entry for it or shows a zombie.
bool creator_is_gone(int pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return true;
  char buf[512] = {};
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const char* close = std::strrchr(buf, ')');
  return n == 0 || !close || close[2] == 'Z' || close[2] == 'X';
}

// Returns false on a violation: somebody alive is inside.
bool enter_canary(const std::string& canary) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = ::open(canary.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd >= 0) {
      std::string pid = std::to_string(::getpid());
      if (::write(fd, pid.data(), pid.size()) != static_cast<ssize_t>(pid.size())) die("canary write");
      ::close(fd);
      return true;
    }
    if (errno != EEXIST) die("canary open: " + std::string(std::strerror(errno)));
    char buf[32] = {};
    int rfd = ::open(canary.c_str(), O_RDONLY | O_CLOEXEC);
    ssize_t n = rfd >= 0 ? ::read(rfd, buf, sizeof buf - 1) : -1;
    if (rfd >= 0) ::close(rfd);
    int other = n > 0 ? std::atoi(buf) : 0;
    if (other > 0 && !creator_is_gone(other)) {
      std::fprintf(stderr, "lock_worker[%d]: CANARY VIOLATION: pid %d is inside too\n",
                   static_cast<int>(::getpid()), other);
      return false;
    }
    ::unlink(canary.c_str());  // left by a holder that was killed
  }
  return false;
}

unsigned long long read_counter(int fd) {
  char buf[32] = {};
  ssize_t n = ::pread(fd, buf, 21, 0);
  if (n < 0) die("counter read");
  return n == 0 ? 0 : std::strtoull(buf, nullptr, 10);
}

void write_counter(int fd, unsigned long long v) {
  char buf[32];
  int len = std::snprintf(buf, sizeof buf, "%020llu\n", v);
  if (::pwrite(fd, buf, static_cast<size_t>(len), 0) != len) die("counter write");
}

int count(int argc, char** argv) {
  if (argc != 7) die("usage: count LOCKDIR COUNTER CANARY CYCLES LOG");
  tokenlock::lock_options o;
  o.wait = 120s;
  tokenlock::rename_lock lock(argv[2], o);
  const std::string canary = argv[4];
  const int cycles = std::atoi(argv[5]);
  int counter = ::open(argv[3], O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  int log = ::open(argv[6], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (counter < 0 || log < 0) die("cannot open counter or log");
  if (::fcntl(3, F_GETFD) != -1) wait_for_barrier();
  for (int i = 0; i < cycles; ++i) {
    tokenlock::lock_handle h = lock.acquire();
    if (!enter_canary(canary)) return 3;
    unsigned long long v = read_counter(counter) + 1;
    write_counter(counter, v);
    std::string line = std::to_string(v) + "\n";
    if (::write(log, line.data(), line.size()) != static_cast<ssize_t>(line.size())) die("log");
    ::unlink(canary.c_str());
    h.release();
  }
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

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "count") return count(argc, argv);
    if (mode == "hold") return hold(argc, argv);
    if (mode == "wait") return wait_mode(argc, argv);
    die("unknown mode; see the comment at the top of lock_worker.cpp");
  } catch (const std::exception& e) {
    die(e.what());
  }
}
