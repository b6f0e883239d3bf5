// tokenlock/rename_lock.hpp — the rename-token lock.
//
// Purpose
//   A lock that needs nothing but rename(2) and works where flock(2) is
//   missing or unreliable: shared web hosting, NFS, network filesystems.
//   Processes that share a lock directory D exclude each other; a holder
//   that dies (kill -9, a crash) is detected on the same host within
//   milliseconds, and any holder whose lease ends can be taken over, without
//   ever clobbering another owner. docs/protocol.md is the full protocol.
//
//   D holds exactly one token, itself a directory:
//     D/lockfile                                   the lock is free
//     D/lockfile.<expiry>.<host>-<hash>.<pid>.<start>.<nonce>
//                                                  held until <expiry>
//   Acquiring renames D/lockfile to a fresh name of ours; releasing renames
//   it back. The held token directory is the holder's private workspace
//   (lock_handle::path()): a file written there and renamed out through that
//   path can only be committed while the lock is still ours.
//
// Calling sequence
//     tokenlock::rename_lock lock("/srv/app/locks/counter");
//     {
//       tokenlock::lock_handle h = lock.acquire();  // waits up to options.wait
//       ... critical section; h.refresh() to extend the lease ...
//       h.release();   // or let the destructor release (it never throws)
//     }
//   try_acquire() makes one attempt and returns std::nullopt when a live
//   owner holds the lock. The lock directory is created (atomically, with
//   its token) on first use if it is missing or empty; its parent must
//   exist.
//
// Errors
//   Each fallible call has a throwing form (tokenlock::lock_error) and a
//   noexcept form taking std::error_code& (see errors.hpp). Conditions:
//   - errc::busy       acquire() with options.wait zero found a live
//                      holder (try_acquire returns std::nullopt instead).
//   - errc::timed_out  acquire() waited options.wait in vain.
//   - errc::lock_lost  release()/refresh() found our token taken over: the
//                      lease ended (or we were judged dead) and another
//                      process now owns the lock. The handle is emptied.
//   - errc::token_missing, errc::lock_corrupt: the lock directory is not in
//                      a state the protocol produces; nothing is repaired.
//   - errc::untrusted  the lock directory (or, for the updater, the token or
//                      its workspace) could be changed by another user:
//                      owned by someone other than the caller and root, or
//                      writable by others, or by a group without the choice
//                      of group sharing (lock_options::dir_mode). Nothing in
//                      it is touched; docs/security.md has the fixes.
//   - errc::bad_argument: unusable path or options (a lease above 24 hours
//                      among them: protocol_max_lease).
//   - errc::not_owner  the handle owns nothing (released, moved from, or
//                      inherited by a forked child).
//   - errno codes (EACCES, EPERM, EROFS, ENOTDIR, ENAMETOOLONG, ENOSPC, ...)
//                      with a message that names the directory, the step and
//                      the fix where one is known.
//   A failed call leaves the lock directory as it was.
//
// Processes, threads and fork
//   The lock excludes processes and also handles within one process: two
//   threads acquiring the same directory exclude each other like two
//   processes. A rename_lock may be shared between threads; a lock_handle
//   must not be used by two threads at once. A handle copied into a child by
//   fork(2) owns nothing there: its destructor does nothing and release()
//   reports not_owner, so the parent keeps its lock.
//
// Descriptors
//   The first use of a rename_lock opens its lock directory (without
//   following a symbolic link), judges it, and keeps it open, one
//   descriptor, until the rename_lock and its handles are gone: every
//   rename inside it is made relative to that descriptor, so that nobody
//   can swap the path under a lock that was judged (docs/security.md).
//
// Clocks
//   Leases are absolute CLOCK_REALTIME times written into the token name,
//   so processes on different hosts must have roughly synchronised clocks;
//   lock_options::skew_allowance is how much disagreement is tolerated.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <system_error>

#include <boost/filesystem/path.hpp>

#include "tokenlock/errors.hpp"
#include "tokenlock/lock.hpp"
#include "tokenlock/lock_options.hpp"

namespace tokenlock {

namespace detail {
struct lock_core;    // what a lock and its handles share (lib/src/lockdir/lock_core.hpp)
struct lock_access;  // the library's own way in
}



// A snapshot of who holds a lock, for status displays and diagnostics.
struct holder_info {
  std::string token;                 // the token's name in the directory
  boost::filesystem::path path;      // directory / token
  std::chrono::system_clock::time_point expires;
  std::string host_tag;              // "<host>-<hash8>" of the owner
  bool same_host = false;            // host tag equals ours
  int pid = 0;
  std::uint64_t start_time = 0;      // owner's start time, clock ticks since boot
  owner_liveness owner = owner_liveness::unknown;
  bool stale = false;                // may be taken over now
  std::string reason;                // why it is (or is not) stale, in words
  // A legacy token ("lockfile<seconds>", lock_options::legacy_timeout):
  // no owner is named (host_tag empty, pid 0); `expires` is its time plus
  // the legacy timeout.
  bool legacy = false;
  // A shared holder (its mode shared; slots: the semaphore's size, 0 for
  // readers), or a writer waiting for shared holders to leave, which holds
  // nothing yet but bars new shared holders (docs/protocol.md, Shared locks
  // and semaphores). For a group of shared holders, `token` is the holder's
  // share entry ("s.<...>"), what adopt() and take_over() take.
  lock_mode mode = lock_mode::exclusive;
  std::uint32_t slots = 0;
  bool waiting_writer = false;
};

class lock_handle;

// A tokenlock::lock (lock.hpp): through a tokenlock::lock& its calls give
// tokenlock::handle, whose id() is the token name and whose fence() is
// std::nullopt; called on a rename_lock they give lock_handle, as here.
class rename_lock : public lock {
 public:
  // Names the lock directory `dir`; touches nothing until the first call.
  explicit rename_lock(boost::filesystem::path dir, lock_options options = {});

  // Acquires the lock, waiting up to options().wait. On success the
  // returned handle owns a token with a lease of options().lease. Stale
  // tokens found on the way are taken over; a missing or empty lock
  // directory is created. Fails with busy (wait zero), timed_out,
  // token_missing, lock_corrupt, bad_argument or an errno code; a failure
  // leaves the lock directory as it was.
  lock_handle acquire() const;
  lock_handle acquire(std::error_code& ec) const noexcept;

  // One attempt, no waiting: std::nullopt when a live owner holds the lock.
  // Errors as acquire(), except busy and timed_out.
  std::optional<lock_handle> try_acquire() const;
  std::optional<lock_handle> try_acquire(std::error_code& ec) const noexcept;

  // A handle for `token`, a held token that some process (maybe another
  // one) acquired in this lock, so that it can be refreshed or released
  // here. Fails with bad_argument when `token` is not a held token name,
  // and with lock_lost when this lock does not hold it (it was released,
  // refreshed or taken over, or it belongs to another lock).
  lock_handle adopt(const std::string& token) const;
  lock_handle adopt(const std::string& token, std::error_code& ec) const noexcept;

  // Takes over exactly `token`, if it is stale (or `force` is set), by
  // renaming that name to a fresh token of ours; any other token is never
  // touched. Fails with busy (with the reason) when it is not stale and not
  // forced, or when, on a filesystem where holders leave owner marks
  // (GlusterFS: docs/protocol.md), another process took the same token at
  // the same moment; lock_lost when the lock no longer holds that token,
  // and bad_argument when it is not a held token name.
  lock_handle take_over(const std::string& token, bool force = false) const;
  lock_handle take_over(const std::string& token, bool force,
                        std::error_code& ec) const noexcept;

  // Who holds the lock now: std::nullopt when it is free (or the directory
  // does not exist yet). Read-only: it never takes anything over.
  std::optional<holder_info> holder() const;
  std::optional<holder_info> holder(std::error_code& ec) const noexcept;
  // Every holder: the one exclusive holder, or each shared holder and a
  // waiting writer. Empty when the lock is free.
  std::vector<holder_info> holders() const;
  std::vector<holder_info> holders(std::error_code& ec) const noexcept;

  const boost::filesystem::path& directory() const noexcept { return dir_; }
  const lock_options& options() const noexcept { return options_; }

  // The lock directory's path (tokenlock::lock::spec()).
  std::string spec() const override { return dir_.string(); }
  lock_backend backend() const noexcept override { return lock_backend::directory; }
  lock_features features() const noexcept override;
  std::vector<lock_fact> location() const override;

 private:
  friend struct detail::lock_access;

  handle acquire_any(std::error_code& ec) noexcept override;
  std::optional<handle> try_acquire_any(std::error_code& ec) noexcept override;
  handle adopt_any(const std::string& token, std::error_code& ec) noexcept override;
  void break_owner_any(const std::string& token, std::error_code& ec) noexcept override;
  std::optional<lock_holder> holder_any(std::error_code& ec) noexcept override;
  std::vector<lock_holder> holders_any(std::error_code& ec) noexcept override;

  boost::filesystem::path dir_;
  lock_options options_;
  std::shared_ptr<const detail::lock_core> core_;  // shared by copies and handles
};

// Ownership of one token. Move-only; the destructor releases (and never
// throws: a lost lock at that point is silently accepted, so call release()
// when you need to know).
class lock_handle {
 public:
  lock_handle() noexcept = default;  // owns nothing
  lock_handle(lock_handle&& other) noexcept;
  lock_handle& operator=(lock_handle&& other) noexcept;  // releases ours first
  lock_handle(const lock_handle&) = delete;
  lock_handle& operator=(const lock_handle&) = delete;
  ~lock_handle();

  // Renames our token back to "lockfile". Afterwards the handle owns
  // nothing. lock_lost when the token was taken over (nothing is renamed:
  // the new owner keeps its lock). On an empty handle: does nothing.
  // not_owner in a forked child. Where holders leave owner marks, the mark
  // is removed first; a failure to remove it, or a failed rename, keeps the
  // lock ours (with its mark), and the call may be repeated.
  void release();
  void release(std::error_code& ec) noexcept;

  // Extends the lease to now + `lease` (default: the lease the lock was
  // acquired with) by renaming our token to a name with the new expiry.
  // path() and token() change. lock_lost when the token was taken over.
  // Where holders leave owner marks, the mark is renamed too; if only that
  // fails, the lease is renewed and the error says so.
  void refresh();
  void refresh(std::error_code& ec) noexcept;
  void refresh(std::chrono::milliseconds lease);
  void refresh(std::chrono::milliseconds lease, std::error_code& ec) noexcept;

  // Gives up ownership without renaming anything: the token stays held
  // until its lease ends or its owner process is found dead. Returns the
  // token name. For handing a lock over to another process (the tokenlock
  // command's `acquire`), which adopt()s it; an owner mark stays with the
  // token and goes with that process's release.
  std::string detach() noexcept;

  // True while this handle holds a token in the process that acquired it.
  // Does not look at the disk: a takeover is noticed by release/refresh.
  bool owns() const noexcept;
  explicit operator bool() const noexcept { return owns(); }

  // The token's current name in the lock directory (empty if none).
  const std::string& token() const noexcept { return token_; }
  // The held token directory: lock directory / token(). The holder's
  // workspace; it moves on refresh. Names there starting with "h." are
  // reserved (owner marks), "s." are shared holders' and "w" is the
  // updater's. Empty for a shared handle, which has no workspace.
  boost::filesystem::path path() const;
  const boost::filesystem::path& directory() const noexcept;
  // When the current lease ends.
  std::chrono::system_clock::time_point expires() const noexcept;
  // The lease refresh() extends by when given none: the one acquired with.
  std::chrono::milliseconds lease() const noexcept { return lease_; }
  // exclusive, or shared (a shared holder's or a semaphore's grant).
  lock_mode mode() const noexcept { return mode_; }

 private:
  friend struct detail::lock_access;

  void forget() noexcept;

  std::shared_ptr<const detail::lock_core> core_;  // the lock's, shared
  std::string token_;
  std::string token_path_;     // directory / token_, ready for release
  std::int64_t expiry_us_ = 0;
  std::chrono::milliseconds lease_{0};
  std::uint64_t fork_generation_ = 0;
  int cleanup_slot_ = -1;  // install_signal_cleanup()'s record of the token
  lock_mode mode_ = lock_mode::exclusive;
  std::uint32_t slots_ = 0;  // a shared handle's semaphore size (0: readers)
};

}  // namespace tokenlock
