#include "redis_server.hpp"

#include "ports.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

namespace tokenlock::testing {

namespace {

bool on_path(const char* program) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::string p(path);
  std::size_t start = 0;
  while (start <= p.size()) {
    const std::size_t end = p.find(':', start);
    const std::string dir = p.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty() && ::access((dir + "/" + program).c_str(), X_OK) == 0) return true;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return false;
}

pid_t spawn(const std::vector<std::string>& argv, const std::string& notify) {
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    if (!notify.empty()) ::setenv("NOTIFY_SOCKET", notify.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

}  // namespace

std::string redis_server::unavailable() {
  if (!on_path("redis-server")) return "redis-server is not installed (scripts/install-deps installs it)";
  if (!on_path("redis-cli")) return "redis-cli is not installed (package redis-tools)";
  return {};
}

int free_port() { return reserve_port(); }

redis_server::redis_server(std::vector<std::string> extra) : extra_(std::move(extra)) {
  socket_ = (dir_ / "redis.sock").string();
  port_ = free_port();
  start();
}

redis_server::~redis_server() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGCONT);
  ::kill(pid_, SIGTERM);
  int status = 0;
  ::waitpid(pid_, &status, 0);
}

void redis_server::start() {
  // Readiness: redis-server sends "READY=1" to NOTIFY_SOCKET when it
  // accepts connections (--supervised systemd).
  const std::string notify = (dir_ / "notify").string();
  ::unlink(notify.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, notify.c_str(), sizeof a.sun_path - 1);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    throw std::runtime_error("cannot bind the notify socket " + notify);
  std::vector<std::string> argv{"redis-server", "--port", std::to_string(port_), "--bind",
                                "127.0.0.1", "--unixsocket", socket_, "--unixsocketperm", "700",
                                "--save", "", "--appendonly", "no", "--dir", dir_.path().string(),
                                "--logfile", (dir_ / "redis.log").string(), "--supervised",
                                "systemd", "--daemonize", "no",
                                // A replica's first synchronisation without
                                // the default 5 s pause for more replicas.
                                "--repl-diskless-sync-delay", "0"};
  argv.insert(argv.end(), extra_.begin(), extra_.end());
  pid_ = spawn(argv, notify);
  bool ready = false;
  char buf[512];
  pollfd p{fd, POLLIN, 0};
  while (!ready && ::poll(&p, 1, 10000) == 1) {
    const ssize_t n = ::recv(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) break;
    buf[n] = '\0';
    ready = std::strstr(buf, "READY=1") != nullptr;
  }
  ::close(fd);
  if (!ready) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    throw std::runtime_error("redis-server did not report ready within 10 s (see " +
                             (dir_ / "redis.log").string() + ")");
  }
}

std::string redis_server::url(const std::string& credentials, int db) const {
  return "redis://" + (credentials.empty() ? std::string() : credentials + "@") + "127.0.0.1:" +
         std::to_string(port_) + (db ? "/" + std::to_string(db) : std::string());
}

std::string redis_server::unix_url(int db) const {
  return "unix://" + socket_ + (db ? "?db=" + std::to_string(db) : std::string());
}

void redis_server::kill_hard() {
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void redis_server::restart() {
  if (pid_ > 0) kill_hard();
  start();
}

void redis_server::stop_answering() { ::kill(pid_, SIGSTOP); }

void redis_server::move_socket_to(const std::string& path) {
  if (std::rename(socket_.c_str(), path.c_str()) != 0)
    throw std::runtime_error("cannot rename " + socket_ + " to " + path);
  socket_ = path;
}
void redis_server::resume() { ::kill(pid_, SIGCONT); }

std::string redis_server::cli(const std::vector<std::string>& args) const {
  auto quoted = [](const std::string& a) {
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  std::string cmd = "redis-cli -s " + quoted(socket_);
  for (const auto& a : args) cmd += " " + quoted(a);
  std::string out;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[256];
  while (std::fgets(buf, sizeof buf, f)) out += buf;
  ::pclose(f);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool redis_server::replicas_caught_up(int replicas) const {
  const std::string cmd = "printf 'SET tokenlock-test:replication-marker 1\\nWAIT " +
                          std::to_string(replicas) + " 20000\\n' | redis-cli -s '" + socket_ + "'";
  std::string out;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return false;
  char buf[256];
  while (std::fgets(buf, sizeof buf, f)) out = buf;  // the last line: WAIT's answer
  ::pclose(f);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out == std::to_string(replicas);
}

}  // namespace tokenlock::testing
