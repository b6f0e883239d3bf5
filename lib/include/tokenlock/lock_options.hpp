// tokenlock/lock_options.hpp — the settings of a rename_lock, and what its
// dead-owner detection concludes.
//
// Purpose
//   In a header of its own so that code that only configures or judges
//   locks (the protocol's internals, the command's option parsing) need not
//   include the lock itself. tokenlock/rename_lock.hpp includes it; include
//   that one to lock.
//
// Thread safety
//   Plain values.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tokenlock {

// The longest lease any process may write, and so the bound every process
// judges a token by: a token whose lease ends further than this in the
// future is treated as stale (written by a broken clock or program). It is
// a constant of the protocol, not an option, so that no caller can write a
// lease that another process judges implausible and takes over while its
// holder is alive (docs/security.md).
inline constexpr std::chrono::hours protocol_max_lease{24};

// How a lock is held (docs/protocol.md, Shared locks and semaphores).
enum class lock_mode {
  exclusive,  // one holder at a time (a writer)
  shared,     // any number of shared holders together, never beside a writer
};

// The largest semaphore: lock_options::slots is at most this.
inline constexpr std::uint32_t max_slots = 999999;

struct lock_options {
  // exclusive (the default): one holder at a time. shared: holders in this
  // mode hold together (readers), and an exclusive holder (a writer) holds
  // only when none does; a waiting writer bars new shared holders, so a
  // stream of readers never starves it. Shared holders get no fence: their
  // handle has no workspace (lock_handle::path() is empty) and
  // update_file() refuses it.
  lock_mode mode = lock_mode::exclusive;
  // A semaphore: at most `slots` holders at once (1 to max_slots), each
  // with its own lease, as a shared holder has. Non-zero implies
  // mode == shared; every process using the lock must give the same
  // number (one with another count waits until the holders of the first
  // are gone). 0: not a semaphore (shared holders without a limit, or an
  // exclusive lock).
  std::uint32_t slots = 0;

  // How long a token stays valid after acquire or refresh. A holder that
  // needs longer refreshes; a holder that stalls past it may be taken over.
  std::chrono::milliseconds lease = std::chrono::seconds(60);
  // How long acquire() waits for a busy lock before errc::timed_out. Zero
  // means one attempt (errc::busy).
  std::chrono::milliseconds wait = std::chrono::seconds(10);
  // Take over a token whose owner process is provably gone (same host only:
  // kill(pid, 0) says ESRCH, the process is a zombie, or the pid was reused
  // by a process with another start time). Off: only expired leases count.
  bool detect_dead_owner = true;
  // Clock disagreement tolerated between hosts: a lease counts as ended only
  // when now > expiry + skew_allowance.
  std::chrono::milliseconds skew_allowance = std::chrono::seconds(1);
  // The longest lease this process writes: lease, refresh(lease) and
  // keep_alive above it are bad arguments. At most protocol_max_lease, the
  // bound by which every process judges tokens (a larger value is a bad
  // argument too). Also how old a creation leftover without an owner must
  // be before it is removed.
  std::chrono::milliseconds max_lease = protocol_max_lease;
  // A legacy token, "lockfile<epoch seconds>" (the rename lock that many
  // deployed scripts use: docs/protocol.md, Legacy tokens), names no owner
  // and no lease: it is stale once its time plus this (and skew_allowance)
  // has passed, as those scripts judge it.
  std::chrono::milliseconds legacy_timeout = std::chrono::seconds(60);
  // Mode of a lock directory (and its token) that acquire creates; applied
  // exactly, regardless of the umask. Group write (0775, 0770) also shares
  // a lock directory this user owns with that directory's own group: its
  // group may then write in it and own tokens and workspaces there. A lock
  // directory writable by every user is always refused (docs/security.md).
  unsigned dir_mode = 0755;
  // The one group this lock is shared with, by name or decimal gid (empty:
  // none). This user must be a member (else errc::bad_argument). A lock
  // directory of another user, and tokens and workspaces of other users,
  // are trusted only when they are in this group; being in a group without
  // naming it trusts nothing (hosts put every user in `users`). A lock
  // directory that acquire creates gets this group and group rwx
  // (dir_mode | 0070). The command's --group and TOKENLOCK_GROUP.
  std::string group;
  // Wake a waiter as soon as the token is released, on top of the backoff
  // polling that is always done, where the OS reports renames (inotify on
  // Linux; not on FUSE). docs/protocol.md, Waiting, says when waiters poll
  // instead.
  bool wake_on_release = true;
  // Waiters on this host line up on a small file beside the lock directory
  // (D.wait: data.lock.wait for data.lock), so that a freed lock goes to
  // the first in line rather than to whoever retries first, and waiting
  // costs almost no CPU. Locking stays correct without it: whatever the
  // file holds delays a waiter by at most 8 x backoff_max + 40 ms. Not used
  // on network or FUSE filesystems, where waiters poll. Mapping the file
  // installs a SIGBUS handler for its pages only; a program that installs
  // its own SIGBUS handler afterwards sets this to false. How the line
  // works: docs/protocol.md, The line of waiters.
  bool queue_waiters = true;
  // The process that owns the lock: 0 means the calling process. With
  // another pid (on this host), the token carries that process's pid and
  // start time, so the lock counts as abandoned once that process is gone.
  // The tokenlock command uses it to give a lock to the calling shell.
  int owner_pid = 0;
  // A waiter sleeps backoff_min at first, doubling up to backoff_max, each
  // time ±25 % at random. Early retries are what hands the lock from one
  // waiter to the next, and each hand-off costs the holder time: see
  // docs/benchmarks.md before lowering backoff_min.
  std::chrono::microseconds backoff_min = std::chrono::microseconds(100);
  std::chrono::microseconds backoff_max = std::chrono::milliseconds(50);
};

enum class owner_liveness {
  alive,    // same host, the process exists (or we may not look at it)
  dead,     // same host, the process is gone, a zombie, or its pid was reused
  unknown,  // another host (or dead-owner detection is off): lease only
};

}  // namespace tokenlock
