// A real redis-server for the tests: started on 127.0.0.1 with a free port
// and on a unix socket in a temporary directory, without persistence,
// waited for through its systemd readiness notification (NOTIFY_SOCKET:
// no polling), and stopped by its pid.
#pragma once

#include <string>
#include <vector>

#include <sys/types.h>

#include "temp_dir.hpp"

namespace tokenlock::testing {

class redis_server {
 public:
  // Empty when redis-server can be run here; otherwise why not (the test is
  // then skipped with that reason).
  static std::string unavailable();

  // Starts the server; `extra` are more redis-server arguments
  // ("--requirepass", "secret", ...). Throws when it does not come up.
  explicit redis_server(std::vector<std::string> extra = {});
  ~redis_server();  // SIGTERM, then waits; SIGKILL after 10 s
  redis_server(const redis_server&) = delete;
  redis_server& operator=(const redis_server&) = delete;

  int port() const { return port_; }
  const std::string& socket_path() const { return socket_; }
  std::string url(const std::string& credentials = {}, int db = 0) const;
  std::string unix_url(int db = 0) const;
  pid_t pid() const { return pid_; }

  void kill_hard();  // SIGKILL and reap (a crash)
  void restart();    // a new process on the same port and socket, empty
  void stop_answering();  // SIGSTOP
  void resume();          // SIGCONT
  // Renames the unix socket to `path` (over whatever is there): the server
  // takes over that address.
  void move_socket_to(const std::string& path);

  // A command through redis-cli, for inspecting what the lock left:
  // its output without the trailing newline.
  std::string cli(const std::vector<std::string>& args) const;
  // Whether `replicas` replicas have everything written so far, by any
  // client: a marker is written and WAITed for on one connection (WAIT
  // counts only its own connection's writes, and the replication stream is
  // in order). Waits at most 20 s.
  bool replicas_caught_up(int replicas) const;

 private:
  void start();
  temp_dir dir_;
  std::vector<std::string> extra_;
  std::string socket_;
  int port_ = 0;
  pid_t pid_ = -1;
};

// A TCP port on 127.0.0.1 where nothing listens (for unreachable servers).
int free_port();

}  // namespace tokenlock::testing
