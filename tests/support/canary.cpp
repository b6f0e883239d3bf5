#include "canary.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

namespace tokenlock::testing {

namespace {

[[noreturn]] void die(const char* who, const std::string& what) {
  std::fprintf(stderr, "%s[%d]: %s\n", who, static_cast<int>(::getpid()), what.c_str());
  std::exit(2);
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

}  // namespace

void wait_for_barrier() {
  char c;
  while (::read(3, &c, 1) < 0 && errno == EINTR) {
  }
}

bool enter_canary(const std::string& canary, const char* who) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = ::open(canary.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd >= 0) {
      std::string pid = std::to_string(::getpid());
      if (::write(fd, pid.data(), pid.size()) != static_cast<ssize_t>(pid.size()))
        die(who, "canary write");
      ::close(fd);
      return true;
    }
    if (errno != EEXIST) die(who, "canary open: " + std::string(std::strerror(errno)));
    char buf[32] = {};
    int rfd = ::open(canary.c_str(), O_RDONLY | O_CLOEXEC);
    ssize_t n = rfd >= 0 ? ::read(rfd, buf, sizeof buf - 1) : -1;
    if (rfd >= 0) ::close(rfd);
    int other = n > 0 ? std::atoi(buf) : 0;
    if (other > 0 && !creator_is_gone(other)) {
      std::fprintf(stderr, "%s[%d]: CANARY VIOLATION: pid %d is inside too\n", who,
                   static_cast<int>(::getpid()), other);
      return false;
    }
    ::unlink(canary.c_str());  // left by a holder that was killed
  }
  return false;
}

unsigned long long read_counter(int fd, const char* who) {
  char buf[32] = {};
  ssize_t n = ::pread(fd, buf, 21, 0);
  if (n < 0) die(who, "counter read");
  return n == 0 ? 0 : std::strtoull(buf, nullptr, 10);
}

void write_counter(int fd, unsigned long long v, const char* who) {
  char buf[32];
  int len = std::snprintf(buf, sizeof buf, "%020llu\n", v);
  if (::pwrite(fd, buf, static_cast<size_t>(len), 0) != len) die(who, "counter write");
}

}  // namespace tokenlock::testing
