// Whether a directory that tokenlock works inside may be trusted: the lock
// directory, a token, the updater's workspace, a Redis fence directory
// (docs/security.md). Trusted are the caller, root, and a group the caller
// chose to share with. A directory that anyone else could change is refused
// before anything in it is touched: another user could plant or swap the
// entries tokenlock renames, creates and removes there.
#pragma once

#include <optional>
#include <string>

#include "core/failure.hpp"
#include "posix/os.hpp"

namespace tokenlock::detail {

// How the caller shares a lock (docs/security.md, Who is trusted). Being
// in a group chooses nothing: many hosts put every user in `users`.
struct sharing {
  // Group write in it (0775, 0770) shares a lock directory *the caller
  // owns* with that directory's own group.
  unsigned dir_mode = 0755;
  // A group named by the caller (a name or a decimal gid; empty: none).
  // It is trusted in another user's directory too.
  std::string group;
};

// With a group named, what a created directory's mode is: group rwx too,
// so that the group can rename and create in it.
inline unsigned created_mode(const sharing& s) {
  return s.group.empty() ? s.dir_mode : (s.dir_mode | 0070);
}

// The gid of `s.group`, which the caller must be a member of (errc::
// bad_argument otherwise, naming the group: trusting a group one is not in
// shares with strangers). nullopt when no group is named.
failure named_group(os& sys, const sharing& s, const char* step, std::optional<unsigned>& out);

// The group trusted inside the tree whose top (a lock directory, a fence
// directory) has status `top`: the named group, else the top's own group
// when `s.dir_mode` grants group write and the caller owns the top; else
// none. Decided once when the top is judged; it applies to what is inside.
failure chosen_group(os& sys, const sharing& s, const file_status& top, const char* step,
                     std::optional<unsigned>& out);

// Succeeds when `st` (of the directory at `path`, fstat of its open
// descriptor) is a directory, not a link, not writable by others, and
// either owned by the caller or root and writable by its group only when
// that group is `group`, or owned by another user and in `group`.
// Otherwise errc::untrusted naming the owner, the mode and the fix; `what`
// says what the directory is ("lock directory").
failure check_trusted(os& sys, const file_status& st, const std::string& path, const char* step,
                      const char* what, std::optional<unsigned> group);

// The same for the directory open as `fd`.
failure check_trusted_fd(os& sys, int fd, const std::string& path, const char* step,
                         const char* what, std::optional<unsigned> group);

// The same for the directory at `path` (not followed when it is a
// symbolic link: that is refused too). Fails with the open's errno when it
// cannot be opened (ENOENT when missing).
failure check_trusted_path(os& sys, const std::string& path, const char* step, const char* what,
                           std::optional<unsigned> group);

// `name` as it may be shown in a message: bytes below 0x20, 0x7f and above
// as \xNN, so that a name planted by someone else cannot drive the terminal
// or forge lines in a log.
std::string shown_name(const std::string& name);

}  // namespace tokenlock::detail
