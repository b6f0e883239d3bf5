// The slow path of the rename-token lock: looking at a lock directory,
// judging a held token, creating a missing directory, cleaning a taken-over
// workspace, and turning system errors into messages with a fix.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include <boost/filesystem/path.hpp>

#include "core/failure.hpp"
#include "posix/os.hpp"
#include "lockdir/token_name.hpp"
#include "lockdir/trust.hpp"
#include "tokenlock/lock_options.hpp"

namespace tokenlock {
class lock_handle;
}

namespace tokenlock::detail {

// The lock directory, open by descriptor once it was judged trustworthy
// (trust.hpp). Every rename, listing and removal inside it is made relative
// to `fd` (docs/security.md): whatever happens to the path afterwards, the
// lock works on the directory that was judged.
struct open_dir {
  open_dir(std::shared_ptr<os> sys, int fd, const file_status& st,
           std::optional<unsigned> group) noexcept;
  ~open_dir();
  open_dir(const open_dir&) = delete;
  open_dir& operator=(const open_dir&) = delete;
  std::shared_ptr<os> sys;
  int fd;
  std::uint64_t device;
  std::uint64_t inode;
  unsigned uid;  // its owner, who may also own the wait board beside it
  // The group trusted inside it (chosen_group, decided when it was judged):
  // tokens and workspaces of that group's members are trusted.
  std::optional<unsigned> group;
};

// A descriptor closed when it goes out of scope.
struct scoped_fd {
  os& sys;
  int fd = -1;
  ~scoped_fd() {
    if (fd >= 0) sys.close(fd);
  }
};

// The strings the protocol renames between, built once per lock.
struct lock_paths {
  boost::filesystem::path dir_path;  // as the caller named it
  std::string dir;        // the lock directory, without trailing '/'
  std::string dir_slash;  // dir + '/'
  std::string free_path;  // dir + "/lockfile"
  std::string board_path; // dir + ".wait": the wait board (wait_line.hpp)
  std::string parent;     // the directory that holds dir ("." or "/" at the top)
  std::string name;       // basename(dir): its entry in `parent`
  std::string init_prefix;  // name + ".init.": creation leftovers in parent
  // The mode of what the lock and its handles create (the lock directory,
  // the commit's workspace): created_mode() of `share`.
  unsigned dir_mode = 0755;
  // How the lock is shared (lock_options::dir_mode and group).
  sharing share;
  // The lock directory's descriptor, shared by the lock and its handles:
  // read and replaced only with std::atomic_load / std::atomic_store (a
  // waiter may reopen it while a handle releases through the old one).
  // Null until the first look at the directory, and while it is missing.
  mutable std::shared_ptr<const open_dir> opened;
  // Whether acquisitions leave owner marks (token_mark.hpp): -1 until the
  // first acquisition asks the filesystem, then 0 or 1.
  mutable std::atomic<int> owner_marks{-1};
};

// How `o` shares a lock (trust.hpp).
inline sharing sharing_of(const lock_options& o) { return sharing{o.dir_mode, o.group}; }

// Fails with bad_argument for an empty path, "/" or an embedded NUL.
failure make_lock_paths(const boost::filesystem::path& dir, lock_paths& out);

// The lock directory's descriptor: the one open already, or else the
// directory opened (without following a symbolic link) and judged now
// (check_trusted, with the group `share` chooses). `out` is null,
// without a failure, when the directory does not exist.
failure lock_directory_fd(const std::shared_ptr<os>& sys, const lock_paths& paths,
                          const sharing& share, const char* step,
                          std::shared_ptr<const open_dir>& out);

// For the slow path: whether `current` is still the directory at the lock's
// path (somebody may have removed the directory and a creator made a new
// one). Opens and judges the one there now when it is not, and stores it
// for the lock and its handles; `current` becomes null when the path is
// missing.
failure reopen_if_replaced(const std::shared_ptr<os>& sys, const lock_paths& paths,
                           const sharing& share, const char* step,
                           std::shared_ptr<const open_dir>& current);

// The lock directory a handle's token is in (null: none open).
std::shared_ptr<const open_dir> handle_directory(const lock_handle& h);
// The OS a handle works through, and its lock's dir_mode. The handle must
// hold a token (token() not empty).
os& handle_os(const lock_handle& h);
unsigned handle_dir_mode(const lock_handle& h);

// The descriptor the lock and its handles use now (null: none yet).
inline std::shared_ptr<const open_dir> current_dir(const lock_paths& paths) {
  return std::atomic_load(&paths.opened);
}

struct observed_token {
  std::string name;
  std::int64_t expiry_us = 0;  // legacy: when it was taken (no expiry of its own)
  std::string host_tag;
  int pid = 0;
  std::uint64_t start_time = 0;
  bool legacy = false;  // "lockfile<seconds>" (token_name.hpp)
};

// The observed form of a name that classify_name() found held or legacy.
observed_token observed(const std::string& name, const held_token& t, name_kind kind);

struct observation {
  enum kind_t {
    missing,  // the lock directory does not exist
    empty,    // it exists and holds nothing
    free,     // it holds "lockfile"
    held,     // it holds one held token: `token`
  } kind = missing;
  observed_token token;
};

// Lists the lock directory (open as `dir`; null: missing) and says what it holds. Conclusions that would be
// errors (no token, two tokens) are drawn only when a second listing a
// moment later agrees, because a listing is not a snapshot: a rename during
// readdir may hide a name or show it twice. Fails with token_missing,
// lock_corrupt or the listing's errno.
failure observe(os& sys, const lock_paths& paths, const open_dir* dir, const char* step,
                observation& out);

struct judgement {
  bool stale = false;
  bool same_host = false;
  owner_liveness owner = owner_liveness::unknown;
  std::string reason;
};

// Decides whether a held token may be taken over now (protocol §Stale).
judgement judge(os& sys, const lock_options& options, const observed_token& token);

// Creates the lock directory with its free token, atomically: a populated
// temporary directory beside it is renamed onto it, which succeeds only
// while the lock directory is missing or empty. Losing that race is success
// (somebody else created it). Leaves no temporary directory behind, unless
// killed while it exists: sweep_creation_leftovers() removes those.
failure create_lock_directory(os& sys, const lock_paths& paths, const lock_options& options);

// Removes the temporary directories (`D.init.<expiry>.<owner>`) of creators
// that died or stalled past their lease while creating the lock directory,
// judged like tokens (judge()). Lists the parent directory, so it runs only
// where that is already paid for or rare: after creating, after a takeover,
// and about once in leftover_sweep_every waits that find the lock held by a
// live holder (the waiter has time to spare; nothing else looks at the
// parent once the lock exists). Returns how many it removed.
std::size_t sweep_creation_leftovers(os& sys, const lock_paths& paths,
                                     const lock_options& options);
constexpr unsigned leftover_sweep_every = 32;

// Removes what a previous owner left in the token directory `token` (inside
// the lock directory open as `dir_fd`) that we took over, except, with
// `keep_marks`, owner marks (token_mark.hpp: they have been judged already,
// and ours is among them). Works by descriptor and never follows a
// symbolic link: a link is removed, not what it points to. Best effort: a
// leftover that cannot be removed stays, and is harmless.
void clear_workspace(os& sys, int dir_fd, const std::string& token, bool keep_marks);

// Builds the failure for a system error at `step`, with the hint that fits
// the errno: permissions, a sticky directory, a read-only filesystem, ...
// `entry` is the name inside the lock directory the step was renaming from
// (it decides whose uid a sticky-directory message names).
failure os_failure(os& sys, const lock_paths& paths, const char* step, const std::string& what,
                   const std::string& entry, std::error_code ec);

// "2026-11-21T08:14:03.123456Z" for messages and status text.
std::string format_utc(std::int64_t us);

}  // namespace tokenlock::detail
