#include "net/stream_connection.hpp"

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <mutex>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

// Defined only in the statically linked programs (lib/static/): why a
// host name did not resolve there.
extern "C" const char* tokenlock_static_resolver_note() __attribute__((weak));

namespace tokenlock::detail::posix {

namespace {

io_result fail(io_status s, std::string detail) { return io_result{s, std::move(detail)}; }

io_result errno_result(int e, io_status s) {
  io_result r = fail(s, std::strerror(e));
  r.error = e;
  return r;
}

std::atomic<int> caught_signal{0};

bool past(io_deadline deadline) { return std::chrono::steady_clock::now() >= deadline; }

io_result too_late() { return fail(io_status::timed_out, "no answer in time"); }

io_result stopped() { return fail(io_status::interrupted, "a stop signal arrived"); }

// The status of an errno from a socket that was connected.
io_status broken(int e) {
  return e == EPIPE || e == ECONNRESET || e == ENOTCONN || e == ECONNABORTED ? io_status::closed
                                                                              : io_status::failed;
}

// Waits until `fd` is ready for `events` or the deadline passes, or
// `wake_fd` (when not -1) becomes readable.
io_result wait_for(int fd, short events, io_deadline deadline, int wake_fd) noexcept {
  for (;;) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) return too_late();
    // Rounded up: a poll that returns a little early would spin.
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    pollfd p[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
    const int rc = ::poll(p, wake_fd >= 0 ? 2 : 1, static_cast<int>(std::min<long long>(ms, INT_MAX)));
    if (rc > 0) return wake_fd >= 0 && p[1].revents ? stopped() : io_result{};
    if (rc < 0 && errno != EINTR) return errno_result(errno, io_status::failed);
  }
}

// OpenSSL's socket BIO writes with write(2), which raises SIGPIPE on a
// closed connection; this one sends with MSG_NOSIGNAL.
int bio_write(BIO* b, const char* data, int len) {
  const int fd = static_cast<int>(reinterpret_cast<std::intptr_t>(BIO_get_data(b)));
  BIO_clear_retry_flags(b);
  for (;;) {
    const ssize_t n = ::send(fd, data, static_cast<std::size_t>(len), MSG_NOSIGNAL);
    if (n >= 0) return static_cast<int>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_write(b);
    return -1;
  }
}

int bio_read(BIO* b, char* buf, int len) {
  const int fd = static_cast<int>(reinterpret_cast<std::intptr_t>(BIO_get_data(b)));
  BIO_clear_retry_flags(b);
  for (;;) {
    const ssize_t n = ::recv(fd, buf, static_cast<std::size_t>(len), 0);
    if (n >= 0) return static_cast<int>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_read(b);
    return -1;
  }
}

long bio_ctrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }

int bio_create(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

BIO_METHOD* nosignal_method() {
  static BIO_METHOD* const m = [] {
    BIO_METHOD* bm = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "tokenlock socket");
    if (bm) {
      BIO_meth_set_write(bm, bio_write);
      BIO_meth_set_read(bm, bio_read);
      BIO_meth_set_ctrl(bm, bio_ctrl);
      BIO_meth_set_create(bm, bio_create);
    }
    return bm;
  }();
  return m;
}

std::string openssl_error(const char* fallback) {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return fallback;
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

// Waits as OpenSSL asks after `rc` from an SSL call: ok to call it again,
// or the failure. `what` names the call for messages.
io_result tls_wait(SSL* ssl, int rc, int fd, io_deadline deadline, int wake_fd, const char* what) noexcept {
  const int e = SSL_get_error(ssl, rc);
  if (e == SSL_ERROR_WANT_READ) return wait_for(fd, POLLIN, deadline, wake_fd);
  if (e == SSL_ERROR_WANT_WRITE) return wait_for(fd, POLLOUT, deadline, wake_fd);
  if (e == SSL_ERROR_ZERO_RETURN) return fail(io_status::closed, "the peer closed the TLS connection");
  if (e == SSL_ERROR_SYSCALL && errno != 0) return errno_result(errno, broken(errno));
  if (e == SSL_ERROR_SYSCALL ||
      (e == SSL_ERROR_SSL && ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING)) {
    ERR_clear_error();
    return fail(io_status::closed, "the peer closed the connection");
  }
  return fail(io_status::tls_failed, std::string(what) + ": " + openssl_error("TLS error"));
}

bool is_ip_address(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 || ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

stream_connection::~stream_connection() {
  close();
  if (ctx_) SSL_CTX_free(static_cast<SSL_CTX*>(ctx_));
}

void stream_connection::close() noexcept {
  if (ssl_) SSL_free(static_cast<SSL*>(ssl_));  // frees the BIO too
  ssl_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

io_result stream_connection::connect_tcp(const std::string& host, const std::string& port,
                                         io_deadline deadline) noexcept {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* list = nullptr;
  const int gai = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &list);
  if (gai != 0) {
    std::string d = "cannot resolve \"" + host + "\": " + ::gai_strerror(gai);
    if (tokenlock_static_resolver_note) d += std::string("; ") + tokenlock_static_resolver_note();
    return fail(gai == EAI_SYSTEM ? io_status::failed : io_status::unresolved, d);
  }
  io_result last = fail(io_status::unresolved, "no address for \"" + host + "\"");
  for (addrinfo* a = list; a && fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last = errno_result(errno, io_status::failed);
      continue;
    }
    int err = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    io_result waited;
    if (err == EINPROGRESS || err == EINTR) {
      waited = wait_for(fd, POLLOUT, deadline, wake_fd_);
      socklen_t len = sizeof err;
      if (!waited && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (waited) err = ETIMEDOUT;
    }
    if (err != 0) {
      last = waited ? waited : errno_result(err, io_status::refused);
      ::close(fd);
      // No time left for the next address, or told to stop.
      if (last.status == io_status::timed_out || last.status == io_status::interrupted) break;
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fd_ = fd;
  }
  ::freeaddrinfo(list);
  return fd_ >= 0 ? io_result{} : last;
}

io_result stream_connection::open(const std::string& host, const std::string& port,
                                  const tls_settings& tls, io_deadline deadline) noexcept {
  close();
  if (io_result r = connect_tcp(host, port, deadline)) return r;
  if (!tls.enabled) return {};
  io_result r = handshake(host, tls, deadline);
  if (r) close();
  return r;
}

io_result stream_connection::handshake(const std::string& host, const tls_settings& tls,
                                       io_deadline deadline) noexcept {
  ERR_clear_error();
  if (ctx_ && ctx_cacert_ != tls.cacert) {
    SSL_CTX_free(static_cast<SSL_CTX*>(ctx_));
    ctx_ = nullptr;
  }
  if (!ctx_) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) return fail(io_status::tls_failed, openssl_error("cannot make a TLS context"));
    ctx_ = ctx;
    ctx_cacert_ = tls.cacert;
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    const int loaded = tls.cacert.empty() ? SSL_CTX_set_default_verify_paths(ctx)
                                          : SSL_CTX_load_verify_locations(ctx, tls.cacert.c_str(), nullptr);
    if (loaded != 1) {
      // Not kept: the next connect reads the file again (it may be fixed).
      SSL_CTX_free(ctx);
      ctx_ = nullptr;
      return fail(io_status::cert_untrusted, "cannot read the CA file \"" + tls.cacert + "\": " +
                                                 openssl_error("no certificate in it"));
    }
  }
  SSL* ssl = SSL_new(static_cast<SSL_CTX*>(ctx_));
  BIO* bio = nosignal_method() ? BIO_new(nosignal_method()) : nullptr;
  if (!ssl || !bio) {
    if (ssl) SSL_free(ssl);
    if (bio) BIO_free(bio);
    return fail(io_status::tls_failed, openssl_error("out of memory"));
  }
  ssl_ = ssl;
  BIO_set_data(bio, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd_)));
  SSL_set_bio(ssl, bio, bio);
  const bool ip = is_ip_address(host);
  const int named = ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str())
                       : SSL_set1_host(ssl, host.c_str()) && SSL_set_tlsext_host_name(ssl, host.c_str());
  if (named != 1) return fail(io_status::tls_failed, openssl_error("cannot set the host to verify"));
  for (;;) {
    ERR_clear_error();
    const int rc = SSL_connect(ssl);
    if (rc == 1) return {};
    const long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) {
      ERR_clear_error();
      return fail(io_status::cert_untrusted,
                  std::string("certificate verification: ") + X509_verify_cert_error_string(verify));
    }
    if (io_result r = tls_wait(ssl, rc, fd_, deadline, wake_fd_, "TLS handshake")) return r;
  }
}

bool stream_connection::idle_broken() noexcept {
  if (fd_ < 0) return true;
  pollfd p{fd_, POLLIN, 0};
  int rc;
  while ((rc = ::poll(&p, 1, 0)) < 0 && errno == EINTR) {
  }
  if (rc == 0) return false;
  if (rc < 0 || (p.revents & (POLLERR | POLLNVAL))) return true;
  if (!ssl_) {
    char c;
    ssize_t n;
    while ((n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT)) < 0 && errno == EINTR) {
    }
    return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);  // EOF, stray bytes or an error
  }
  // TLS: the readable bytes may be a handshake record (TLS 1.3 session
  // tickets), which OpenSSL consumes without application data.
  ERR_clear_error();
  char c;
  const int n = SSL_read(static_cast<SSL*>(ssl_), &c, 1);
  if (n > 0) return true;
  const int e = SSL_get_error(static_cast<SSL*>(ssl_), n);
  ERR_clear_error();
  return e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE;
}

io_result stream_connection::write_all(const char* data, std::size_t size, io_deadline deadline) noexcept {
  if (fd_ < 0) return fail(io_status::closed, "not connected");
  while (size > 0) {
    if (past(deadline)) return too_late();
    if (wake_fd_ >= 0 && caught_signal.load(std::memory_order_relaxed)) return stopped();
    std::size_t done = 0;
    if (ssl_) {
      ERR_clear_error();
      const int n =
          SSL_write(static_cast<SSL*>(ssl_), data, static_cast<int>(std::min<std::size_t>(size, INT_MAX)));
      if (n <= 0) {
        if (io_result r = tls_wait(static_cast<SSL*>(ssl_), n, fd_, deadline, wake_fd_, "TLS write"))
          return r;
        continue;
      }
      done = static_cast<std::size_t>(n);
    } else {
      const ssize_t n = ::send(fd_, data, size, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return errno_result(errno, broken(errno));
        if (io_result r = wait_for(fd_, POLLOUT, deadline, wake_fd_)) return r;
        continue;
      }
      done = static_cast<std::size_t>(n);
    }
    data += done;
    size -= done;
  }
  return {};
}

io_result stream_connection::read_some(char* buf, std::size_t cap, std::size_t& n,
                                       io_deadline deadline) noexcept {
  n = 0;
  if (fd_ < 0) return fail(io_status::closed, "not connected");
  for (;;) {
    // Checked before every read: bytes that keep coming never find the
    // socket idle, where the wait would have checked.
    if (past(deadline)) return too_late();
    if (wake_fd_ >= 0 && caught_signal.load(std::memory_order_relaxed)) return stopped();
    if (ssl_) {
      ERR_clear_error();
      const int rc = SSL_read(static_cast<SSL*>(ssl_), buf, static_cast<int>(std::min<std::size_t>(cap, INT_MAX)));
      if (rc > 0) {
        n = static_cast<std::size_t>(rc);
        return {};
      }
      if (io_result r = tls_wait(static_cast<SSL*>(ssl_), rc, fd_, deadline, wake_fd_, "TLS read")) return r;
      continue;
    }
    const ssize_t rc = ::recv(fd_, buf, cap, 0);
    if (rc > 0) {
      n = static_cast<std::size_t>(rc);
      return {};
    }
    if (rc == 0) return fail(io_status::closed, "the peer closed the connection");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errno_result(errno, broken(errno));
    if (io_result r = wait_for(fd_, POLLIN, deadline, wake_fd_)) return r;
  }
}

// ---- stop_signal_watch ------------------------------------------------------

namespace {

constexpr int watched_signals[] = {SIGTERM, SIGINT, SIGHUP};
constexpr int watched_count = sizeof watched_signals / sizeof watched_signals[0];

// Process-wide, under watch_mutex (the handler reads only the pipe's write
// end and caught_signal). The pipe is never closed: a handler still
// running in another thread as the last watch ends must not write into a
// descriptor that was reused.
std::mutex watch_mutex;
int watch_count = 0;
int wake_pipe[2] = {-1, -1};
struct sigaction saved_actions[watched_count];
bool replaced[watched_count];

extern "C" void on_watched_signal(int sig) {
  const int saved_errno = errno;
  int none = 0;
  caught_signal.compare_exchange_strong(none, sig);
  const char byte = 1;
  if (::write(wake_pipe[1], &byte, 1) < 0) {
    // Full: readable already.
  }
  errno = saved_errno;
}

void drain_wake_pipe() {
  char buf[64];
  while (::read(wake_pipe[0], buf, sizeof buf) > 0) {
  }
}

// Our handler for each watched signal the process does not ignore; the
// actions replaced are kept for restore_actions().
void replace_actions() {
  for (int i = 0; i < watched_count; ++i) {
    replaced[i] = false;
    struct sigaction current;
    if (::sigaction(watched_signals[i], nullptr, &current) != 0) continue;
    if (!(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_IGN) continue;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_watched_signal;
    sigemptyset(&sa.sa_mask);
    for (int other : watched_signals) sigaddset(&sa.sa_mask, other);
    replaced[i] = ::sigaction(watched_signals[i], &sa, &saved_actions[i]) == 0;
  }
}

void restore_actions() {
  for (int i = 0; i < watched_count; ++i)
    if (replaced[i]) ::sigaction(watched_signals[i], &saved_actions[i], nullptr);
}

}  // namespace

stop_signal_watch::stop_signal_watch() noexcept {
  std::lock_guard<std::mutex> guard(watch_mutex);
  if (wake_pipe[0] < 0 && ::pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    wake_pipe[0] = wake_pipe[1] = -1;
    return;
  }
  if (watch_count++ == 0) {
    drain_wake_pipe();
    caught_signal.store(0);
    replace_actions();
  }
  active_ = true;
  fd_ = wake_pipe[0];
}

int stop_signal_watch::caught() noexcept { return caught_signal.load(); }

void stop_signal_watch::finish() noexcept {
  if (!active_) return;
  active_ = false;
  fd_ = -1;
  int sig = 0;
  {
    std::lock_guard<std::mutex> guard(watch_mutex);
    if (--watch_count > 0) return;
    restore_actions();
    sig = caught_signal.exchange(0);
  }
  if (sig != 0) ::raise(sig);
}

}  // namespace tokenlock::detail::posix
