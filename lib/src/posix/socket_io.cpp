#include "posix/socket_io.hpp"

#include <cerrno>

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

}  // namespace tokenlock::detail::posix
