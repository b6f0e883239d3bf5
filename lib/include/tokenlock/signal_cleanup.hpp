// tokenlock/signal_cleanup.hpp — releasing locks when the process is told to stop.
//
// Purpose
//   A process stopped by SIGTERM, SIGINT or SIGHUP (a web server ending a
//   slow CGI, a Ctrl-C, a closed terminal) would leave its locks held until
//   another process finds it dead (at once on this host) or its lease ends
//   (on another host, over NFS). install_signal_cleanup() makes those
//   signals release every lock the process holds and remove the temporary
//   files of its unfinished atomic writes first, then end the process by the
//   same signal, as it would have ended without the handler. SIGKILL cannot
//   be caught; dead-owner detection covers it.
//
// Calling sequence
//     int main() {
//       tokenlock::install_signal_cleanup();   // early: before the first lock
//       ...
//     }
//   Locks acquired and temporary files created after the call are covered;
//   ones from before it are not.
//
// What the handler does
//   Only unlink(2) and rename(2), which are async-signal-safe: it removes
//   the temporary files, then renames each held token back to "lockfile".
//   A lock given up meanwhile (released, refreshed, taken over) makes its
//   rename fail harmlessly. Anything the holder left in its token directory
//   (the workspace) stays there. A forked child's handler never touches its
//   parent's locks. At most 64 locks and temporary files are tracked at
//   once; beyond that, they are left to dead-owner detection.
//
// Errors
//   Signals that are ignored (nohup) or already have a handler are left as
//   they are: the program's own handling wins. The throwing form throws
//   lock_error with the errno of a failed sigaction(2).
//
// Thread safety
//   May be called from any thread, any number of times. The handler may
//   run on any thread; tracking is lock-free.

#pragma once

#include <system_error>

namespace tokenlock {

void install_signal_cleanup();
void install_signal_cleanup(std::error_code& ec) noexcept;

}  // namespace tokenlock
