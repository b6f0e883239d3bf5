// Socket writes and reads for the Redis client. The network code
// (lib/src/net/) is, with the OS seam (lib/src/posix/), the only code that
// calls the OS.
#pragma once

#include <chrono>
#include <cstddef>

namespace tokenlock::detail::posix {

// Writes all `size` bytes of `data` to the connected socket `fd`, resuming
// after partial writes and EINTR. 0 on success, else the errno of the write
// that failed (EAGAIN when the socket's send timeout ran out).
//
// A peer that closed the connection makes the write fail with EPIPE
// instead of raising SIGPIPE (MSG_NOSIGNAL): a library must not end the
// program it runs in, and this costs no system call more than the write,
// where blocking the signal around each command cost four.
int send_all(int fd, const char* data, std::size_t size) noexcept;

// Reads what has arrived on the connected socket `fd` (a blocking one too:
// it never blocks), waiting until something has or `deadline` passes. The
// deadline is checked before every read, so that a server that keeps
// sending cannot hold the caller past it. 0 with `n` bytes read (`n` = 0:
// the end of the stream), ETIMEDOUT when the deadline passed, else the
// errno of the read or the wait.
int recv_by(int fd, char* buf, std::size_t cap, std::size_t& n,
            std::chrono::steady_clock::time_point deadline) noexcept;

}  // namespace tokenlock::detail::posix
