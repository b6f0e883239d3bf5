// The system calls of signal handling, kept beside the OS seam (os.hpp) so
// that, as there, nothing outside lib/src/posix/ calls the OS. They are not
// methods of `os`: the signal cleanup's handler must make its calls directly
// (async-signal-safe, no object that a test replaced), and its table lives
// outside any `os`.
#pragma once

#include <cstddef>
#include <string>
#include <system_error>

namespace tokenlock::detail::posix {

// SIGTERM, SIGINT and SIGHUP: the signals that end a program politely.
inline constexpr int stop_signal_count = 3;
extern const int stop_signals[stop_signal_count];

// ---- async-signal-safe, for the handler ----
int current_pid() noexcept;                               // getpid()
void unlink_path(const char* path) noexcept;              // unlink(2), result ignored
bool remove_directory_or_absent(const char* path) noexcept;  // rmdir(2): done, or ENOENT
void rename_path(const char* from, const char* to) noexcept;  // rename(2), result ignored
// Restores the default action of `sig` and raises it: blocked while the
// handler runs, it ends the process with its default action on return.
void end_by(int sig) noexcept;

// ---- set-up ----
// Runs `child` in the child after every fork (pthread_atfork); 0 or an errno.
int after_fork_in_child(void (*child)()) noexcept;
// Installs `handler` for `sig`, blocking every stop signal while it runs,
// unless the program ignores or handles `sig` itself (then `kept` is set
// and nothing changes), or `handler` is installed already.
std::error_code install_stop_handler(int sig, void (*handler)(int), bool& kept) noexcept;
std::string signal_name(int sig);

}  // namespace tokenlock::detail::posix
