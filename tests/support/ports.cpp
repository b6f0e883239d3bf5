#include "ports.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

namespace tokenlock::testing {
namespace {

constexpr int first_port = 20000;

int range_end() {
  int low = 32768, high = 0;
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  if (!(in >> low >> high) || low < first_port + 2000) low = 32768;
  return low - 1000;
}

// Whether a server could bind the port now (nothing bound or listening).
bool bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

class counter_file {
 public:
  counter_file() {
    const std::string path = "/tmp/tokenlock-test-ports." + std::to_string(::getuid());
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd_ < 0 || ::flock(fd_, LOCK_EX) != 0)
      throw std::runtime_error("cannot open and lock " + path + " (the tests' port counter)");
  }
  ~counter_file() { ::close(fd_); }  // closing unlocks
  int read_next() const {
    char buf[16] = {};
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    return n > 0 ? std::atoi(buf) : 0;
  }
  void write_next(int port) const {
    const std::string s = std::to_string(port) + "\n";
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, s.data(), s.size(), 0) != static_cast<ssize_t>(s.size()))
      throw std::runtime_error("cannot write the tests' port counter");
  }

 private:
  int fd_ = -1;
};

}  // namespace

int reserve_port() {
  const int end = range_end();
  const counter_file counter;
  int port = counter.read_next();
  if (port < first_port || port >= end) port = first_port + ::getpid() % (end - first_port);
  for (int tried = 0; tried < end - first_port; ++tried) {
    const int candidate = port;
    port = port + 1 < end ? port + 1 : first_port;
    if (bindable(candidate)) {
      counter.write_next(port);
      return candidate;
    }
  }
  throw std::runtime_error("no free TCP port on 127.0.0.1 in [" + std::to_string(first_port) + ", " +
                           std::to_string(end) + ")");
}

}  // namespace tokenlock::testing
