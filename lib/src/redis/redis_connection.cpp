#include "redis/redis_connection.hpp"

#include <cerrno>
#include <charconv>
#include <cstring>

#include <netdb.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "posix/os.hpp"
#include "net/socket_io.hpp"

// Defined only in the statically linked programs (lib/static/
// numeric_resolver.cpp, which replaces their name resolution): why a host
// name did not resolve there. Weak, so elsewhere it is null.
extern "C" const char* tokenlock_static_resolver_note() __attribute__((weak));

namespace tokenlock::detail {

void reply_deleter::operator()(redisReply* r) const noexcept { freeReplyObject(r); }

namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

std::uint64_t fork_generation() { return system_os()->fork_generation(); }

// A command in the protocol's request form: an array of bulk strings.
// Written here rather than by redisFormatCommandArgv, whose sprintf per
// argument cost the client more than the rest of a lock cycle.
void encode_command(const std::string_view* argv, std::size_t argc, std::string& out) {
  out.clear();
  char num[24];
  auto append_header = [&](char kind, std::size_t n) {
    out.push_back(kind);
    const auto r = std::to_chars(num, num + sizeof num, n);
    out.append(num, r.ptr);
    out.append("\r\n", 2);
  };
  append_header('*', argc);
  for (std::size_t i = 0; i < argc; ++i) {
    append_header('$', argv[i].size());
    out.append(argv[i]);
    out.append("\r\n", 2);
  }
}

// What to do about an error reply, where it is known.
std::string hint_for(std::string_view reply) {
  auto starts = [&](std::string_view p) { return reply.substr(0, p.size()) == p; };
  if (starts("WRONGPASS") || starts("ERR invalid password") || starts("ERR AUTH") ||
      starts("ERR Client sent AUTH"))
    return "; check the user and password in the URL (redis://user:password@host)";
  // Redis 7 answers a long command from a client that has not logged in
  // with a protocol error instead of NOAUTH.
  if (starts("NOAUTH") || starts("ERR Protocol error: unauthenticated"))
    return "; the server requires a password: give it in the URL (redis://:password@host)";
  if (starts("READONLY"))
    return "; the URL names a read-only replica: point it at the primary";
  if (starts("OOM")) return "; the server is out of memory (maxmemory): free memory or raise it";
  if (starts("NOPERM"))
    return "; the user lacks a permission: allow EVAL, EVALSHA, BLPOP, WAIT, DEL and the "
           "lock's keys in its ACL";
  if (starts("ERR DB index") || starts("ERR invalid DB"))
    return "; the database number in the URL does not exist on the server";
  return {};
}

// The bounds of a reply (docs/redis.md, Limits): every reply of the lock
// is a few hundred bytes, so a server that sends more is not one to trust.
// Bytes are counted as they arrive, so that a bulk or a line announced
// larger never grows the client's memory past the bound.
constexpr std::size_t max_reply_bytes = std::size_t(1) << 20;
constexpr int max_reply_elements = 1024;

thread_local bool array_refused = false;
void* (*hiredis_array)(const redisReadTask*, int) = nullptr;

// hiredis' own array object, unless the count announced is over the bound:
// hiredis allocates the array for the count it reads, before its elements
// arrive.
void* bounded_array(const redisReadTask* task, int elements) {
  if (elements > max_reply_elements) {
    array_refused = true;
    return nullptr;  // hiredis: an error, and the reader stops
  }
  return hiredis_array(task, elements);
}

// hiredis' reply functions with the array bound, made from the first
// reader's (hiredis keeps its table to itself).
redisReplyObjectFunctions* bounded_functions(const redisReplyObjectFunctions* hiredis_own) {
  static redisReplyObjectFunctions table = [&] {
    redisReplyObjectFunctions t = *hiredis_own;
    hiredis_array = t.createArray;
    t.createArray = bounded_array;
    return t;
  }();
  return &table;
}

enum class read_outcome { reply, timed_out, closed, failed, not_resp, too_large };

// Reads one reply into `raw` by `deadline`, whatever the server sends:
// the deadline is checked at every read, while bytes keep arriving too,
// and the reply is bounded (max_reply_bytes, max_reply_elements).
// `saved` is the errno of a failed read.
read_outcome read_reply(redisContext* c, std::chrono::steady_clock::time_point deadline, void*& raw,
                        int& saved) {
  char buf[16384];
  std::size_t total = 0;
  array_refused = false;
  for (;;) {
    if (redisReaderGetReply(c->reader, &raw) != REDIS_OK)
      return array_refused ? read_outcome::too_large : read_outcome::not_resp;
    if (raw) return read_outcome::reply;
    if (total > max_reply_bytes) return read_outcome::too_large;
    std::size_t n = 0;
    saved = posix::recv_by(c->fd, buf, sizeof buf, n, deadline);
    if (saved == ETIMEDOUT) return read_outcome::timed_out;
    if (saved != 0) return read_outcome::failed;
    if (n == 0) return read_outcome::closed;
    if (redisReaderFeed(c->reader, buf, n) != REDIS_OK) return read_outcome::not_resp;
    total += n;
  }
}

bool name_not_resolved(const char* errstr) {
  for (int e : {EAI_NONAME, EAI_NODATA, EAI_AGAIN, EAI_FAIL})
    if (std::strcmp(errstr, gai_strerror(e)) == 0) return true;
  return false;
}

}  // namespace

redis_connection::redis_connection(std::string url, std::chrono::milliseconds connect_timeout,
                                   std::chrono::milliseconds command_timeout)
    : url_(std::move(url)), connect_timeout_(connect_timeout), command_timeout_(command_timeout) {}

redis_connection::~redis_connection() { close(); }

void redis_connection::close() noexcept {
  if (ctx_) redisFree(ctx_);
  ctx_ = nullptr;
}

std::string redis_connection::server() const {
  return parsed_ && parse_error_.empty() ? endpoint_.display() : std::string("the Redis server");
}

std::string shell_word(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789-_.:/@%+=,") == std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string redis_connection::cli_command() const {
  if (!parsed_ || !parse_error_.empty()) return "redis-cli";
  const redis_endpoint& e = endpoint_;
  std::string c = e.unix_socket ? "redis-cli -s " + shell_word(e.path)
                                : "redis-cli -h " + shell_word(e.host) + " -p " + std::to_string(e.port);
  if (e.db != 0) c += " -n " + std::to_string(e.db);
  if (!e.user.empty()) c += " --user " + shell_word(e.user);
  if (e.has_password) c += " --askpass";
  return c;
}

failure redis_connection::io_failure(const char* step, const std::string& what, int err,
                                     int saved_errno) {
  // hiredis reports a timeout as an I/O error with EAGAIN.
  std::error_code ec;
  std::string cause;
  if (err == REDIS_ERR_IO && (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK ||
                              saved_errno == ETIMEDOUT || saved_errno == EINPROGRESS)) {
    ec = std::make_error_code(std::errc::timed_out);
    cause = "no answer in time";
  } else if (err == REDIS_ERR_IO && saved_errno != 0) {
    ec = std::error_code(saved_errno, std::generic_category());
    cause = ec.message();
  } else if (err == REDIS_ERR_EOF) {
    ec = std::make_error_code(std::errc::connection_reset);
    cause = "the server closed the connection";
  } else {
    ec = std::make_error_code(std::errc::io_error);
    cause = ctx_ && ctx_->errstr[0] ? ctx_->errstr : "unknown hiredis error";
  }
  std::string msg = "tokenlock: " + std::string(step) + " " + server() + ": " + what + ": " + cause;
  if (ec == std::errc::connection_refused)
    msg += "; is redis-server running there, and is the port right?";
  close();  // a link in an unknown state is not reused
  return make_failure(ec, msg);
}

failure redis_connection::bad_reply(const char* step, std::string_view what) {
  const std::string why =
      array_refused ? "an array of more than " + std::to_string(max_reply_elements) + " elements"
      : ctx_->reader->err != 0 && !(ctx_->reader->err == REDIS_ERR_OOM)
          ? std::string("not the Redis protocol (") + ctx_->reader->errstr + ")"
          : "a reply longer than 1 MiB (a bulk, a line or the whole reply)";
  std::string msg = "tokenlock: " + std::string(step) + " " + server() + ": " + std::string(what) +
                    ": the server sent " + why +
                    ", which no reply of the lock is: is this a Redis server, and the port right?";
  close();  // the rest of the reply is unread: the link is not reused
  return make_failure(std::make_error_code(std::errc::protocol_error), msg);
}

failure redis_connection::connect(const char* step) {
  if (!parsed_) {
    parse_error_ = parse_redis_url(url_, endpoint_);
    parsed_ = true;
  }
  if (!parse_error_.empty())
    return make_failure(errc::bad_argument,
                        "tokenlock: " + std::string(step) + ": bad Redis URL \"" +
                            redis_url_for_message(url_) + "\": " + parse_error_ +
                            " (percent-encode '%', '@', ':', '/', '?' and '#' in the user and "
                            "password)");
  if (ctx_ && fork_generation_ != fork_generation()) {
    // The parent's socket: closing our copy leaves its link alone.
    close();
  }
  if (ctx_) return {};
  if (failure f = open_link(step)) return f;
  redisSetTimeout(ctx_, to_timeval(command_timeout_));
  ctx_->reader->fn = bounded_functions(ctx_->reader->fn);
  return handshake();
}

failure redis_connection::open_link(const char* step) {
  const timeval tv = to_timeval(connect_timeout_);
  errno = 0;
  redisContext* c = endpoint_.unix_socket
                        ? redisConnectUnixWithTimeout(endpoint_.path.c_str(), tv)
                        : redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port, tv);
  const int saved = errno;
  if (!c) return make_failure(std::make_error_code(std::errc::not_enough_memory),
                              "tokenlock: " + std::string(step) + " " + server() +
                                  ": cannot allocate a connection");
  ctx_ = c;
  fork_generation_ = fork_generation();
  if (c->err && name_not_resolved(c->errstr)) {
    // A host name that did not resolve (hiredis keeps gai_strerror's text).
    std::string msg = "tokenlock: " + std::string(step) + " " + server() +
                      ": cannot connect: cannot resolve the host name \"" + endpoint_.host +
                      "\" (" + c->errstr + "); ";
    msg += tokenlock_static_resolver_note ? tokenlock_static_resolver_note()
                                          : "is the host name in the URL right?";
    close();
    return make_failure(std::make_error_code(std::errc::host_unreachable), msg);
  }
  if (c->err) {
    // hiredis keeps the connect error's text, not its errno.
    int e = saved;
    if (std::strstr(c->errstr, "refused")) e = ECONNREFUSED;
    else if (std::strstr(c->errstr, "timed out")) e = ETIMEDOUT;
    else if (std::strstr(c->errstr, "No such file")) e = ENOENT;
    else if (std::strstr(c->errstr, "ermission")) e = EACCES;
    const int err = c->err;
    std::string text = c->errstr;
    failure f = io_failure(step, "cannot connect", err, e);
    if (f.code == std::errc::io_error) f.message += " (" + text + ")";
    return f;
  }
  return {};
}

failure redis_connection::handshake() {
  if (endpoint_.has_password) {
    // AUTH [user] password
    std::string_view auth[] = {"AUTH", endpoint_.user, endpoint_.password};
    std::size_t n = 3;
    if (endpoint_.user.empty()) {
      auth[1] = endpoint_.password;
      n = 2;
    }
    reply_ptr r;
    if (failure f = command("authenticate", auth, n, r)) {
      close();
      return f;
    }
  }
  if (endpoint_.db != 0) {
    reply_ptr r;
    if (failure f = command("select the database", {"SELECT", std::to_string(endpoint_.db)}, r)) {
      close();
      return f;
    }
  }
  return {};
}

failure redis_connection::command(const char* step, std::initializer_list<std::string_view> argv,
                                  reply_ptr& out, std::chrono::milliseconds timeout) {
  return command(step, argv.begin(), argv.size(), out, timeout);
}

failure redis_connection::command(const char* step, const std::string_view* argv,
                                  std::size_t argc, reply_ptr& out,
                                  std::chrono::milliseconds timeout) {
  out.reset();
  bool fresh = false;
  if (!ctx_ || fork_generation_ != fork_generation()) {
    if (failure f = connect(step)) return f;
    fresh = true;
  }
  const bool custom = timeout.count() > 0 && timeout != command_timeout_;
  if (custom) redisSetTimeout(ctx_, to_timeval(timeout));
  // The command is sent here, not by hiredis: its write(2) would raise
  // SIGPIPE on a link the server closed (posix::send_all). hiredis then only
  // reads the reply, from a socket whose buffer it has nothing to flush.
  encode_command(argv, argc, wire_);
  int err = 0;
  int saved = posix::send_all(ctx_->fd, wire_.data(), wire_.size());
  void* raw = nullptr;
  if (saved != 0) {
    err = REDIS_ERR_IO;
  } else {
    if (after_send_) after_send_();
    const auto deadline = std::chrono::steady_clock::now() + (custom ? timeout : command_timeout_);
    switch (read_reply(ctx_, deadline, raw, saved)) {
      case read_outcome::reply: break;
      case read_outcome::timed_out: err = REDIS_ERR_IO, saved = EAGAIN; break;
      case read_outcome::closed: err = REDIS_ERR_EOF; break;
      case read_outcome::failed: err = REDIS_ERR_IO; break;
      case read_outcome::not_resp:
      case read_outcome::too_large: return bad_reply(step, argc == 0 ? "command" : argv[0]);
    }
  }
  if (!raw) {
    // A link that sat idle may have been closed by the server (a restart,
    // a failover, a timeout): the command never reached it. Once, on a new
    // link; every script of the lock is safe to run twice.
    const bool broken = err == REDIS_ERR_EOF ||
                        (err == REDIS_ERR_IO && (saved == ECONNRESET || saved == EPIPE));
    if (!fresh && broken) {
      close();
      return command(step, argv, argc, out, timeout);
    }
    return io_failure(step, argc == 0 ? std::string("command") : std::string(argv[0]), err, saved);
  }
  if (custom) redisSetTimeout(ctx_, to_timeval(command_timeout_));
  out.reset(static_cast<redisReply*>(raw));
  if (out->type == REDIS_REPLY_ERROR) {
    const std::string text(out->str, out->len);
    return make_failure(errc::server_error, "tokenlock: " + std::string(step) + " " + server() +
                                                ": the server answered \"" + text + "\"" +
                                                hint_for(text));
  }
  return {};
}

failure redis_connection::eval(const char* step, const redis_script& script,
                               std::initializer_list<std::string_view> keys,
                               std::initializer_list<std::string_view> args, reply_ptr& out) {
  // EVALSHA sha numkeys key... arg...: every lock script has at most 7 keys
  // and 6 arguments.
  constexpr std::size_t most = 16;
  if (3 + keys.size() + args.size() > most)
    return make_failure(errc::bad_argument,
                        "tokenlock: " + std::string(step) + ": too many script arguments");
  char numkeys[24];
  const auto n = std::to_chars(numkeys, numkeys + sizeof numkeys, keys.size());
  std::string_view argv[most];
  std::size_t argc = 0;
  argv[argc++] = "EVALSHA";
  argv[argc++] = script.sha1;
  argv[argc++] = std::string_view(numkeys, static_cast<std::size_t>(n.ptr - numkeys));
  for (std::string_view k : keys) argv[argc++] = k;
  for (std::string_view a : args) argv[argc++] = a;
  failure f = command(step, argv, argc, out);
  if (f && f.code == errc::server_error && f.message.find("\"NOSCRIPT") != std::string::npos) {
    // A restarted or flushed server forgot it: EVAL loads it again.
    argv[0] = "EVAL";
    argv[1] = script.body;
    f = command(step, argv, argc, out);
  }
  return f;
}

}  // namespace tokenlock::detail
