// tokenlock/update.hpp — read-modify-write of a file under a lock.
//
// Purpose
//   update_file() is the transaction CGI programs and scripts need: lock,
//   read the file, compute the new contents, write them atomically, unlock.
//   Its commit is fenced, so that a holder that stalled past its lease can
//   never overwrite what the next owner wrote. Each backend has its fence:
//   - a lock directory (rename_lock): the new contents are written to a
//     temporary file inside the held token directory (in its subdirectory
//     w, which the first update makes) and renamed over the target through
//     the token's current path. If the lock was taken over meanwhile, that
//     path no longer exists, the rename fails and nothing is written.
//     docs/atomic-writes.md and docs/protocol.md ("The fence made of path
//     names") say what remains.
//   - a lock server (redis_lock, etcd_lock: a grant with handle::fence()):
//     a fence directory TARGET.fence beside the target holds one entry
//     named after the largest fence that has updated the file. The holder
//     renames it to its own fence's name before it reads the target (or
//     fails with lock_lost when the entry's is larger), writes its
//     temporary file inside it and commits through the entry's path: a
//     holder whose entry a newer one renamed away finds its path gone and
//     writes nothing. The target must be written only through these
//     functions (or by programs that honour the fence directory).
//     docs/redis.md (The file fence) and docs/etcd.md (Fenced file updates).
//   The functions taking a tokenlock::lock& or tokenlock::handle (lock.hpp)
//   choose the fence by what is behind them, so that one program updates
//   files under any backend, opened by a spec (open_lock.hpp). They are
//   declared in tokenlock/update_any.hpp, which this header includes, and
//   which redis_lock.hpp and etcd_lock.hpp include without the lock
//   directory's header.
//
// Calling sequence
//     tokenlock::rename_lock lock("/srv/app/data/guestbook.lock");
//     tokenlock::update_file("/srv/app/data/guestbook.txt", lock,
//         [&](const std::optional<std::string>& current) {
//           return current.value_or("") + entry + "\n";
//         });
//
//     std::uint64_t hits = tokenlock::increment_counter(
//         "/srv/app/data/hits.count",
//         tokenlock::rename_lock("/srv/app/data/hits.count.lock"));
//
//     std::unique_ptr<tokenlock::lock> any = tokenlock::open_lock(spec);
//     hits = tokenlock::increment_counter("/srv/app/data/hits.count", *any);
//
// Errors
//   - the lock's: busy, timed_out, lock_corrupt, ... (rename_lock.hpp,
//     redis_lock.hpp, etcd_lock.hpp);
//   - errc::lock_lost: the lock was taken over before the commit (a lock
//     directory's token is gone, or a newer holder's fence entry is there);
//     nothing was written;
//   - errc::not_fenced: a lock directory and the target are on different
//     filesystems and update_options::require_fence is set, or a
//     tokenlock::lock whose grants have no fence and that is no lock
//     directory; nothing was written;
//   - errc::lock_corrupt: the fence directory holds other than one entry
//     (changed by hand); nothing was written;
//   - the atomic write's (atomic_write.hpp), including dir_sync_failed;
//   - reading the current contents: EFBIG over update_options::read_limit,
//     EINVAL for a FIFO, device or socket, ELOOP for a symbolic link that
//     is replaced rather than followed; nothing is written;
//   - increment_counter: errc::corrupt_data when the file holds anything but
//     one unsigned 64-bit decimal and a newline (the file is left exactly as
//     it was: a counter is never reset), EOVERFLOW when the sum would not
//     fit.
//   If `fn` throws, nothing is written, the lock is released and the
//   exception reaches the caller; this holds for the error_code form too,
//   which is therefore not noexcept.
//
// Durability and cost
//   update_options::write.sync (default file_and_dir) applies to the commit.
//   docs/atomic-writes.md has the measured cost of each level.
//
// Thread safety
//   As the lock: any number of threads and processes may update the same
//   file through rename_locks on the same directory; a Redis or etcd lock
//   object must not be used by two threads at once (one each).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include <boost/filesystem/path.hpp>

#include "tokenlock/atomic_write.hpp"
#include "tokenlock/rename_lock.hpp"
#include "tokenlock/update_any.hpp"
#include "tokenlock/update_options.hpp"

namespace tokenlock {

// The update under a lock directory. A rename_lock (even a temporary or a
// const one) binds here rather than to the tokenlock::lock& forms of
// update_any.hpp (included above); both do the same.
update_result update_file(const boost::filesystem::path& target, const rename_lock& lock,
                          const update_function& fn, const update_options& options = {});
update_result update_file(const boost::filesystem::path& target, const rename_lock& lock,
                          const update_function& fn, const update_options& options,
                          std::error_code& ec);

// Adds `by` to the counter in `file` (a missing file counts as 0) and
// returns the new value. The file holds one unsigned 64-bit decimal and a
// newline.
std::uint64_t increment_counter(const boost::filesystem::path& file, const rename_lock& lock,
                                std::uint64_t by = 1, const update_options& options = {});
std::uint64_t increment_counter(const boost::filesystem::path& file, const rename_lock& lock,
                                std::uint64_t by, const update_options& options,
                                std::error_code& ec) noexcept;

// The fenced commit on its own, for a caller that holds the lock and has
// computed the new contents itself (read them with read_file, under the
// lock): writes `contents` to a temporary file in the held token's
// workspace and renames it over `target` through the token's current path,
// as update_file commits. The lock stays held; release it afterwards.
//     tokenlock::lock_handle h = lock.acquire();
//     std::optional<std::string> old = tokenlock::read_file(target);
//     tokenlock::commit_file(h, target, next_version(old));
//     h.release();
// Errors (nothing is written by any but the last):
//   - errc::lock_lost: the token was taken over (our lease ended, or we
//     were judged dead); the new owner's data is intact;
//   - errc::not_fenced: the lock directory and the target are on different
//     filesystems, or the token is a legacy file: the commit cannot go
//     through the token (update_file falls back to a checked commit there);
//   - errc::bad_argument: an empty handle; errc::not_owner: a handle
//     inherited by a forked child;
//   - errc::untrusted: the token or its workspace is writable by others
//     (docs/security.md); the atomic write's (atomic_write.hpp);
//   - errc::dir_sync_failed: committed, but the directory flush that
//     options.sync asked for failed; do not repeat the commit.
// On a network filesystem the commit also leaves the version mark the next
// update checks its read against (docs/atomic-writes.md). The caller's own
// read is not checked: a client that serves a stale version of the target
// (GlusterFS's caches, sshfs) can make an update computed from it undo the
// updates in between. There, read and commit with update_file, which
// checks its read against the mark and fails with stale_data instead.
// A commit killed before its rename leaves its temporary file in the
// workspace; about one commit in 32 removes those older than a minute.
void commit_file(const lock_handle& lock, const boost::filesystem::path& target,
                 std::string_view contents, const write_options& options = {});
void commit_file(const lock_handle& lock, const boost::filesystem::path& target,
                 std::string_view contents, const write_options& options,
                 std::error_code& ec) noexcept;

// The value of a counter file as increment_counter reads it: std::nullopt
// when the file does not exist; errc::corrupt_data when it is not a counter
// (a file over 64 bytes is that without being read). A symbolic link is not
// followed (ELOOP), as increment_counter would replace it; a FIFO, device
// or socket is refused (EINVAL) without blocking.
std::optional<std::uint64_t> read_counter(const boost::filesystem::path& file);
std::optional<std::uint64_t> read_counter(const boost::filesystem::path& file,
                                          std::error_code& ec) noexcept;

}  // namespace tokenlock
