// A fake server on loopback for the network clients' tests (the etcd HTTP
// client's and the Redis client's): a thread with a listening socket that
// answers as each test scripts it. The thread and the test synchronise
// through the sockets themselves, never through sleeps.
#pragma once

#include <atomic>
#include <cerrno>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace fake {

inline void send_text(int fd, const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<std::size_t>(n);
  }
}

// One byte per write, with Nagle off: every byte its own segment, so the
// client sees the answer split at every place.
inline void send_bytewise(int fd, const std::string& s) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  for (char c : s) send_text(fd, std::string(1, c));
}

// A fake server: `serve(fd, n)` handles the n-th accepted connection
// (from 0) until it returns; the thread accepts until stop().
class fake_server {
 public:
  // On 127.0.0.1, or on ::1 with `v6`.
  explicit fake_server(std::function<void(int, int)> serve, bool v6 = false)
      : serve_(std::move(serve)), host_(v6 ? "[::1]" : "127.0.0.1") {
    listen_fd_ = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sockaddr_in6 a6{};
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_loopback;
    auto* addr = v6 ? reinterpret_cast<sockaddr*>(&a6) : reinterpret_cast<sockaddr*>(&a);
    socklen_t len = v6 ? sizeof a6 : sizeof a;
    if (::bind(listen_fd_, addr, len) != 0 || ::listen(listen_fd_, 8) != 0 ||
        ::getsockname(listen_fd_, addr, &len) != 0)
      throw std::runtime_error("fake server: cannot listen on " + host_);
    port_ = ntohs(v6 ? a6.sin6_port : a.sin_port);
    if (::pipe(stop_pipe_) != 0) throw std::runtime_error("fake server: pipe");
    thread_ = std::thread([this] { run(); });
  }
  ~fake_server() { stop(); }

  void stop() {
    if (!thread_.joinable()) return;
    ::close(stop_pipe_[1]);
    thread_.join();
    ::close(stop_pipe_[0]);
    ::close(listen_fd_);
  }
  std::string url() const { return "etcd://" + member(); }
  std::string member() const { return host_ + ":" + std::to_string(port_); }
  unsigned short port() const { return port_; }
  int connections() const { return connections_; }
  // Readable once the test has said stop: for a handler that paces itself.
  int stop_fd() const noexcept { return stop_pipe_[0]; }
  // Whether the test has said stop: for a handler that must hold its
  // connection open without answering.
  void wait_for_stop() const {
    pollfd p{stop_pipe_[0], POLLIN, 0};
    while (::poll(&p, 1, -1) < 0 && errno == EINTR) {
    }
  }

 private:
  void run() {
    for (;;) {
      pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (p[1].revents) return;
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      serve_(fd, connections_++);
      ::close(fd);
    }
  }

  std::function<void(int, int)> serve_;
  std::string host_;
  int listen_fd_ = -1, stop_pipe_[2] = {-1, -1};
  unsigned short port_ = 0;
  std::atomic<int> connections_{0};
  std::thread thread_;
};

// Reads one request (headers and a Content-Length body) from `fd`; empty
// when the client closed first.
inline std::string read_request(int fd) {
  std::string r;
  char buf[4096];
  for (;;) {
    const auto end = r.find("\r\n\r\n");
    if (end != std::string::npos) {
      const auto cl = r.find("Content-Length: ");
      const std::size_t len = cl < end ? std::stoul(r.substr(cl + 16)) : 0;
      if (r.size() >= end + 4 + len) return r;
    }
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return {};
    r.append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace fake
