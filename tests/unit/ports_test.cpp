// The test servers' port picker (support/ports.hpp): processes that pick at
// the same time never get one port, and no port is in the kernel's range
// for outgoing connections.
#include "ports.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace {

using tokenlock::testing::reserve_port;

std::vector<int> read_ports(int fd) {
  std::vector<int> ports;
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    ports.push_back(std::stoi(text.substr(start, end - start)));
    start = end + 1;
  }
  return ports;
}

TEST(PortsTest, ProcessesPickingAtOnceNeverGetTheSamePort) {
  constexpr int kProcs = 4, kEach = 40;
  std::vector<int> pipes;
  std::vector<pid_t> kids;
  for (int i = 0; i < kProcs; ++i) {
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(p[0]);
      std::string out;
      for (int k = 0; k < kEach; ++k) out += std::to_string(reserve_port()) + "\n";
      const bool ok = ::write(p[1], out.data(), out.size()) == static_cast<ssize_t>(out.size());
      ::_exit(ok ? 0 : 1);
    }
    ::close(p[1]);
    pipes.push_back(p[0]);
    kids.push_back(pid);
  }
  std::set<int> seen;
  int low = 32768, high = 0;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low >> high;
  for (int i = 0; i < kProcs; ++i) {
    const std::vector<int> ports = read_ports(pipes[i]);
    ::close(pipes[i]);
    int status = 0;
    ASSERT_EQ(::waitpid(kids[i], &status, 0), kids[i]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_EQ(ports.size(), static_cast<std::size_t>(kEach));
    for (int port : ports) {
      EXPECT_TRUE(seen.insert(port).second) << "port " << port << " was given twice";
      EXPECT_GE(port, 20000);
      EXPECT_LT(port, low) << "in the range for outgoing connections";
    }
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kProcs * kEach));
}

}  // namespace
