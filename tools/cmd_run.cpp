// run: a command under the lock, with its lease kept alive.
//
// CMD's process is forked before the lock is taken, and waits on a pipe
// until the lock is held; with a lock directory the token names that
// process (lock_options::owner_pid). It dies with run (PR_SET_PDEATHSIG),
// and the lock counts as held while it lives, so CMD never runs on without
// the lock when run is killed: until CMD's process is dead the lock is its
// own, and once it is dead the lock is free. tokenlock(1), run, says what
// this does not cover.
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <iostream>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.hpp"
#include "commands.hpp"
#include "lock_target.hpp"
#include "tokenlock/tokenlock.hpp"

namespace tokenlock::cli {
namespace {

constexpr int forwarded[] = {SIGTERM, SIGINT, SIGHUP};

void on_sigchld(int) {}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

int code_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status)
         : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                               : exit_code::software;
}

// The signals run takes with sigtimedwait while CMD runs (no handler runs
// asynchronously), and the mask CMD gets back.
struct signal_plan {
  sigset_t waited;  // SIGCHLD and the forwarded ones
  sigset_t before;  // the mask run started with
};

// SIGCHLD is blocked from before the fork, so that CMD ending while the
// lock is still being acquired is seen by the first sigtimedwait. The
// forwarded signals stay deliverable until the lock is held: run can be
// interrupted while it waits, and CMD's process then dies with it.
signal_plan block_sigchld() {
  signal_plan p;
  sigemptyset(&p.waited);
  sigaddset(&p.waited, SIGCHLD);
  for (int s : forwarded) sigaddset(&p.waited, s);
  struct sigaction sa {};
  sa.sa_handler = on_sigchld;  // SIGCHLD's default is to discard it
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGCHLD, &sa, nullptr);
  sigset_t child;
  sigemptyset(&child);
  sigaddset(&child, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &child, &p.before);
  return p;
}

// CMD's process, between the fork and the lock: it waits for a byte on a
// pipe, then execs CMD. It never execs without that byte.
class command_process {
 public:
  explicit command_process(const std::vector<std::string>& command) : name_(escaped(command[0])) {
    for (const auto& s : command) argv_.push_back(const_cast<char*>(s.c_str()));
    argv_.push_back(nullptr);
  }
  ~command_process() {
    if (go_fd_ >= 0) ::close(go_fd_);
  }
  command_process(const command_process&) = delete;
  command_process& operator=(const command_process&) = delete;

  // Forks; false (errno set) when that fails.
  bool start(const sigset_t& exec_mask) {
    int go[2];
    if (::pipe2(go, O_CLOEXEC) != 0) return false;
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(go[1]);
      in_child(parent, go[0], exec_mask);
    }
    const int e = errno;
    ::close(go[0]);
    if (pid_ < 0) {
      ::close(go[1]);
      errno = e;
      return false;
    }
    go_fd_ = go[1];
    return true;
  }

  pid_t pid() const { return pid_; }

  // The lock is held: CMD may start.
  void go() {
    const char byte = 'g';
    while (::write(go_fd_, &byte, 1) < 0 && errno == EINTR) {
    }
    ::close(go_fd_);
    go_fd_ = -1;
  }

  // The lock was not obtained: the process is killed before CMD starts.
  void abandon() {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }

 private:
  [[noreturn]] void in_child(pid_t parent, int go_fd, const sigset_t& exec_mask) {
    // Dies with run. If run died before this call, the parent is already
    // another process: give up at once.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(exit_code::software);
    char byte = 0;
    ssize_t n;
    while ((n = ::read(go_fd, &byte, 1)) < 0 && errno == EINTR) {
    }
    if (n != 1) ::_exit(exit_code::software);  // run gave up: CMD never starts
    restore_sigxfsz();
    ::sigprocmask(SIG_SETMASK, &exec_mask, nullptr);
    ::execvp(argv_[0], argv_.data());
    const int e = errno;
    const std::string text =
        "tokenlock run: cannot execute " + name_ + ": " + std::strerror(e) + "\n";
    if (::write(2, text.data(), text.size()) < 0) {
      // Nothing more can be said; the exit status says it.
    }
    ::_exit(e == ENOENT ? exit_code::not_found : exit_code::cannot_execute);
  }

  std::string name_;
  std::vector<char*> argv_;
  pid_t pid_ = -1;
  int go_fd_ = -1;
};

// A takeover that needs no ended lease can only follow the death of the
// token's owner, CMD's process (or a `break --force`), on a lock that frees
// itself when its owner dies. Found at release, while the lease still ran,
// it came after CMD ended: the next holder was quicker than run's release,
// and nothing ran without the lock. A taker judges a lease ended only when
// its clock is past the expiry by the skew allowance, and clocks differ by
// less than that: so the lease ran still if ours has not passed the expiry
// (a margin of the allowance too would misjudge every lease of 1 s or
// less). A server judges a grant by its lease only: a loss there is always
// one.
bool taken_after_command_ended(const lock& l, std::chrono::system_clock::time_point expires) {
  return l.features().frees_dead_owners && std::chrono::system_clock::now() < expires;
}

// Waits for CMD's process to end, passing on the forwarded signals and
// refreshing `h` every third of `lease`. Returns CMD's wait status; `lost`
// says whether a refresh found the lock lost.
int wait_for_command(handle& h, pid_t pid, const signal_plan& sp, const std::string& what,
                     const std::string& name, std::chrono::milliseconds lease, bool& lost) {
  using clock = std::chrono::steady_clock;
  const auto interval = std::max(std::chrono::milliseconds(1), lease / 3);
  auto next_refresh = clock::now() + interval;
  std::error_code ec;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(next_refresh - clock::now());
    if (left.count() < 0) left = std::chrono::nanoseconds(0);
    timespec ts{static_cast<time_t>(left.count() / 1000000000), static_cast<long>(left.count() % 1000000000)};
    siginfo_t info;
    const int sig = ::sigtimedwait(&sp.waited, &info, &ts);
    if (sig == SIGCHLD) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) return status;
      continue;
    }
    if (sig > 0) {
      ::kill(pid, sig);
      continue;
    }
    if (errno == EINTR) continue;
    // The lease's third has passed.
    next_refresh = clock::now() + interval;
    if (lost) continue;
    h.refresh(ec);
    if (ec == errc::lock_lost) {
      lost = true;
      std::cerr << escaped(last_error_message()) << "\ntokenlock run: the lock on " << escaped(what)
                << " was lost while " << name << " runs; it keeps running\n";
    } else if (ec) {
      std::cerr << escaped(last_error_message()) << " (will retry)\n";
    }
  }
}

// Runs CMD (its process already forked and waiting) while `h` holds the
// lock `l` (`what` names it in messages), and releases at the end.
int supervise(const lock& l, handle& h, command_process& cmd, const signal_plan& sp,
              const std::string& what, const std::string& name, std::chrono::milliseconds lease) {
  sigset_t all = sp.waited;
  ::sigprocmask(SIG_BLOCK, &all, nullptr);
  cmd.go();
  bool lost = false;
  const int status = wait_for_command(h, cmd.pid(), sp, what, name, lease, lost);
  ::sigprocmask(SIG_SETMASK, &sp.before, nullptr);

  const int code = code_of(status);
  std::error_code ec;
  if (!lost) {
    const auto expires = h.expires();
    h.release(ec);
    if (ec == errc::lock_lost && taken_after_command_ended(l, expires)) {
      ec.clear();
    } else if (ec == errc::lock_lost) {
      lost = true;
      std::cerr << escaped(last_error_message()) << "\n";
    }
  }
  if (lost) {
    const std::string line = "tokenlock run: the lock on " + escaped(what) + " was lost while " +
                             name + " ran (" + describe_status(status) + ")";
    std::cerr << line << "\n";
    note_failure(make_error_code(errc::lock_lost), line);
    return code != 0 ? code : exit_code::lost;
  }
  if (ec) {
    // The lock is not known to be free: say so, and never exit 0.
    const std::string line = "tokenlock run: " + name + " ended (" + describe_status(status) +
                             "), but the lock on " + escaped(what) +
                             " could not be released; its token names a process that is gone, "
                             "so the next process that may write there takes it over";
    std::cerr << escaped(last_error_message()) << "\n" << line << "\n";
    note_failure(ec, line);
    return code != 0 ? code : exit_code_for(ec);
  }
  return code;
}

// Forks CMD's process; on failure reports it and returns false with `code`.
bool start_command(command_process& cmd, const signal_plan& sp, int& code) {
  if (cmd.start(sp.before)) return true;
  const int e = errno;
  ::sigprocmask(SIG_SETMASK, &sp.before, nullptr);
  code = report(std::error_code(e, std::generic_category()),
                std::string("tokenlock: run: cannot fork: ") + std::strerror(e));
  return false;
}

// The lock was not obtained: CMD never starts.
int give_up(command_process& cmd, const signal_plan& sp, std::error_code ec, int conflict,
            bool verbose) {
  cmd.abandon();
  ::sigprocmask(SIG_SETMASK, &sp.before, nullptr);
  if ((ec == errc::busy || ec == errc::timed_out) && !verbose) {
    // Quiet, as flock(1) is; --errors=json still says what it was.
    note_failure(ec, escaped(last_error_message()));
    return conflict;
  }
  return report(ec, last_error_message(), conflict);
}

// CMD under the lock `spec` names. Its process is forked first: a lock
// directory's token names it (lock_options::owner_pid).
int run_locked(const std::string& spec, const std::vector<std::string>& command,
               open_options o, int conflict, bool verbose) {
  const signal_plan sp = block_sigchld();
  command_process cmd(command);
  int code = 0;
  if (!start_command(cmd, sp, code)) return code;
  o.directory.owner_pid = cmd.pid();
  std::error_code ec;
  std::unique_ptr<lock> l = open_lock(spec, o, ec);
  handle h;
  if (!ec) h = l->acquire(ec);
  if (ec) return give_up(cmd, sp, ec, conflict, verbose);
  print_notice(h);
  return supervise(*l, h, cmd, sp, l->spec(), escaped(command[0]), h.lease());
}

}  // namespace

namespace {

// CMD as given: after LOCKDIR, or flock(1)'s -c COMMAND (before LOCKDIR as
// an option, or right after it), run by /bin/sh -c.
std::vector<std::string> command_of(const po::variables_map& v,
                                    const std::vector<std::string>& after_dir) {
  if (v.count("unlock"))
    throw po::error("-u has no meaning here: a rename lock is held by its token, not by a "
                    "descriptor; release one with 'tokenlock release LOCKDIR TOKEN'");
  const bool c_after = !after_dir.empty() && (after_dir[0] == "-c" || after_dir[0] == "--command");
  if (v.count("command") && !after_dir.empty())
    throw po::error("-c COMMAND and a CMD after LOCKDIR exclude each other");
  if (v.count("command")) return {"/bin/sh", "-c", v["command"].as<std::string>()};
  if (c_after && after_dir.size() != 2)
    throw po::error("-c takes one COMMAND, quoted, and nothing after it");
  if (c_after) return {"/bin/sh", "-c", after_dir[1]};
  if (after_dir.empty()) throw po::error("CMD is missing");
  return after_dir;
}

}  // namespace

int cmd_run(const args& a) {
  po::options_description d = run_options();

  // Everything after LOCKDIR belongs to the command, untouched.
  const run_arguments split = split_run_arguments(a, d);
  const std::string& dir = split.dir;

  return with_command_line("run", split.options, d, {}, [&](const po::variables_map& v) {
    if (dir.empty()) throw po::error("LOCKDIR is missing");
    const std::vector<std::string> command = command_of(v, split.command);
    lock_options wait;
    const int conflict = apply_wait(v, wait);
    open_options o;
    o.wait = wait.wait;
    o.lease = lease_option(v["lease"].as<double>());
    // Checked before CMD's process is forked: a bad --dir-mode or group is
    // a usage error that leaves nothing behind.
    if (!names_server(v)) o.directory = directory_options(v, o.directory);
    apply_mode(v, o);
    const std::string spec = lock_spec_of(v, dir);
    return run_locked(spec, command, o, conflict, v.count("verbose") > 0);
  });
}

}  // namespace tokenlock::cli
