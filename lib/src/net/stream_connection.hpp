// A TCP connection, plain or TLS (OpenSSL), for the etcd lock's HTTP/1.1
// client (etcd/http_client.hpp). The network code (lib/src/net/) is, with
// the OS seam (lib/src/posix/), the only code that calls the OS, and the
// only code that calls OpenSSL.
//
// Every call takes a deadline and never runs past it: the socket is
// non-blocking, each wait is a poll(2) bounded by the time left, and the
// deadline is checked before every read and write too, so that a peer
// that keeps sending (or keeps taking) bytes cannot hold a call past it. Writes
// use MSG_NOSIGNAL (TLS writes too, through a BIO of our own), so a peer
// that closed the connection makes them fail with EPIPE instead of raising
// SIGPIPE in the program; EINTR resumes. No call throws.
//
// Not thread-safe: one connection per thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace tokenlock::detail::posix {

using io_deadline = std::chrono::steady_clock::time_point;

// What went wrong, as the caller's advice needs it.
enum class io_status {
  ok,
  refused,         // connect: nobody listens there (ECONNREFUSED and the like)
  timed_out,       // the deadline passed
  unresolved,      // getaddrinfo found no address for the host
  cert_untrusted,  // TLS: the certificate does not verify (CA, name, dates)
  tls_failed,      // TLS: the handshake or a record failed otherwise
  closed,          // the peer closed or reset the connection
  failed,          // any other error of the OS
  interrupted,     // the wake descriptor became readable (a stop signal)
};

struct io_result {
  io_status status = io_status::ok;
  std::string detail;  // the OS's or OpenSSL's words, for messages
  int error = 0;       // the errno, where the OS gave one
  explicit operator bool() const noexcept { return status != io_status::ok; }
};

// TLS settings: `cacert` empty means the system's default CA paths.
struct tls_settings {
  bool enabled = false;
  std::string cacert;
};

class stream_connection {
 public:
  stream_connection() noexcept = default;
  ~stream_connection();
  stream_connection(const stream_connection&) = delete;
  stream_connection& operator=(const stream_connection&) = delete;

  // Resolves `host` (a name, an IPv4 address or an IPv6 address without
  // brackets) through getaddrinfo(3), connects to each address in turn
  // until one answers, and with TLS does the handshake: the certificate
  // verified against the CA file, its name or IP address checked against
  // `host`, SNI sent for names. Closes any previous connection first.
  io_result open(const std::string& host, const std::string& port, const tls_settings& tls,
                 io_deadline deadline) noexcept;
  bool is_open() const noexcept { return fd_ >= 0; }
  void close() noexcept;
  // A descriptor whose becoming readable ends every wait at once with
  // io_status::interrupted (stop_signal_watch::fd()); -1: none.
  void set_wake_fd(int fd) noexcept { wake_fd_ = fd; }

  // Whether an open connection that should be idle (no request pending)
  // has been closed by the peer, or has bytes nobody asked for: either way
  // it must not carry the next request. Does not wait.
  bool idle_broken() noexcept;

  // Writes all `size` bytes.
  io_result write_all(const char* data, std::size_t size, io_deadline deadline) noexcept;
  // Reads what has arrived (waiting until something has), at most `cap`
  // bytes into `buf`; `n` = 0 with status closed at the end of the stream.
  io_result read_some(char* buf, std::size_t cap, std::size_t& n, io_deadline deadline) noexcept;

 private:
  io_result connect_tcp(const std::string& host, const std::string& port, io_deadline deadline) noexcept;
  io_result handshake(const std::string& host, const tls_settings& tls, io_deadline deadline) noexcept;

  int fd_ = -1;
  int wake_fd_ = -1;
  void* ctx_ = nullptr;  // SSL_CTX*, kept across reconnections with the same CA file
  std::string ctx_cacert_;
  void* ssl_ = nullptr;  // SSL*
};

// While one lives, SIGTERM, SIGINT and SIGHUP (those the process does not
// ignore) do not end the process at once: the handler notes the signal
// and makes fd() readable, so that every wait given it as its wake
// descriptor ends (io_status::interrupted). The program then does what
// must be done before it dies (an etcd waiter gives its place in line
// back), and finish() restores the actions the signals had and raises the
// signal noted, once the last watch of the process finishes: the process
// then ends as the signal would have ended it (or runs the program's own
// handler, which may return). Watches may be held by several threads at
// once; each must be finished (the destructor does it).
class stop_signal_watch {
 public:
  stop_signal_watch() noexcept;
  ~stop_signal_watch() { finish(); }
  stop_signal_watch(const stop_signal_watch&) = delete;
  stop_signal_watch& operator=(const stop_signal_watch&) = delete;

  // -1 when the watch could not be set up (no pipe): signals then act as
  // before.
  int fd() const noexcept { return fd_; }
  // The stop signal caught since the first watch began, or 0.
  static int caught() noexcept;
  // Restores the signals' actions when this is the last watch, and raises
  // the signal caught, if any; returns when the process survives it.
  void finish() noexcept;

 private:
  int fd_ = -1;
  bool active_ = false;
};

}  // namespace tokenlock::detail::posix
