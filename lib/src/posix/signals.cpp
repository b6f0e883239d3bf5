#include "posix/signals.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tokenlock::detail::posix {

const int stop_signals[stop_signal_count] = {SIGTERM, SIGINT, SIGHUP};

int current_pid() noexcept { return ::getpid(); }

void unlink_path(const char* path) noexcept { ::unlink(path); }

bool remove_directory_or_absent(const char* path) noexcept {
  return ::rmdir(path) == 0 || errno == ENOENT;
}

void rename_path(const char* from, const char* to) noexcept { ::rename(from, to); }

void end_by(int sig) noexcept {
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

int after_fork_in_child(void (*child)()) noexcept { return ::pthread_atfork(nullptr, nullptr, child); }

std::error_code install_stop_handler(int sig, void (*handler)(int), bool& kept) noexcept {
  kept = false;
  struct sigaction current;
  if (::sigaction(sig, nullptr, &current) != 0) return {errno, std::generic_category()};
  if (current.sa_handler == handler) return {};
  // Ignored (nohup) or handled by the program: its choice stands.
  if ((current.sa_flags & SA_SIGINFO) || current.sa_handler != SIG_DFL) {
    kept = true;
    return {};
  }
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  for (int other : stop_signals) sigaddset(&sa.sa_mask, other);
  if (::sigaction(sig, &sa, nullptr) != 0) return {errno, std::generic_category()};
  return {};
}

std::string signal_name(int sig) { return ::strsignal(sig); }

}  // namespace tokenlock::detail::posix
