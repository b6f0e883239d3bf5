// The etcd lock's HTTP/1.1 client for etcd's JSON gateway: one POST at a
// time on one kept-alive connection to one member (plain or TLS, through
// net/stream_connection.hpp), answers framed by Content-Length, chunked
// transfer coding or the end of the connection, and bounded in size.
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
// Errors are values (http_outcome); nothing throws but std::bad_alloc.
// Not thread-safe: one connection per thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

#include "net/stream_connection.hpp"

namespace tokenlock::detail {

// Splits a stream of JSON objects (the gateway's streaming answers put one
// object per message) at the end of each top-level object. An object
// longer than `max_object` bytes stops the stream (overflow()).
class object_splitter {
 public:
  explicit object_splitter(std::size_t max_object = 1 << 20) : max_(max_object) {}
  // Feeds bytes; calls `on_object` with every complete object, stopping
  // (false) when it returns false or an object is too long.
  template <class F>
  bool feed(const char* p, std::size_t n, F&& on_object) {
    for (std::size_t i = 0; i < n; ++i) {
      const char c = p[i];
      if (depth_ > 0) buf_ += c;
      if (buf_.size() > max_) {
        overflow_ = true;
        return false;
      }
      if (in_string_) {
        if (escaped_) escaped_ = false;
        else if (c == '\\') escaped_ = true;
        else if (c == '"') in_string_ = false;
        continue;
      }
      if (c == '"' && depth_ > 0) in_string_ = true;
      else if (c == '{') {
        if (depth_++ == 0) buf_ = "{";
      } else if (c == '}' && depth_ > 0 && --depth_ == 0) {
        if (!on_object(buf_)) return false;
        buf_.clear();
      }
    }
    return true;
  }
  bool overflow() const noexcept { return overflow_; }

 private:
  std::string buf_;
  std::size_t max_;
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false, overflow_ = false;
};

// Body bytes of a streamed answer, as they arrive; false stops reading
// (the connection is then closed: the rest of the answer is unread).
using http_sink = std::function<bool(const char*, std::size_t)>;

// An incremental parser of one HTTP/1.x answer (status line, headers, and
// a body framed by Content-Length, chunked coding, or the connection's
// end), fed the bytes as they arrive, split anywhere.
class http_answer_parser {
 public:
  enum class state { more, done, stopped, bad };
  // Limits: the status line and headers together, and a body kept in
  // body() (a streamed body is bounded by its sink).
  explicit http_answer_parser(std::size_t max_head = 64 * 1024, std::size_t max_body = 16 << 20)
      : max_head_(max_head), max_body_(max_body) {}

  // Consumes `n` bytes; body bytes go to `sink`, or into body() when it is
  // empty. Bytes past the end of the answer set extra().
  state feed(const char* p, std::size_t n, const http_sink& sink);
  // The connection ended: done for a body delimited by the end, else bad.
  state end_of_stream();

  bool started() const noexcept { return seen_ > 0; }
  int status() const noexcept { return status_; }
  bool keep_alive() const noexcept { return keep_alive_; }
  bool extra() const noexcept { return extra_; }
  std::string& body() noexcept { return body_; }
  const std::string& error() const noexcept { return error_; }

 private:
  enum class phase { head, length, chunk_size, chunk_data, chunk_crlf, trailers, until_close, end };
  state bad(std::string why);
  state parse_head();
  state feed_head(const char*& p, std::size_t& n);
  state feed_chunk_line(const char*& p, std::size_t& n);
  state feed_counted(const char*& p, std::size_t& n, const http_sink& sink);
  state deliver(const char* p, std::size_t n, const http_sink& sink);
  state chunk_line(const char*& p, std::size_t& n);

  std::size_t max_head_, max_body_, seen_ = 0, left_ = 0, kept_ = 0;
  phase phase_ = phase::head;
  std::string head_, line_, body_, error_;
  int status_ = 0;
  bool keep_alive_ = true, extra_ = false;
  state result_ = state::more;
};

// What post() did.
struct http_outcome {
  posix::io_status status = posix::io_status::ok;  // the transport's failure, if any
  std::string detail;          // its words, or why the answer is not HTTP
  bool bad_answer = false;     // the answer broke HTTP's framing or a limit
  bool answer_started = false; // some of the answer had arrived when it failed
  int http_status = 0;
  std::string body;            // the answer's body, unless streamed
  bool ok() const noexcept { return status == posix::io_status::ok && !bad_answer; }
};

class http_connection {
 public:
  // `member`: "http://host:port" or "https://[v6]:port"; `cacert` for
  // https only (empty: the system's CAs).
  http_connection(const std::string& member, const std::string& cacert);

  // POSTs `body` (JSON) to `path`, with `Authorization: token` when
  // `token` is not empty. Connecting must end by `connect_deadline`, the
  // whole exchange by `deadline`. With `sink`, the body streams into it.
  http_outcome post(const std::string& path, const std::string& body, const std::string& token,
                    posix::io_deadline connect_deadline, posix::io_deadline deadline,
                    const http_sink& sink = nullptr);
  void close() noexcept { conn_.close(); }
  // posix::stream_connection::set_wake_fd: a stop signal ends the request.
  void set_wake_fd(int fd) noexcept { conn_.set_wake_fd(fd); }

 private:
  http_outcome exchange(const std::string& request, bool& written, posix::io_deadline deadline,
                        const http_sink& sink);

  std::string host_, port_, host_header_;
  posix::tls_settings tls_;
  posix::stream_connection conn_;
};

}  // namespace tokenlock::detail
