#include "etcd/http_client.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <openssl/x509v3.h>

// Defined only in the statically linked programs (lib/static/): why a
// host name did not resolve there.
extern "C" const char* tokenlock_static_resolver_note() __attribute__((weak));

namespace tokenlock::detail {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

namespace {

// The io_context's own executor rather than Asio's polymorphic default:
// no type erasure on every operation, and shorter instantiations (their
// names fill the static command's symbol table).
// The streams as classes of our own, for the same reason: every
// instantiation's name spells its stream's type.
using executor = net::io_context::executor_type;
struct plain_stream : beast::basic_stream<tcp, executor> {
  using basic_stream::basic_stream;
};
struct tls_stream : beast::ssl_stream<plain_stream> {
  using ssl_stream::ssl_stream;
};

constexpr std::size_t max_head = 64 * 1024;
constexpr std::size_t max_body = 16 << 20;

}  // namespace

struct http_connection::state {
  std::string host, port, host_header, cacert;
  bool tls = false;
  // Kept across reconnections: loading the CA file is the costly part.
  std::optional<net::ssl::context> ssl_ctx;
  // Made on first use, and dropped by close() with the connection, so that
  // an idle watch's connection holds no descriptor.
  std::optional<net::io_context> ioc;
  std::optional<plain_stream> plain;
  std::optional<tls_stream> secure;
  beast::flat_buffer buffer;  // bytes read and not yet parsed
  bool interrupted = false;   // the wake descriptor became readable

  bool is_open() const noexcept { return plain || secure; }
  plain_stream& lowest() { return secure ? beast::get_lowest_layer(*secure) : *plain; }
  // Runs what is ready, so that nothing stays queued for a socket or
  // descriptor about to be closed: Asio reuses a closed descriptor's
  // reactor state for the next one registered, and readiness queued for
  // the old one would complete the new one's wait (a wake descriptor's: a
  // stop signal that never came).
  void settle() {
    if (!ioc) return;
    ioc->restart();
    ioc->poll();
  }
  // Ends the connection (keeping the io_context: post() still runs on it).
  void drop() noexcept {
    error_code ignored;
    settle();
    if (is_open()) lowest().socket().close(ignored);
    secure.reset();
    plain.reset();
    buffer.clear();
  }
};

namespace {

using state = http_connection::state;

// Runs the io_context until `done`: the handlers of the current operation,
// the stream's timer and the wake descriptor's wait.
void run_until(state& s, const bool& done) {
  s.ioc->restart();
  while (!done && s.ioc->run_one() > 0) {
  }
}

// The completion handler of every operation: one named type, for short
// instantiations.
struct completion {
  error_code& result;
  bool& done;
  template <class... Rest>
  void operator()(error_code ec, Rest&&...) {
    result = ec;
    done = true;
  }
};

// Starts one asynchronous operation with `start(handler)` and runs it to
// its end. The deadline is checked before it starts too: a member that
// keeps sending never lets the stream's timer find a read pending.
template <class Start>
error_code run_op(state& s, io_deadline deadline, Start&& start) {
  if (s.interrupted) return net::error::operation_aborted;
  if (std::chrono::steady_clock::now() >= deadline) return beast::error::timeout;
  error_code result;
  bool done = false;
  start(completion{result, done});
  run_until(s, done);
  if (s.interrupted) return net::error::operation_aborted;
  return result;
}

// While one lives, the wake descriptor's becoming readable cancels the
// connection's operations. A duplicate is watched, registered afresh for
// each request: a readiness that Asio's edge-triggered epoll reported
// before a wait was queued would be lost to a wait kept from before.
// A completed wait is only a hint: Asio may hand this descriptor the
// reactor state, and a readiness, of one closed before under the same
// number (a stop signal that never came, seen under ASan with tests side
// by side). So poll(2) decides, and a wait that finds nothing to read
// waits again.
class wake_watch {
 public:
  wake_watch(state& s, int fd) : s_(s), desc_(s.ioc->get_executor()) {
    s.interrupted = false;
    if (fd < 0) return;
    const int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    error_code ec;
    if (dup < 0 || desc_.assign(dup, ec)) {
      if (dup >= 0) ::close(dup);
      return;
    }
    pending_ = true;
    arm();
  }
  ~wake_watch() {
    if (!pending_) return;  // never registered: nothing of it is queued
    error_code ignored;
    desc_.cancel(ignored);
    run_until(s_, stopped_);
    s_.settle();
  }
  wake_watch(const wake_watch&) = delete;
  wake_watch& operator=(const wake_watch&) = delete;

 private:
  void arm() {
    desc_.async_wait(net::posix::descriptor::wait_read, [this](error_code e) {
      if (e) {
        stopped_ = true;
        return;
      }
      if (!readable()) return arm();
      stopped_ = true;
      s_.interrupted = true;
      if (s_.is_open()) s_.lowest().cancel();
    });
  }
  bool readable() {
    pollfd p{desc_.native_handle(), POLLIN, 0};
    int n;
    do n = ::poll(&p, 1, 0);
    while (n < 0 && errno == EINTR);
    return n == 1 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
  }

  state& s_;
  net::posix::basic_stream_descriptor<executor> desc_;
  bool pending_ = false;  // a wait was started
  bool stopped_ = false;  // and has ended
};

bool is_one_of(const error_code& ec, std::initializer_list<error_code> codes) {
  return std::find(codes.begin(), codes.end(), ec) != codes.end();
}

// The status of a failed operation on a connection that was open.
io_status status_of(const state& s, const error_code& ec) {
  if (s.interrupted) return io_status::interrupted;
  if (ec == beast::error::timeout) return io_status::timed_out;
  if (is_one_of(ec, {net::error::eof, net::error::connection_reset, net::error::broken_pipe,
                     net::error::not_connected, net::error::connection_aborted,
                     net::ssl::error::stream_truncated, http::error::end_of_stream,
                     http::error::partial_message}))
    return io_status::closed;
  if (ec.category() == net::error::get_ssl_category()) return io_status::tls_failed;
  return io_status::failed;
}

http_outcome failed(const state& s, const error_code& ec, std::string detail = {}) {
  http_outcome out;
  out.status = status_of(s, ec);
  if (out.status == io_status::interrupted) out.detail = "a stop signal arrived";
  else if (out.status == io_status::timed_out) out.detail = "no answer in time";
  else out.detail = detail.empty() ? ec.message() : detail;
  return out;
}

bool is_ip_address(const std::string& host) {
  error_code ec;
  net::ip::make_address(host, ec);
  return !ec;
}

// The TLS context, made once: verification on, TLS 1.2 at least, the CA
// file or the system's CAs. Not kept when the CA file cannot be read: the
// next connect reads it again (it may have been fixed).
http_outcome tls_context(state& s) {
  if (s.ssl_ctx) return {};
  s.ssl_ctx.emplace(net::ssl::context::tls_client);
  s.ssl_ctx->set_verify_mode(net::ssl::verify_peer);
  SSL_CTX_set_min_proto_version(s.ssl_ctx->native_handle(), TLS1_2_VERSION);
  error_code ec;
  if (s.cacert.empty()) s.ssl_ctx->set_default_verify_paths(ec);
  else s.ssl_ctx->load_verify_file(s.cacert, ec);
  if (!ec) return {};
  s.ssl_ctx.reset();
  http_outcome out;
  out.status = io_status::cert_untrusted;
  out.detail = "cannot read the CA file \"" + s.cacert + "\": " + ec.message();
  return out;
}

// The handshake on the connected stream: the certificate's host name
// (or IP address) checked, SNI sent for names.
http_outcome handshake(state& s, io_deadline deadline) {
  SSL* ssl = s.secure->native_handle();
  const int named = is_ip_address(s.host)
                        ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), s.host.c_str())
                        : SSL_set1_host(ssl, s.host.c_str()) && SSL_set_tlsext_host_name(ssl, s.host.c_str());
  if (named != 1) return failed(s, net::error::invalid_argument, "cannot set the host to verify");
  const error_code ec = run_op(s, deadline, [&](auto h) {
    s.secure->async_handshake(net::ssl::stream_base::client, std::move(h));
  });
  if (!ec) return {};
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK && !s.interrupted && ec != beast::error::timeout) {
    http_outcome out;
    out.status = io_status::cert_untrusted;
    out.detail = std::string("certificate verification: ") + X509_verify_cert_error_string(verify);
    return out;
  }
  http_outcome out = failed(s, ec);
  if (out.status == io_status::failed || out.status == io_status::tls_failed) {
    out.status = io_status::tls_failed;
    out.detail = "TLS handshake: " + ec.message();
  }
  return out;
}

// Resolves the host (getaddrinfo(3): names, IPv4 and IPv6 literals; the
// static programs' own resolver there), connects to each address in turn
// until one answers, and with TLS does the handshake.
http_outcome open(state& s, io_deadline deadline) {
  s.drop();
  if (s.tls)
    if (http_outcome out = tls_context(s); !out.ok()) return out;
  error_code ec;
  net::ip::basic_resolver<tcp, executor> resolver(s.ioc->get_executor());
  const auto addresses = resolver.resolve(s.host, s.port, tcp::resolver::numeric_service, ec);
  if (ec) {
    std::string d = "cannot resolve \"" + s.host + "\": " + ec.message();
    if (tokenlock_static_resolver_note) d += std::string("; ") + tokenlock_static_resolver_note();
    http_outcome out;
    out.status = ec == net::error::host_not_found || ec == net::error::host_not_found_try_again ||
                         ec == net::error::no_data
                     ? io_status::unresolved
                     : io_status::failed;
    out.detail = d;
    return out;
  }
  // Beast reads as much as the buffer holds: an answer in one read.
  s.buffer.reserve(16384);
  if (s.tls) s.secure.emplace(s.ioc->get_executor(), *s.ssl_ctx);
  else s.plain.emplace(s.ioc->get_executor());
  s.lowest().expires_at(deadline);
  ec = run_op(s, deadline, [&](auto h) { s.lowest().async_connect(addresses, std::move(h)); });
  if (ec) {
    http_outcome out = failed(s, ec);
    if (out.status != io_status::timed_out && out.status != io_status::interrupted)
      out.status = io_status::refused;
    s.drop();
    return out;
  }
  s.lowest().socket().set_option(tcp::no_delay(true), ec);
  if (!s.tls) return {};
  http_outcome out = handshake(s, deadline);
  if (!out.ok()) s.drop();
  return out;
}

// Whether an open connection that should be idle (no request pending)
// has been closed by the peer, or has bytes nobody asked for: either way
// it must not carry the next request. Does not wait.
bool idle_broken(state& s) {
  if (s.secure) {
    SSL* ssl = s.secure->native_handle();
    if (SSL_has_pending(ssl) || BIO_ctrl_pending(SSL_get_rbio(ssl)) > 0) return true;
  }
  const int fd = s.lowest().socket().native_handle();
  pollfd p{fd, POLLIN, 0};
  int rc;
  while ((rc = ::poll(&p, 1, 0)) < 0 && errno == EINTR) {
  }
  if (rc == 0) return false;
  // TLS: readable after a whole answer is a close_notify, the end, or
  // bytes nobody asked for (the session tickets came before the answer).
  if (rc < 0 || (p.revents & (POLLERR | POLLNVAL)) || s.secure) return true;
  char c;
  ssize_t n;
  while ((n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT)) < 0 && errno == EINTR) {
  }
  return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);  // EOF, stray bytes or an error
}

using answer_parser = http::response_parser<http::buffer_body>;

// A completion handler of any type behind one: the operations below it
// (Asio's TLS and socket operations) are made once, not once per Beast
// operation above it.
class erased_handler {
 public:
  template <class Handler>
  explicit erased_handler(Handler&& h) : p_(std::make_unique<impl<std::decay_t<Handler>>>(std::forward<Handler>(h))) {}
  void operator()(error_code ec, std::size_t n) { p_.release()->call(ec, n); }

 private:
  struct base {
    virtual ~base() = default;
    // Frees this, then calls the handler: as Asio frees an operation's
    // memory before its upcall, which may start the next operation.
    virtual void call(error_code ec, std::size_t n) = 0;
  };
  template <class Handler>
  struct impl final : base {
    explicit impl(Handler&& h) : h(std::move(h)) {}
    void call(error_code ec, std::size_t n) override {
      Handler local(std::move(h));
      delete this;
      std::move(local)(ec, n);
    }
    Handler h;
  };
  std::unique_ptr<base> p_;
};

// The connection's stream, plain or TLS, as one type for Beast's HTTP
// operations: they are made once, not once per kind of stream. Reads take
// the first buffer (Beast reads into one), writes all of them.
class any_stream {
 public:
  using executor_type = executor;
  explicit any_stream(state& s) : s_(s) {}
  executor_type get_executor() noexcept { return s_.ioc->get_executor(); }

  template <class Buffers, class Handler>
  void async_read_some(const Buffers& buffers, Handler&& handler) {
    const net::mutable_buffer first = *net::buffer_sequence_begin(buffers);
    if (s_.secure) s_.secure->async_read_some(first, erased_handler(std::forward<Handler>(handler)));
    else s_.plain->async_read_some(first, erased_handler(std::forward<Handler>(handler)));
  }
  template <class Buffers, class Handler>
  void async_write_some(const Buffers& buffers, Handler&& handler) {
    const std::vector<net::const_buffer> all(net::buffer_sequence_begin(buffers), net::buffer_sequence_end(buffers));
    if (s_.secure) s_.secure->async_write_some(all, erased_handler(std::forward<Handler>(handler)));
    else s_.plain->async_write_some(all, erased_handler(std::forward<Handler>(handler)));
  }

 private:
  state& s_;
};

// Words for an answer that breaks HTTP's framing or a limit.
std::string bad_answer_words(const error_code& ec) {
  if (is_one_of(ec, {http::error::bad_version, http::error::bad_status, http::error::bad_reason}))
    return "the answer does not start with an HTTP/1.x status line";
  if (ec == http::error::header_limit)
    return "a status line and headers longer than " + std::to_string(max_head) + " bytes";
  if (ec == http::error::body_limit)
    return "a body longer than " + std::to_string(max_body) + " bytes, by its Content-Length or its chunks";
  if (ec == http::error::bad_content_length) return "a Content-Length that is not a number";
  if (is_one_of(ec, {http::error::bad_chunk, http::error::bad_chunk_extension}))
    return "a chunk size that is not a hexadecimal number, or chunk data longer than its size";
  return "the answer breaks HTTP/1.1: " + ec.message();
}

// A TLS connection that ended without a close_notify: as the end of a
// plain one ends an answer (Beast's reading handles net::error::eof only).
error_code truncated(answer_parser& p) {
  if (!p.got_some()) return http::error::end_of_stream;
  if (!p.need_eof()) return http::error::partial_message;
  error_code ec;
  p.put_eof(ec);
  return ec;
}

http_outcome answer_failed(const state& s, const answer_parser& p, const error_code& ec) {
  if (ec.category() == http::make_error_code(http::error::end_of_stream).category() &&
      ec != http::error::end_of_stream && ec != http::error::partial_message) {
    http_outcome out;
    out.bad_answer = true;
    out.answer_started = true;
    out.http_status = p.is_header_done() ? p.get().result_int() : 0;
    out.detail = bad_answer_words(ec);
    return out;
  }
  http_outcome out = failed(s, ec,
                            ec == http::error::end_of_stream     ? "the connection closed without an answer"
                            : ec == http::error::partial_message ? "the connection closed in the middle of the answer"
                                                                 : "");
  out.answer_started = p.got_some() || s.buffer.size() > 0;
  return out;
}

// Reads one answer: its body into out.body, or into `sink`.
http_outcome read_message(state& s, any_stream& stream, answer_parser& p, io_deadline deadline,
                          const http_sink& sink) {
  p.header_limit(max_head);
  p.body_limit(sink ? std::numeric_limits<std::uint64_t>::max() : max_body);
  http_outcome out;
  char buf[16384];
  while (!p.is_done()) {
    p.get().body().data = buf;
    p.get().body().size = sizeof buf;
    error_code ec = run_op(s, deadline, [&](auto h) { http::async_read_some(stream, s.buffer, p, std::move(h)); });
    if (ec == http::error::need_buffer) ec = {};
    if (ec == net::ssl::error::stream_truncated && !s.interrupted) ec = truncated(p);
    const std::size_t n = sizeof buf - p.get().body().size;
    if (n > 0 && sink && !sink(buf, n)) {
      out.answer_started = true;
      out.http_status = p.get().result_int();
      s.drop();  // the rest of the answer is unread
      return out;
    }
    if (n > 0 && !sink) out.body.append(buf, n);
    if (ec) return answer_failed(s, p, ec);
  }
  out.answer_started = true;
  out.http_status = p.get().result_int();
  return out;
}

// Writes the request and reads its answer, past interim (1xx) answers;
// `written` when the request's last byte was written. Ends the connection
// when the answer asks it to, ended with it, or was followed by bytes
// nobody asked for.
http_outcome exchange(state& s, const http::request<http::string_body>& req,
                      bool& written, io_deadline deadline, const http_sink& sink) {
  written = false;
  any_stream stream(s);
  s.lowest().expires_at(deadline);
  const error_code ec =
      run_op(s, deadline, [&](auto h) { http::async_write(stream, req, std::move(h)); });
  if (ec) return failed(s, ec);
  written = true;
  for (bool interim = false;; interim = true) {
    answer_parser p;
    http_outcome out = read_message(s, stream, p, deadline, sink);
    out.answer_started = out.answer_started || interim;
    if (!out.ok() || !p.is_done()) return out;
    if (out.http_status / 100 == 1) continue;
    if (!p.keep_alive() || s.buffer.size() > 0) s.drop();
    return out;
  }
}

}  // namespace

http_connection::http_connection(const std::string& member, const std::string& cacert)
    : s_(std::make_unique<state>()) {
  const auto scheme_end = member.find("://");
  s_->tls = member.compare(0, scheme_end, "https") == 0;
  if (s_->tls) s_->cacert = cacert;
  s_->host_header = member.substr(scheme_end + 3);
  const auto colon = s_->host_header.rfind(':');
  s_->host = s_->host_header.substr(0, colon);
  s_->port = s_->host_header.substr(colon + 1);
  if (!s_->host.empty() && s_->host.front() == '[') s_->host = s_->host.substr(1, s_->host.size() - 2);
}

http_connection::~http_connection() { close(); }

void http_connection::close() noexcept {
  s_->drop();
  s_->ioc.reset();
}

http_outcome http_connection::post(const std::string& path, const std::string& body,
                                   const std::string& token, io_deadline connect_deadline,
                                   io_deadline deadline, const http_sink& sink) {
  if (token.find_first_of("\r\n") != std::string::npos) {
    http_outcome out;
    out.bad_answer = true;
    out.detail = "the auth token holds a line break";
    return out;
  }
  http::request<http::string_body> req{http::verb::post, path, 11};
  req.set(http::field::host, s_->host_header);
  req.set(http::field::content_type, "application/json");
  if (!token.empty()) req.set(http::field::authorization, token);
  req.body() = body;
  req.prepare_payload();
  state& s = *s_;
  if (!s.ioc) s.ioc.emplace(1);
  const wake_watch wake(s, wake_fd_);
  if (s.is_open() && idle_broken(s)) s.drop();
  for (int attempt = 0;; ++attempt) {
    const bool kept = s.is_open();
    if (!kept)
      if (http_outcome out = open(s, std::min(connect_deadline, deadline)); !out.ok()) return out;
    bool written = false;
    http_outcome out = exchange(s, req, written, deadline, sink);
    if (!out.ok()) s.drop();
    // A kept connection that the member closed while our request was
    // still being written: the member cannot have acted on a request it
    // did not read whole, so it goes once more on a new connection.
    if (kept && !written && attempt == 0 && out.status == io_status::closed) continue;
    return out;
  }
}

}  // namespace tokenlock::detail
