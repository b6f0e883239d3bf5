// tokenlock/errors.hpp — how tokenlock reports failure.
//
// Purpose
//   Every fallible tokenlock call comes in two forms, as in Boost.Filesystem:
//   one throws tokenlock::lock_error, the other takes a trailing
//   std::error_code& and is noexcept. This header defines the codes both
//   forms use.
//
// Codes
//   - tokenlock's own conditions are tokenlock::errc values in
//     tokenlock::error_category() (name "tokenlock"); compare with
//     `ec == tokenlock::errc::busy`.
//   - Operating-system failures keep their errno value in
//     std::generic_category(): compare with
//     `ec == std::errc::permission_denied`.
//
// Messages
//   A lock_error's what() names the step, the path and the cause, and says
//   how to fix it where that is known, for example:
//     tokenlock: acquire /srv/app/locks/db: cannot rename lockfile to
//     lockfile.1763712000000000.web1-3fa2c1d0.4242.981234.9c1e...: Permission
//     denied; the user (uid 33) needs write and search permission on
//     /srv/app/locks/db and search permission on its parents: for a lock
//     shared by several users, give them a common group and a lock
//     directory of mode 0775 (lock_options::dir_mode)
//   The error_code& forms cannot carry that text in the code, so they leave
//   it in last_error_message(), per thread, until the next failure.
//
// Names
//   Every error has one name, the vocabulary that the C interface
//   (tokenlock_strerror), the command's --errors=json line and the Perl,
//   PHP and Python modules share, so that a program never has to read a
//   message to tell failures apart:
//     - a tokenlock::errc is its enumerator's name: "busy", "timed_out",
//       "lock_lost", "token_missing", "lock_corrupt", "corrupt_data",
//       "bad_argument", "not_owner", "dir_sync_failed", "not_fenced",
//       "stale_data", "server_error", "not_replicated", "untrusted",
//       "backend_unavailable", "not_supported";
//     - ENOMEM is "no_memory" (TOKENLOCK_ENOMEM);
//     - every other errno, in the generic or the system category, is
//       "system" (TOKENLOCK_ESYSTEM), and the errno itself goes beside the
//       name: the C interface's tokenlock_last_errno(), the "errno" field
//       of the command's JSON line;
//     - no error is "ok"; a code of any other category is "unknown".
//   The C interface has one name more, "aborted" (TOKENLOCK_EABORTED: its
//   update callback declined), which no C++ call returns: a C++ update
//   function throws instead.
//
//   error_from_name(name, errno_value) is the inverse: the code that
//   error_name() names `name`, with `errno_value` for "system" (which needs
//   one, from 1 up). It returns std::nullopt for a name that is not in the
//   table, for "system" without an errno, and for "unknown" and "aborted".
//     auto ec = tokenlock::error_from_name("timed_out");   // errc::timed_out
//     tokenlock::error_name(*ec);                          // "timed_out"
//
// Thread safety
//   Everything here is safe to use from any thread.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace tokenlock {

enum class errc {
  // The lock is held by a live owner with a valid lease, and the caller asked
  // not to wait (try_acquire, or a zero wait budget).
  busy = 1,
  // The wait budget ran out while the lock stayed busy.
  timed_out,
  // The caller's token was taken over (its lease ended or its process was
  // judged dead): release, refresh or a fenced commit found it gone. The
  // caller no longer holds the lock and must not act as if it did.
  lock_lost,
  // The lock directory exists and is not empty, but holds no token in two
  // listings a moment apart. tokenlock never invents a token in an existing
  // directory: someone removed it outside the protocol. Fix by hand.
  token_missing,
  // The lock directory holds more than one token, or an entry that looks
  // like a token but does not follow the grammar of docs/protocol.md. Never
  // repaired silently.
  lock_corrupt,
  // A data file (for example a counter) does not hold what it must.
  corrupt_data,
  // An argument is unusable (an empty lock path, a negative lease, ...).
  bad_argument,
  // The handle does not own a token: it was released, moved from, or it was
  // inherited by a forked child, which never releases its parent's lock.
  not_owner,
  // An atomic write renamed the new file into place, but syncing the
  // directory failed: readers see the new contents, but a crash may bring
  // the old file back.
  dir_sync_failed,
  // update_file with update_options::require_fence: the lock directory and
  // the target are on different filesystems, so the commit could not be
  // fenced. Nothing was written.
  not_fenced,
  // update_file on a network filesystem: the client kept serving a version
  // of the file older than the one the last update committed (a stale
  // cache), so updating it would lose updates. Nothing was written; the
  // message names the filesystem setting to change.
  stale_data,
  // A lock server (redis_lock) answered an error: a wrong password, a
  // command refused (a read-only replica, out of memory, an ACL). The
  // message gives the server's words and the fix where one is known.
  server_error,
  // redis_lock_options::replicas were asked for, and fewer replicas
  // acknowledged the grant in time: the grant was released again.
  not_replicated,
  // A lock directory, token, workspace or fence directory that another user
  // could change: owned by a user other than the caller and root, or
  // writable by others (by a group only where the caller chose group
  // sharing, lock_options::dir_mode). Nothing in it was touched; the
  // message names the owner, the mode and the fix (docs/security.md).
  untrusted,
  // tokenlock::open_lock (open_lock.hpp) was given a spec for a backend
  // (Redis, etcd) that this build of the library does not have. The
  // message names the spec (password masked) and the build option that
  // adds the backend.
  backend_unavailable,
  // What was asked is not done where the lock is: a shared lock or a
  // semaphore on a filesystem where holders leave owner marks (GlusterFS,
  // an unknown FUSE filesystem: docs/protocol.md, Shared locks and
  // semaphores). Nothing was changed; the message names the filesystem.
  not_supported,
};

// The category of tokenlock::errc codes; name() is "tokenlock".
const std::error_category& error_category() noexcept;

std::error_code make_error_code(errc e) noexcept;

// The one name of `ec` (see Names above); never null, never empty.
const char* error_name(std::error_code ec) noexcept;

// The code named `name`; `errno_value` is the errno a "system" name stands
// with. std::nullopt for a name error_name() never gives, for "system"
// without an errno (0 or less), and for "unknown" and "aborted". "ok"
// gives the empty code.
std::optional<std::error_code> error_from_name(std::string_view name,
                                               int errno_value = 0) noexcept;

// Thrown by the throwing form of every fallible call. code() is a
// tokenlock::errc or an errno code; what() is the full message.
class lock_error : public std::system_error {
 public:
  lock_error(std::error_code ec, const std::string& message);
  // The message exactly as composed (std::system_error would append the
  // code's text, which the message already names).
  const char* what() const noexcept override;

 private:
  std::runtime_error message_;  // refcounted text, nothrow copy
};

// The message of the last failure that this thread saw reported through an
// error_code& form (the same text a lock_error would have carried). Empty
// before the first failure.
const std::string& last_error_message() noexcept;

}  // namespace tokenlock

namespace std {
template <>
struct is_error_code_enum<tokenlock::errc> : true_type {};
}  // namespace std
