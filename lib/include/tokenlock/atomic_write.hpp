// tokenlock/atomic_write.hpp — replacing a file so that it is never torn.
//
// Purpose
//   atomic_write() and atomic_file replace a file's contents so that every
//   reader, and the file after a crash, sees either the old contents or the
//   new ones, never a mix, a truncated file or an empty one. The new
//   contents go to a temporary file beside the target, which is written,
//   flushed and renamed over the target; then the directory is flushed.
//   Nothing is ever written outside the target's directory (unless the
//   caller asks to write through a symbolic link, and then only through
//   links that no other user may have planted). docs/atomic-writes.md has
//   the guarantees and what remains unguaranteed.
//
// Calling sequence
//     tokenlock::atomic_write("/srv/app/data/config.json", text);
//
//     tokenlock::atomic_file f("/srv/app/data/report.csv");
//     f.stream() << "a,b\n" << 1 << ',' << 2 << '\n';   // or f.write(...)
//     f.commit();          // without commit, the destructor rolls back
//
//   The temporary file is named ".<target name>.tmp.<16 hex digits>" and
//   created with O_CREAT|O_EXCL|O_NOFOLLOW. sweep_temp_files() removes the
//   ones left by writers that crashed.
//
// Permissions and ownership
//   The new file gets write_options::mode when it is set, exactly. Else it
//   gets the permission bits (0777) of the regular file it replaces, never
//   its setuid, setgid or sticky bit; else 0644 minus the umask. A process
//   running as root also gives it the replaced regular file's owner and
//   group (best effort: a failure to chown is not an error). What is
//   replaced is judged by the entry itself (lstat): a symbolic link that is
//   replaced lends nothing, neither the mode nor the owner of what it
//   points to, so the new file is made as if the name were free (the
//   caller's mode or 0644 minus the umask, owned by the caller). A replaced
//   file's hard links keep the old contents: the rename makes a new inode.
//
// Symbolic links
//   By default (symlink_policy::replace) a link at the target is replaced
//   and never followed. With symlink_policy::follow, each link of the chain
//   is checked as the kernel's protected_symlinks does: in a directory that
//   is sticky and writable by all (/tmp), a link is followed only when it
//   is owned by the caller or by the directory's owner. Another user's link
//   there is refused with errc::untrusted, and nothing is written: it may
//   have been planted to make a privileged writer write elsewhere.
//
// Errors
//   Throwing and error_code& forms as everywhere in tokenlock (errors.hpp).
//   On any failure the target is untouched and the temporary file removed;
//   the message names the step (create, write, sync, close, rename) and the
//   path. One failure comes after the rename: errc::dir_sync_failed means the
//   new contents are in place for every reader but the directory could not
//   be flushed, so a crash may bring the old file back.
//
// Thread safety
//   Independent calls are safe from any thread. One atomic_file must not be
//   used by two threads at once. Two writers of the same target both
//   succeed and the last rename wins: use update_file (update.hpp) to
//   serialise read-modify-write cycles.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <system_error>

#include <boost/filesystem/path.hpp>

#include "tokenlock/errors.hpp"

namespace tokenlock {

namespace detail {
struct file_access;  // the library's own way in
}

// How much is flushed before an atomic write reports success.
enum class durability {
  // Nothing: the rename is atomic for readers, but after a power failure
  // the file may be empty or old (the data may not have reached the disk).
  none,
  // fsync the new file before the rename: after a crash the target holds
  // the old or the new contents, whole; the rename itself may be undone.
  file,
  // Also fsync the directory after the rename: a crash after success
  // keeps the new contents. The default.
  file_and_dir,
};

enum class symlink_policy {
  // A target that is a symbolic link is replaced by a regular file; the
  // link's destination is left alone. Nothing is written outside the
  // target's directory. The default.
  replace,
  // Write to the file the link points to (resolving chains of links), with
  // the temporary file beside that file. In a sticky directory writable by
  // all, only links owned by the caller or by the directory's owner are
  // followed; another's is refused with errc::untrusted.
  follow,
};

struct write_options {
  durability sync = durability::file_and_dir;
  // Mode of the new file, applied exactly (regardless of the umask), also
  // when it replaces a file. Unset: the replaced regular file's permission
  // bits without setuid, setgid and sticky, or 0644 minus the umask.
  std::optional<unsigned> mode;
  symlink_policy symlinks = symlink_policy::replace;
};

// The names of the durability levels, as the command (--sync), the counter
// CGI (TOKENLOCK_COUNTER_SYNC) and configuration files spell them: "none",
// "file", "file_and_dir". std::nullopt for any other name.
std::optional<durability> durability_from_name(std::string_view name) noexcept;
const char* durability_name(durability level) noexcept;

// Replaces `target` with `data`. Fails with errno codes (ENOENT for a
// missing directory, EISDIR when the target is a directory, EACCES, ENOSPC,
// EDQUOT, EIO, EFBIG ...), errc::dir_sync_failed, errc::bad_argument, or
// errc::untrusted (a link refused under symlink_policy::follow).
void atomic_write(const boost::filesystem::path& target, std::string_view data,
                  const write_options& options = {});
void atomic_write(const boost::filesystem::path& target, std::string_view data,
                  const write_options& options, std::error_code& ec) noexcept;

// A file being written, that replaces its target only on commit().
class atomic_file {
 public:
  // Creates the temporary file. Throws lock_error (errno code) when it
  // cannot.
  explicit atomic_file(const boost::filesystem::path& target, const write_options& options = {});
  // As above; on failure, ec is set and the object is empty (everything
  // but rollback() fails with errc::bad_argument).
  atomic_file(const boost::filesystem::path& target, const write_options& options,
              std::error_code& ec) noexcept;
  atomic_file(atomic_file&&) noexcept;
  atomic_file& operator=(atomic_file&&) noexcept;
  atomic_file(const atomic_file&) = delete;
  atomic_file& operator=(const atomic_file&) = delete;
  ~atomic_file();  // rolls back unless committed

  // Appends to the temporary file (all of it: short writes are continued).
  void write(std::string_view data);
  void write(std::string_view data, std::error_code& ec) noexcept;
  // A buffered stream onto write(). Its failures set the stream's badbit
  // and are reported again by commit(), which flushes it. The same stream
  // stays available to the end; asking for the first one after the file is
  // committed, rolled back or failed, or of a moved-from object, fails
  // with errc::bad_argument.
  std::ostream& stream();
  // As above; nullptr and `ec` set when there is no stream to give.
  std::ostream* stream(std::error_code& ec) noexcept;

  // Flushes (per options.sync), renames over the target, syncs the
  // directory. After a failure before the rename, the temporary file is
  // gone and the target untouched; after dir_sync_failed, the new contents
  // are in place. Either way the object is finished.
  void commit();
  void commit(std::error_code& ec) noexcept;

  // Removes the temporary file; the target stays as it was. Idempotent, and
  // does nothing after commit.
  void rollback() noexcept;

  // The path the file will be renamed to, and where it is being written.
  const boost::filesystem::path& target() const noexcept;
  const boost::filesystem::path& temp_path() const noexcept;

 private:
  friend struct detail::file_access;
  struct impl;
  explicit atomic_file(std::unique_ptr<impl> started) noexcept;

  std::unique_ptr<impl> impl_;
};

// The most read_file() reads unless told otherwise, and the default of
// update_options::read_limit: 64 MiB.
constexpr std::uint64_t default_read_limit = std::uint64_t{64} << 20;

// The whole contents of the regular file `path`, or std::nullopt when it
// does not exist. Only a regular file is read: a FIFO, a device or a socket
// is refused with EINVAL, a directory with EISDIR, before anything is read
// (the open cannot block on a FIFO). A file larger than `limit` bytes
// (default_read_limit when not given) fails with EFBIG without being read.
// Symbolic links are followed, under the rule of symlink_policy::follow
// (errc::untrusted for another user's link in a sticky directory writable
// by all). Other failures (EACCES, EIO ...) are errors.
std::optional<std::string> read_file(const boost::filesystem::path& path);
std::optional<std::string> read_file(const boost::filesystem::path& path,
                                     std::error_code& ec) noexcept;
std::optional<std::string> read_file(const boost::filesystem::path& path, std::uint64_t limit);
std::optional<std::string> read_file(const boost::filesystem::path& path, std::uint64_t limit,
                                     std::error_code& ec) noexcept;

// Removes, from `dir`, temporary files of atomic writes (".<name>.tmp.<16
// hex>") not modified for `older_than`. Returns how many were removed.
// Only names of exactly that form are touched, and only regular files.
std::size_t sweep_temp_files(const boost::filesystem::path& dir,
                             std::chrono::seconds older_than);
std::size_t sweep_temp_files(const boost::filesystem::path& dir, std::chrono::seconds older_than,
                             std::error_code& ec) noexcept;

}  // namespace tokenlock
