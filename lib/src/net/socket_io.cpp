#include "net/socket_io.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>

#include <poll.h>

#include <sys/socket.h>

namespace tokenlock::detail::posix {

int send_all(int fd, const char* data, std::size_t size) noexcept {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return 0;
}

int recv_by(int fd, char* buf, std::size_t cap, std::size_t& n,
            std::chrono::steady_clock::time_point deadline) noexcept {
  n = 0;
  for (;;) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) return ETIMEDOUT;
    const ssize_t rc = ::recv(fd, buf, cap, MSG_DONTWAIT);
    if (rc >= 0) {
      n = static_cast<std::size_t>(rc);
      return 0;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errno;
    // Rounded up: a poll that returns a little early would spin.
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<long long>(ms, INT_MAX))) < 0 && errno != EINTR)
      return errno;
  }
}

}  // namespace tokenlock::detail::posix
