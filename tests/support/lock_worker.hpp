// What the worker's files share (lock_worker.cpp has the modes' manual).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "fake_os.hpp"
#include "tokenlock/open_lock.hpp"

namespace tokenlock::testing::worker {

// What one run was given: the spec of --lock (empty without it) and the
// mode's own arguments.
struct mode_args {
  std::string spec;
  std::vector<std::string> a;
};

// How the modes take the lock: --shared, --slots N, or exclusively.
struct held_as {
  tokenlock::lock_mode mode = tokenlock::lock_mode::exclusive;
  std::uint32_t slots = 0;
};
held_as& chosen_mode();

// Reports `what` as "lock_worker[PID]: what" on stderr and exits with 2
// (the netfs rig counts errors by that prefix).
[[noreturn]] void die(const std::string& what);

// A count of milliseconds given as an argument; dies on anything else.
std::chrono::milliseconds millis(const std::string& text);

// The settings of a mode's lock: its wait budget, its lease, and the lock
// directory's skew allowance (a server lock has none: ignored there); held
// as chosen_mode() says.
tokenlock::open_options lock_settings(std::chrono::milliseconds wait,
                                      std::chrono::milliseconds lease = std::chrono::seconds(60));
tokenlock::open_options lock_settings(std::chrono::milliseconds wait,
                                      std::chrono::milliseconds lease,
                                      std::chrono::milliseconds skew);

// The real system with its calls recorded and hooks possible (fake_os.hpp).
std::shared_ptr<fake_os> recording_os();

// The lock `spec` names, opened by tokenlock::open_lock. A lock
// directory's system calls then go through `sys`: the modes that watch or
// play a lock directory's own extras (owner marks, the wait board, the
// filesystem type) need that test seam, which open_lock does not offer.
// Other backends are as open_lock made them.
std::unique_ptr<tokenlock::lock> open_through(const std::string& spec,
                                              const tokenlock::open_options& options,
                                              std::shared_ptr<fake_os> sys);

// Waits for the start barrier when the parent gave one: fd 3, the read
// end of a pipe, until it reaches EOF.
void wait_for_start();

// Appends `line` and a newline to the file `path`; dies on failure.
void append_line(const std::string& path, const std::string& line);

// One line for how a release or commit ended: `success`, "lock_lost
// MESSAGE" or "error MESSAGE".
void report(const char* success, const std::error_code& ec);

// The modes on files (lock_worker_files.cpp).
int rewrite(const mode_args& m);
int stall_update(const mode_args& m);
int update(const mode_args& m);
int append(const mode_args& m);
int incr(const mode_args& m);

// Holding in turn with others, logged (lock_worker_visit.cpp).
int visit(const mode_args& m);

}  // namespace tokenlock::testing::worker
