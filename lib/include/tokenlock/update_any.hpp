// tokenlock/update_any.hpp — update_file, increment_counter and
// commit_file under any tokenlock::lock (lock.hpp), whatever its backend.
//
// Purpose
//   The read-modify-write of tokenlock/update.hpp for a lock chosen at run
//   time (open_lock.hpp): the same functions, taking the interface. Each
//   commit is fenced as the backend behind it allows:
//   - a lock directory (rename_lock): through the held token's path, as
//     update.hpp describes, with the same results and errors;
//   - a lock server (redis_lock, etcd_lock): through the fence directory
//     TARGET.fence beside the target, named after the grant's fence
//     (handle::fence()); docs/redis.md (The file fence) and docs/etcd.md
//     (Fenced file updates). The target must be written only through
//     these functions (or by programs that honour the fence directory).
//   update.hpp includes this header; redis_lock.hpp and etcd_lock.hpp do
//   too, so that a program with only a server lock's header has them.
//
// Calling sequence
//     std::unique_ptr<tokenlock::lock> lock = tokenlock::open_lock(spec);
//     tokenlock::update_file("/srv/app/data/guestbook.txt", *lock,
//         [&](const std::optional<std::string>& current) {
//           return current.value_or("") + entry + "\n";
//         });
//     std::uint64_t hits = tokenlock::increment_counter("/srv/app/data/hits.count", *lock);
//
// Errors
//   As update.hpp lists them, and for a lock server's grant:
//   - errc::lock_lost: a newer grant's entry is in the fence directory
//     (this grant's lease ended), or renamed ours away before the commit;
//     nothing was written and the newer holder's data is intact;
//   - errc::lock_corrupt: the fence directory holds other than one entry
//     (changed by hand): remove it while no process updates the file;
//   - errc::untrusted: the fence directory or its entry may be written by
//     others (docs/security.md);
//   - errc::not_fenced: a lock of a kind that gives grants without a fence
//     and is no lock directory; nothing was written.
//
// Thread safety
//   As the lock: a rename_lock may be shared between threads, a Redis or
//   etcd lock object must not be used by two threads at once.
#pragma once

#include <cstdint>
#include <string_view>
#include <system_error>

#include <boost/filesystem/path.hpp>

#include "tokenlock/atomic_write.hpp"
#include "tokenlock/lock.hpp"
#include "tokenlock/update_options.hpp"

namespace tokenlock {

// update_file and increment_counter (update.hpp) under any lock: a lock
// directory's commit goes through its token as under a rename_lock
// (update_result::fenced false when it could not), a Redis or etcd grant's
// through the fence directory (update_result::fenced always true). With update_options::keep_alive the
// grant's lease is refreshed while `fn` runs, on every backend.
update_result update_file(const boost::filesystem::path& target, lock& lock,
                          const update_function& fn, const update_options& options = {});
update_result update_file(const boost::filesystem::path& target, lock& lock,
                          const update_function& fn, const update_options& options,
                          std::error_code& ec);
std::uint64_t increment_counter(const boost::filesystem::path& file, lock& lock,
                                std::uint64_t by = 1, const update_options& options = {});
std::uint64_t increment_counter(const boost::filesystem::path& file, lock& lock,
                                std::uint64_t by, const update_options& options,
                                std::error_code& ec) noexcept;

// commit_file (update.hpp) under a grant of any lock, held by the caller:
//     tokenlock::handle h = lock->acquire();
//     std::optional<std::string> old = tokenlock::read_file(target);
//     tokenlock::commit_file(h, target, next_version(old));
//     h.release();
// - A lock directory's grant (a lock_handle behind the handle) commits
//   through its token exactly as commit_file(const lock_handle&, ...) in
//   update.hpp, with the same errors.
// - A Redis or etcd grant claims the fence directory's entry for its fence
//   (renames TARGET.fence's one entry to its own fence's name, as
//   update_file does before its read), writes the temporary file inside
//   that entry and renames it over the target through the entry's path.
//   What that protects: nothing is written when a newer grant of the lock
//   has claimed the entry before our claim (lock_lost at once) or between
//   our claim and our rename (the rename finds the path gone: lock_lost),
//   and once we have claimed it, an older holder that stalled past its
//   lease writes nothing through it. What it does not protect: the
//   caller's read happened before the claim, so a stalled older holder's
//   commit that lands between that read and the claim is overwritten by
//   contents computed without it. update_file claims before it reads and
//   has no such window: use it for read-modify-write. Nor does the claim
//   ask the server whether the grant still stands: a grant that was broken
//   or expired, with no newer holder having claimed the entry since, still
//   commits: the fence orders the holders that use it, it does not ask who
//   holds the lock now.
// Errors, beyond the atomic write's (nothing is written by any but the
// last): errc::bad_argument for an empty handle; errc::lock_lost for a
// grant that was released or found lost, or a newer fence as above;
// errc::not_owner in a forked child; errc::not_fenced for a grant that has
// no fence and is no lock directory's; errc::lock_corrupt for a fence
// directory with other than one entry; errc::untrusted for a fence
// directory or entry others may write; errc::dir_sync_failed: committed,
// but the directory flush that options.sync asked for failed.
void commit_file(const handle& lock, const boost::filesystem::path& target,
                 std::string_view contents, const write_options& options = {});
void commit_file(const handle& lock, const boost::filesystem::path& target,
                 std::string_view contents, const write_options& options,
                 std::error_code& ec) noexcept;

}  // namespace tokenlock
