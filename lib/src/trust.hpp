// Whether a directory that tokenlock works inside may be trusted: the lock
// directory, a token, the updater's workspace, a Redis fence directory
// (docs/security.md). Trusted are the caller, root, and a group the caller
// chose to share with. A directory that anyone else could change is refused
// before anything in it is touched: another user could plant or swap the
// entries tokenlock renames, creates and removes there.
#pragma once

#include <string>

#include "failure.hpp"
#include "posix/os.hpp"

namespace tokenlock::detail {

// Group sharing is chosen by a directory mode that grants the group write
// permission (lock_options::dir_mode 0775 or 0770).
constexpr bool chooses_group_sharing(unsigned dir_mode) { return (dir_mode & 020) != 0; }

// Succeeds when `st` (of the directory at `path`, fstat of its open
// descriptor) is a directory that is not writable by others, owned by the
// caller or root or (with `group_sharing`) in one of the caller's groups,
// and writable by its group only with `group_sharing` and when that group
// is one of the caller's. Otherwise errc::untrusted naming the owner, the
// mode and the fix; `what` says what the directory is ("lock directory").
failure check_trusted(os& sys, const file_status& st, const std::string& path, const char* step,
                      const char* what, bool group_sharing);

// The same for the directory open as `fd`.
failure check_trusted_fd(os& sys, int fd, const std::string& path, const char* step,
                         const char* what, bool group_sharing);

// The same for the directory at `path` (not followed when it is a
// symbolic link: that is refused too). Fails with the open's errno when it
// cannot be opened (ENOENT when missing).
failure check_trusted_path(os& sys, const std::string& path, const char* step, const char* what,
                           bool group_sharing);

// `name` as it may be shown in a message: bytes below 0x20, 0x7f and above
// as \xNN, so that a name planted by someone else cannot drive the terminal
// or forge lines in a log.
std::string shown_name(const std::string& name);

}  // namespace tokenlock::detail
