// run: a command under the lock, with its lease kept alive.
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <iostream>

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.hpp"
#include "commands.hpp"
#include "commands_redis.hpp"
#include "tokenlock/tokenlock.hpp"
#if TOKENLOCK_HAVE_REDIS
#include "tokenlock/redis_lock.hpp"
#endif

namespace tokenlock::cli {
namespace {

constexpr int forwarded[] = {SIGTERM, SIGINT, SIGHUP};

void on_sigchld(int) {}

int run_locked(const std::string& dir, const std::vector<std::string>& command,
               const lock_options& o, int conflict, bool verbose);

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace

int cmd_run(const args& a) {
  po::options_description d = run_options();

  // Everything after LOCKDIR belongs to the command, untouched.
  const run_arguments split = split_run_arguments(a, d);
  const std::string& dir = split.dir;
  const std::vector<std::string>& command = split.command;

  return with_command_line("run", split.options, d, {}, [&](const po::variables_map& v) {
    if (dir.empty()) throw po::error("LOCKDIR is missing");
    if (command.empty()) throw po::error("CMD is missing");
    lock_options o = legacy_applied(v);
    const int conflict = apply_wait(v, o);
    o.lease = seconds_option("lease", v["lease"].as<double>(), false);
    o.max_lease = std::max(o.max_lease, o.lease);
    if (v.count("redis"))
      return redis_run(v["redis"].as<std::string>(), dir, command, o.lease, o.wait, conflict,
                       v.count("verbose") > 0);
    return run_locked(dir, command, o, conflict, v.count("verbose") > 0);
  });
}

namespace {

// Runs `command` while `h` holds the lock (`what` names it in messages),
// refreshing every third of `lease`, and releases at the end. Handle: a
// lock_handle or a redis_handle.
template <class Handle>
int supervise(Handle& h, const std::string& what, const std::vector<std::string>& command,
              std::chrono::milliseconds lease) {
  std::error_code ec;
  // Signals are taken with sigtimedwait: no handler runs asynchronously.
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  for (int s : forwarded) sigaddset(&set, s);
  struct sigaction sa {};
  sa.sa_handler = on_sigchld;  // SIGCHLD's default is to discard it
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGCHLD, &sa, nullptr);
  ::sigprocmask(SIG_BLOCK, &set, &old);

  std::vector<char*> argv;
  for (auto& s : command) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    return report(std::error_code(errno, std::generic_category()),
                  std::string("tokenlock: run: cannot fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    ::execvp(argv[0], argv.data());
    const int e = errno;
    std::cerr << "tokenlock run: cannot execute " << command[0] << ": " << std::strerror(e) << "\n";
    ::_exit(e == ENOENT ? exit_code::not_found : exit_code::cannot_execute);
  }

  using clock = std::chrono::steady_clock;
  const auto interval = std::max(std::chrono::milliseconds(1), lease / 3);
  auto next_refresh = clock::now() + interval;
  bool lost = false;
  int status = 0;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(next_refresh - clock::now());
    if (left.count() < 0) left = std::chrono::nanoseconds(0);
    timespec ts{static_cast<time_t>(left.count() / 1000000000), static_cast<long>(left.count() % 1000000000)};
    siginfo_t info;
    const int sig = ::sigtimedwait(&set, &info, &ts);
    if (sig == SIGCHLD) {
      if (::waitpid(pid, &status, WNOHANG) == pid) break;
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
      std::cerr << last_error_message() << "\ntokenlock run: the lock on " << what
                << " was lost while " << command[0] << " runs; it keeps running\n";
    } else if (ec) {
      std::cerr << last_error_message() << " (will retry)\n";
    }
  }
  ::sigprocmask(SIG_SETMASK, &old, nullptr);

  if (!lost) {
    h.release(ec);
    if (ec == errc::lock_lost) {
      lost = true;
      std::cerr << last_error_message() << "\n";
    }
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status)
                   : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                         : exit_code::software;
  if (lost) {
    std::cerr << "tokenlock run: the lock on " << what << " was lost while " << command[0]
              << " ran (" << describe_status(status) << ")\n";
    return code != 0 ? code : exit_code::lost;
  }
  return code;
}

int run_locked(const std::string& dir, const std::vector<std::string>& command,
               const lock_options& o, int conflict, bool verbose) {
  rename_lock lock(dir, o);
  std::error_code ec;
  lock_handle h = lock.acquire(ec);
  if (ec) {
    if ((ec == errc::busy || ec == errc::timed_out) && !verbose) return conflict;
    return report(ec, last_error_message(), conflict);
  }
  return supervise(h, dir, command, o.lease);
}

}  // namespace

#if TOKENLOCK_HAVE_REDIS
int redis_run(const std::string& url, const std::string& name,
              const std::vector<std::string>& command, std::chrono::milliseconds lease,
              std::chrono::milliseconds wait, int conflict, bool verbose) {
  redis_lock_options o;
  o.lease = lease;
  o.wait = wait;
  redis_lock lock(url, name, o);
  std::error_code ec;
  redis_handle h = lock.acquire(ec);
  if (ec) {
    if ((ec == errc::busy || ec == errc::timed_out) && !verbose) return conflict;
    return report(ec, last_error_message(), conflict);
  }
  warn_if_clock_behind(h, url);
  return supervise(h, "Redis lock " + name, command, lease);
}
#endif

}  // namespace tokenlock::cli
