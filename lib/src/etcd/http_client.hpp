// The etcd lock's HTTP/1.1 client for etcd's JSON gateway: one POST at a
// time on one kept-alive connection to one member (plain or TLS), built on
// Boost.Beast (HTTP framing) and Boost.Asio (sockets, OpenSSL). Answers are
// framed by Content-Length, chunked transfer coding or the end of the
// connection, and bounded in size: the status line and headers to 64 KiB,
// a body kept in memory to 16 MiB (a streamed body is bounded by its sink).
//
// Calling sequence: make an http_connection per member (and one more for
// a watch, whose answer streams), call post() for each request; it
// connects on first use and again when the kept connection was closed.
//
// Re-sending (docs/etcd.md, Transport): post() sends a request a second
// time only when it cannot have been acted on: the kept connection was
// found closed before writing, or writing it failed before its last byte
// (the gateway reads the whole body before it acts). Once the request was
// written, a connection that ends without an answer is reported (closed),
// and one that ends in the middle of an answer is reported with
// answer_started set: the member received the request and may have
// applied it, so the caller must not send it again elsewhere blindly.
//
// Deadlines: every operation is asynchronous on the connection's own
// io_context, run by post() on the caller's thread until it completes;
// the stream's timer (expires_at) ends it at the deadline, however slowly
// or steadily the member sends, and a readable wake descriptor ends it at
// once. Writes never raise SIGPIPE (Asio sends with MSG_NOSIGNAL).
//
// HTTPS: the certificate verified against the CA file (or the system's
// CAs), its host name or IP address checked, SNI sent for names.
//
// Errors are values (http_outcome); nothing throws but std::bad_alloc.
// Not thread-safe: one connection per thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace tokenlock::detail {

using io_deadline = std::chrono::steady_clock::time_point;

// What went wrong, as the caller's advice needs it.
enum class io_status {
  ok,
  refused,         // connect: nobody listens there (ECONNREFUSED and the like)
  timed_out,       // the deadline passed
  unresolved,      // no address for the host name
  cert_untrusted,  // TLS: the certificate does not verify (CA, name, dates)
  tls_failed,      // TLS: the handshake or a record failed otherwise
  closed,          // the peer closed or reset the connection
  failed,          // any other error of the OS
  interrupted,     // the wake descriptor became readable (a stop signal)
};

// Body bytes of a streamed answer, as they arrive; false stops reading
// (the connection is then closed: the rest of the answer is unread).
using http_sink = std::function<bool(const char*, std::size_t)>;

// What post() did.
struct http_outcome {
  io_status status = io_status::ok;  // the transport's failure, if any
  std::string detail;          // its words, or why the answer is not HTTP
  bool bad_answer = false;     // the answer broke HTTP's framing or a limit
  bool answer_started = false; // some of the answer had arrived when it failed
  int http_status = 0;
  std::string body;            // the answer's body, unless streamed
  bool ok() const noexcept { return status == io_status::ok && !bad_answer; }
};

class http_connection {
 public:
  // `member`: "http://host:port" or "https://[v6]:port"; `cacert` for
  // https only (empty: the system's CAs).
  http_connection(const std::string& member, const std::string& cacert);
  ~http_connection();
  http_connection(const http_connection&) = delete;
  http_connection& operator=(const http_connection&) = delete;

  // POSTs `body` (JSON) to `path`, with `Authorization: token` when
  // `token` is not empty. Connecting must end by `connect_deadline`, the
  // whole exchange by `deadline`. With `sink`, the body streams into it.
  http_outcome post(const std::string& path, const std::string& body, const std::string& token,
                    io_deadline connect_deadline, io_deadline deadline,
                    const http_sink& sink = nullptr);
  void close() noexcept;
  // A descriptor whose becoming readable ends the request at once with
  // io_status::interrupted (posix::stop_signal_watch::fd()); -1: none.
  void set_wake_fd(int fd) noexcept { wake_fd_ = fd; }

  struct state;  // the Asio and Beast objects (http_client.cpp)

 private:
  std::unique_ptr<state> s_;
  int wake_fd_ = -1;
};

}  // namespace tokenlock::detail
