#include "child.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <stdexcept>

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

namespace tokenlock::testing {

start_barrier::start_barrier() {
  if (::pipe2(fds_, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
}

start_barrier::~start_barrier() {
  ::close(fds_[0]);
  if (fds_[1] >= 0) ::close(fds_[1]);
}

void start_barrier::open_gate() {
  ::close(fds_[1]);
  fds_[1] = -1;
}

child::child(const std::vector<std::string>& argv, const start_barrier* barrier) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe2");
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork");
  if (pid_ == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    if (barrier) ::dup2(barrier->read_fd(), 3);  // dup2 clears FD_CLOEXEC
    ::execv(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  in_ = in[1];
  out_ = out[0];
}

child::child(child&& other) noexcept
    : pid_(other.pid_), in_(other.in_), out_(other.out_), buffer_(std::move(other.buffer_)) {
  other.pid_ = -1;
  other.in_ = other.out_ = -1;
}

child::~child() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    wait();
  }
  if (in_ >= 0) ::close(in_);
  if (out_ >= 0) ::close(out_);
}

std::string child::read_line(std::chrono::milliseconds timeout) {
  const std::int64_t deadline = monotonic_ns() + timeout.count() * 1000000LL;
  for (;;) {
    auto nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    std::int64_t left_ms = (deadline - monotonic_ns()) / 1000000;
    if (left_ms <= 0) throw std::runtime_error("child " + std::to_string(pid_) + ": no line in time");
    pollfd p{out_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left_ms));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[512];
    ssize_t n = ::read(out_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error("child " + std::to_string(pid_) + ": stdout closed");
    buffer_.append(buf, static_cast<size_t>(n));
  }
}

void child::write_line(const std::string& line) {
  std::string s = line + "\n";
  if (::write(in_, s.data(), s.size()) != static_cast<ssize_t>(s.size()))
    throw std::runtime_error("write to child");
}

void child::signal(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

int child::wait() {
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  return status;
}

bool child::wait_stopped() {
  int status = 0;
  while (::waitpid(pid_, &status, WUNTRACED) < 0 && errno == EINTR) {
  }
  if (WIFSTOPPED(status)) return true;
  pid_ = -1;
  return false;
}

int child::wait_continuing() {
  for (;;) {
    int status = 0;
    if (::waitpid(pid_, &status, WUNTRACED) < 0) {
      if (errno == EINTR) continue;
      pid_ = -1;
      return status;
    }
    if (!WIFSTOPPED(status)) {
      pid_ = -1;
      return status;
    }
    ::kill(pid_, SIGCONT);
  }
}

child::state child::poll(int& status) {
  status = 0;
  const pid_t r = ::waitpid(pid_, &status, WUNTRACED | WNOHANG);
  if (r == 0) return state::running;
  if (r == pid_ && WIFSTOPPED(status)) return state::stopped;
  pid_ = -1;
  return state::ended;
}

std::string run_in_child(const std::function<std::string()>& body, int& exit_status) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork");
  if (pid == 0) {
    ::close(fds[0]);
    int code = 0;
    try {
      std::string report = body();
      if (::write(fds[1], report.data(), report.size()) < 0) code = 2;
    } catch (...) {
      code = 2;
    }
    ::_exit(code);
  }
  ::close(fds[1]);
  std::string report;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) report.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  while (::waitpid(pid, &exit_status, 0) < 0 && errno == EINTR) {
  }
  return report;
}

command_result run_command(const std::vector<std::string>& argv, const std::string& input,
                           int uid) {
  ::signal(SIGPIPE, SIG_IGN);  // the command may exit before reading all input
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe2");
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork");
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    if (uid >= 0 && (::setgid(static_cast<gid_t>(uid)) != 0 || ::setuid(static_cast<uid_t>(uid)) != 0))
      ::_exit(125);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  // Feed and drain together, so that neither side blocks on a full pipe.
  command_result r;
  std::size_t fed = 0;
  if (input.empty()) {
    ::close(in[1]);
    in[1] = -1;
  }
  bool out_open = true, err_open = true;
  while (out_open || err_open || in[1] >= 0) {
    pollfd p[3];
    int n = 0;
    if (out_open) p[n++] = {out[0], POLLIN, 0};
    if (err_open) p[n++] = {err[0], POLLIN, 0};
    if (in[1] >= 0) p[n++] = {in[1], POLLOUT, 0};
    if (::poll(p, static_cast<nfds_t>(n), -1) < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      if (!p[i].revents) continue;
      if (p[i].fd == in[1]) {
        ssize_t w = ::write(in[1], input.data() + fed, input.size() - fed);
        if (w > 0) fed += static_cast<std::size_t>(w);
        if (w < 0 || fed == input.size()) {
          ::close(in[1]);
          in[1] = -1;
        }
        continue;
      }
      char buf[4096];
      ssize_t got = ::read(p[i].fd, buf, sizeof buf);
      if (got <= 0) {
        ::close(p[i].fd);
        (p[i].fd == out[0] ? out_open : err_open) = false;
      } else {
        (p[i].fd == out[0] ? r.out : r.err).append(buf, static_cast<std::size_t>(got));
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::int64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

}  // namespace tokenlock::testing
