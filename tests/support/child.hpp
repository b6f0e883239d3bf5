// Real child processes for the multi-process tests: fork + exec with pipes
// on stdin and stdout, and an optional start barrier on fd 3 (the children
// block reading it until the parent closes the write end, so they all start
// at once). Lines on stdout are how children tell the parent where they are:
// no test waits for another process by sleeping.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace tokenlock::testing {

class start_barrier {
 public:
  start_barrier();
  ~start_barrier();
  int read_fd() const { return fds_[0]; }
  void open_gate();  // closes the write end: every waiting child proceeds

 private:
  int fds_[2];
};

class child {
 public:
  child(const std::vector<std::string>& argv, const start_barrier* barrier = nullptr);
  ~child();  // kills (SIGKILL) and reaps a child that is still running
  child(child&& other) noexcept;
  child(const child&) = delete;
  child& operator=(const child&) = delete;

  pid_t pid() const { return pid_; }
  // The next line of the child's stdout without its newline; throws on EOF
  // or when `timeout` passes (a safety net for a broken test, not a wait).
  std::string read_line(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  void write_line(const std::string& line);
  void signal(int sig);
  // Waits for the child to end; returns its wait status.
  int wait();
  // Waits until the child is stopped (SIGSTOP, raised by itself or sent);
  // false if it ended instead.
  bool wait_stopped();
  // Waits for the child to end, continuing it (SIGCONT) whenever it stops
  // itself meanwhile; returns its wait status.
  int wait_continuing();
  // Its state now, without waiting: stopped, running, or ended (then
  // reaped, with its wait status in `status`).
  enum class state { running, stopped, ended };
  state poll(int& status);
  bool running() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  std::string buffer_;
};

std::int64_t monotonic_ns();

// Runs `body` in a forked child (to change limits or users without
// touching the test process) and returns the text it returned. `exit_status`
// is the child's wait status: exit 0 after body returned, 2 if it threw.
std::string run_in_child(const std::function<std::string()>& body, int& exit_status);

// A finished command: its wait status decoded, and what it printed.
struct command_result {
  int exit_code = -1;  // exit status, or 128+N when killed by signal N
  std::string out, err;
};

// Runs argv to completion with `input` on its standard input; with a uid,
// as that user (and group). Both outputs are collected in full.
command_result run_command(const std::vector<std::string>& argv, const std::string& input = {},
                           int uid = -1);

}  // namespace tokenlock::testing
