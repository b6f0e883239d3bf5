// The steps of an atomic write, shared by atomic_write/atomic_file and the
// fenced commit of update_file (which writes its temporary file inside the
// held token directory instead of beside the target).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cleanup_registry.hpp"
#include "core/failure.hpp"
#include "posix/os.hpp"
#include "lockdir/trust.hpp"
#include "tokenlock/atomic_write.hpp"

namespace tokenlock::detail {

struct write_target {
  std::string path;  // the file to replace (after following links, if asked)
  std::string dir;   // its directory ("." for a bare name)
  std::string name;  // its last component
  // A regular file is at `path` (never a symbolic link's destination: with
  // symlink_policy::replace a link is replaced as if nothing were there).
  bool exists = false;
  file_status existing;  // mode, owner, device of that file, by lstat
  std::uint64_t dir_device = 0;
};

// Checks the target and decides what is replaced. Fails for an empty path,
// a directory, a special file, a missing directory, a link loop, and (when
// following) a link another user may have planted (check_link).
failure resolve_target(os& sys, const boost::filesystem::path& target,
                       const write_options& options, write_target& out);

// "/" for "/x", "." for "x", else everything before the last '/'.
std::string parent_of(const std::string& path);

// Whether the symbolic link at `link` (lstat: `link_st`) may be followed:
// the kernel's protected_symlinks rule. In a directory that is sticky and
// writable by all (/tmp), a link is followed only when this process's user
// or the directory's owner owns it; anyone else's may have been planted to
// send a privileged writer or reader elsewhere. Fails with errc::untrusted
// ("refusing", the link, its owner, the fix); `step` names the caller's
// step ("write", "read").
failure check_link(os& sys, const char* step, const std::string& link,
                   const file_status& link_st);
// The path a link's text `to` leads to from the link at `link`.
std::string link_destination(const std::string& link, const std::string& to);


// ".<name>.tmp.<16 hex>"
std::string temp_name(const std::string& target_name, std::uint64_t nonce);
// Whether `name` has that form (for sweeping).
bool is_temp_name(std::string_view name) noexcept;

// A temporary file being written. Closing and removing it on failure is
// the caller's: abandon() does both.
struct temp_file {
  std::string path;
  int fd = -1;
  cleanup_entry record;  // for install_signal_cleanup()
};

// Creates the temporary file in `in_dir` with the target's mode (or the
// options' or the default) and, as root, its owner.
failure create_temp(os& sys, const write_target& target, const std::string& in_dir,
                    const write_options& options, temp_file& out);
// Writes all of `data`, continuing short writes.
failure write_all(os& sys, temp_file& file, std::string_view data, const write_target& target);
// Flushes per options.sync and closes. Afterwards fd is -1.
failure finish_temp(os& sys, temp_file& file, const write_options& options,
                    const write_target& target);
// Renames the finished temporary file over the target and syncs the
// directory (per options.sync). On a rename failure the temporary file is
// removed. `rename_from` lets the fenced commit name the temp file through
// the token's current path.
failure commit_temp(os& sys, const std::string& rename_from, const write_target& target,
                    const write_options& options);
// create_temp + write_all + finish_temp: a complete, closed temporary file
// in `in_dir` holding `data`, or a failure and no temporary file.
failure write_temp(os& sys, const write_target& target, const std::string& in_dir,
                   std::string_view data, const write_options& options, temp_file& out);
// Closes (if open) and removes the temporary file. Never fails.
void abandon(os& sys, temp_file& file) noexcept;

// Syncs the target's directory after a commit (per sync): errc::dir_sync_failed
// says that `done` ("the new contents are in place", "the update is
// committed") holds but may not survive a crash, and why, with the fix for
// a directory this user cannot open.
failure sync_target_directory(os& sys, const write_target& target, durability sync,
                              const char* done, const char* advice);

// "tokenlock: <step> <target>: <what>: <cause>" plus a hint for the errno.
failure write_failure(const char* step, const write_target& target, const std::string& what,
                      std::error_code ec);

}  // namespace tokenlock::detail
