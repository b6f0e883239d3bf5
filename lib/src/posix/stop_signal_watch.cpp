#include "posix/stop_signal_watch.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>

#include <fcntl.h>
#include <unistd.h>

namespace tokenlock::detail::posix {

namespace {

std::atomic<int> caught_signal{0};

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
