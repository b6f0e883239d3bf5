#include "tokenlock/signal_cleanup.hpp"

#include <atomic>
#include <cstring>

#include "cleanup_registry.hpp"
#include "core/failure.hpp"
#include "posix/signals.hpp"

namespace tokenlock {

using namespace detail;

namespace detail {
namespace {

constexpr int slot_count = 64;
constexpr std::size_t max_path = 4096;
constexpr std::size_t max_mark = 256;

enum : int { slot_free = 0, slot_filling = 1, slot_token = 2, slot_file = 3 };

// Plain arrays and atomics only: the handler reads them. Constant-
// initialised (zeros, in .bss), so that a program pays for a page of the
// table only when it uses it: a dynamic initialiser touching all 64 slots
// cost every process start 64 page faults, a fifth of a CGI's start-up.
// The states share one page, so looking for a free slot touches no other.
struct table_t {
  std::atomic<int> state[slot_count];
  int pid[slot_count];
  char path[slot_count][max_path];
  char free_path[slot_count][max_path];
  char mark[slot_count][max_mark];  // a token's owner mark (token_mark.hpp), or ""
};
table_t table;
std::atomic<bool> installed{false};
// Our pid, kept current across fork by an atfork handler, so that tracking
// adds no system call to acquire and release.
std::atomic<int> our_pid{0};
extern "C" void refresh_our_pid() { our_pid.store(posix::current_pid(), std::memory_order_relaxed); }

int track(int kind, const std::string& path, const std::string& free_path,
          const std::string& mark) noexcept {
  if (!installed.load(std::memory_order_acquire)) return -1;
  if (path.size() >= max_path || free_path.size() >= max_path || mark.size() >= max_mark ||
      path.size() + 1 + mark.size() >= max_path)
    return -1;
  for (int i = 0; i < slot_count; ++i) {
    int expected = slot_free;
    if (!table.state[i].compare_exchange_strong(expected, slot_filling,
                                                std::memory_order_acquire))
      continue;
    // The pid, not the fork generation: the handler can only ask getpid().
    table.pid[i] = our_pid.load(std::memory_order_relaxed);
    std::memcpy(table.path[i], path.c_str(), path.size() + 1);
    std::memcpy(table.free_path[i], free_path.c_str(), free_path.size() + 1);
    std::memcpy(table.mark[i], mark.c_str(), mark.size() + 1);
    table.state[i].store(kind, std::memory_order_release);
    return i;
  }
  return -1;  // full: left to dead-owner detection
}

extern "C" void on_stop_signal(int sig) {
  const int me = posix::current_pid();
  // Files first: a temporary file inside a token directory must not end up
  // inside "lockfile".
  for (int i = 0; i < slot_count; ++i)
    if (table.state[i].load(std::memory_order_acquire) == slot_file && table.pid[i] == me)
      posix::unlink_path(table.path[i]);
  for (int i = 0; i < slot_count; ++i) {
    if (table.state[i].load(std::memory_order_acquire) != slot_token || table.pid[i] != me)
      continue;
    // The owner mark goes first, or the next holder of "lockfile" would
    // find a mark of ours and step back until our lease ends.
    if (table.mark[i][0] != '\0') {
      char mark_path[max_path];
      const std::size_t n = std::strlen(table.path[i]);
      std::memcpy(mark_path, table.path[i], n);
      mark_path[n] = '/';
      std::memcpy(mark_path + n + 1, table.mark[i], std::strlen(table.mark[i]) + 1);
      // A mark that stays would go into "lockfile" with the token: better
      // left held, for a taker to judge our death.
      if (!posix::remove_directory_or_absent(mark_path)) continue;
    }
    posix::rename_path(table.path[i], table.free_path[i]);
  }
  // End as the signal would have ended us: it is blocked while we run, so
  // it is delivered, with its default action, when we return.
  posix::end_by(sig);
}

}  // namespace

int cleanup_track_token(const std::string& token_path, const std::string& free_path,
                        const std::string& mark) noexcept {
  return track(slot_token, token_path, free_path, mark);
}

int cleanup_track_file(const std::string& path) noexcept { return track(slot_file, path, {}, {}); }

void cleanup_untrack(int i) noexcept {
  if (i >= 0 && i < slot_count) table.state[i].store(slot_free, std::memory_order_release);
}

int cleanup_tracked_count() noexcept {
  int n = 0;
  for (int i = 0; i < slot_count; ++i)
    n += table.state[i].load(std::memory_order_acquire) != slot_free;
  return n;
}

}  // namespace detail

namespace {

failure install() {
  static const int atfork = [] {
    detail::refresh_our_pid();
    return posix::after_fork_in_child(detail::refresh_our_pid);
  }();
  if (atfork != 0)
    return make_failure(std::error_code(atfork, std::generic_category()),
                        "tokenlock: install_signal_cleanup: pthread_atfork failed");
  detail::installed.store(true, std::memory_order_release);
  for (int sig : posix::stop_signals) {
    bool kept = false;  // the program's own choice for sig stands
    if (std::error_code ec = posix::install_stop_handler(sig, detail::on_stop_signal, kept))
      return make_failure(ec, "tokenlock: install_signal_cleanup: cannot handle " +
                                  posix::signal_name(sig) + ": " + ec.message());
  }
  return {};
}

}  // namespace

void install_signal_cleanup(std::error_code& ec) noexcept { run_noexcept(ec, install); }

void install_signal_cleanup() { run_throwing(install); }

}  // namespace tokenlock
