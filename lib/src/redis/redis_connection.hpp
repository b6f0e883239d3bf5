// One connection to a Redis server, made on first use and remade after a
// fork or a broken link: commands with timeouts, scripts by SHA1 (loaded on
// NOSCRIPT), and errors that name the server and the step.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "core/failure.hpp"
#include "redis/redis_url.hpp"

struct redisContext;
struct redisReply;

namespace tokenlock::detail {

struct reply_deleter {
  void operator()(redisReply* r) const noexcept;
};
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

// A Lua script and its SHA-1 (hex), the name the server caches it under:
// both written at build time (redis/redis_scripts.hpp).
struct redis_script {
  std::string_view body;
  std::string_view sha1;
};

// A word for a POSIX shell (a fix a message proposes): single-quoted
// unless it is plainly safe.
std::string shell_word(const std::string& s);

class redis_connection {
 public:
  // `url` is parsed by the first command (a bad URL fails it with
  // bad_argument).
  redis_connection(std::string url, std::chrono::milliseconds connect_timeout,
                   std::chrono::milliseconds command_timeout);
  ~redis_connection();
  redis_connection(const redis_connection&) = delete;
  redis_connection& operator=(const redis_connection&) = delete;

  // Runs one command and waits up to `timeout` (0: the command timeout) for
  // its whole reply, whatever the server sends: a reply that is not RESP,
  // longer than 1 MiB or an array of more than 1024 elements is a
  // protocol_error (docs/redis.md, Limits). An error reply is a failure (server_error). `step` names
  // what the command is for, in messages. The arguments are views: nothing
  // is copied on the way to the socket.
  failure command(const char* step, std::initializer_list<std::string_view> argv, reply_ptr& out,
                  std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  failure command(const char* step, const std::string_view* argv, std::size_t argc,
                  reply_ptr& out, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  // EVALSHA, and EVAL when the server does not know the script.
  failure eval(const char* step, const redis_script& script,
               std::initializer_list<std::string_view> keys,
               std::initializer_list<std::string_view> args, reply_ptr& out);

  // For messages: the server without credentials ("redis://host:port").
  std::string server() const;
  // For fixes in messages: the redis-cli command line that reaches the
  // same server and database ("redis-cli -h 127.0.0.1 -p 6379 -n 2"), with
  // --user and --askpass where the URL has credentials (never the
  // password itself).
  std::string cli_command() const;
  // Closes the link (the next command reconnects).
  void close() noexcept;
  // Called after each command is written, before its reply is read (the
  // fairness tests mark when a waiter's BLPOP reached the server's socket).
  void after_send(void (*hook)()) noexcept { after_send_ = hook; }

 private:
  failure connect(const char* step);
  // The socket (ctx_), or a failure that says why not: a name that does
  // not resolve, a refused or timed-out connect, a missing socket file.
  failure open_link(const char* step);
  // AUTH and SELECT as the URL asks; the link is closed when either fails.
  failure handshake();
  failure io_failure(const char* step, const std::string& what, int err, int saved_errno);
  // A reply that is not RESP or is over the bounds; closes the link.
  failure bad_reply(const char* step, std::string_view what);

  std::string url_;
  redis_endpoint endpoint_;
  bool parsed_ = false;
  std::string parse_error_;
  std::chrono::milliseconds connect_timeout_, command_timeout_;
  redisContext* ctx_ = nullptr;
  std::string wire_;  // the last command as sent, kept for its capacity
  std::uint64_t fork_generation_ = 0;
  void (*after_send_)() = nullptr;
};

}  // namespace tokenlock::detail
