// The operating-system seam.
//
// Every system call tokenlock makes goes through one `os` object: renames,
// directory listings, stat, kill, reading /proc, the clocks, sleeping,
// random numbers, directory watches and the wait board. The POSIX implementation
// (posix_os.cpp, with signals.hpp for what a signal handler and the Redis
// client's SIGPIPE guard need) is, with the lock servers' network code
// (lib/src/net/), the only code that includes system headers and calls the
// OS (hiredis makes its own socket calls); tests
// substitute their own implementation to inject failures, to drive the clocks
// and to play several processes (pids, hosts) inside one test.
//
// Conventions shared by every method:
// - EINTR is retried inside the implementation; callers never see it.
// - Failures come back as std::error_code in std::generic_category() holding
//   the errno value. The seam adds no context: the caller knows the step and
//   the path and builds the message (see describe() in failure.hpp), so
//   that the success path never formats a string.
// - Paths are plain strings; no method normalises them.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

namespace tokenlock::detail {

struct file_status {
  bool is_directory = false;
  bool is_regular = false;
  bool is_symlink = false;
  bool is_sticky = false;   // S_ISVTX on a directory
  unsigned mode = 0;        // permission bits only
  unsigned uid = 0;
  unsigned gid = 0;
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::uint64_t size = 0;
  std::int64_t mtime_us = 0;  // modification time, microseconds since the epoch
  // The type as ls -l shows it: '-' regular file, 'd' directory, 'l'
  // symbolic link, 'p' FIFO, 'c' character device, 'b' block device, 's'
  // socket, '?' anything else. For messages that say what a path is.
  char type = '?';
};

// The filesystem a path is on.
struct filesystem_info {
  // A local filesystem (ext4, xfs, btrfs, tmpfs, ...): one page cache for
  // every process of this host, so that a shared mapping is one memory and
  // whatever one process renames or writes, the next one reads. False for
  // network and FUSE filesystems, where each client caches on its own.
  bool local = false;
  // The type as the mount table names it ("ext4", "fuse.sshfs",
  // "fuse.glusterfs", "nfs4"), when asked for; empty when unknown.
  std::string name;
};

// What /proc/<pid>/stat says about one process.
struct process_status {
  char state = '?';              // field 3: R, S, D, Z (zombie), X (dead), ...
  std::uint64_t start_time = 0;  // field 22, clock ticks since boot
};

// Who this process is, for building owner tokens.
struct process_identity {
  int pid = 0;
  std::uint64_t start_time = 0;  // 0 when /proc could not be read
  // Sanitised host name, '-', 8 hex digits of a hash over boot id, pid
  // namespace and host name: equal tags mean kill(2) and /proc of this
  // process see the same processes as the token's owner did.
  std::string host_tag;
  unsigned euid = 0;
  // The effective group and the supplementary groups: whose directories a
  // lock shared with a group may trust (trust.hpp).
  std::vector<unsigned> groups;
};

// An early wake-up source for one directory (inotify on Linux). It watches
// only while armed: an armed watch makes every rename in the directory
// queue an event for it, a cost the lock holder pays, so waiters arm it
// for the time they wait.
class dir_watch {
 public:
  virtual ~dir_watch() = default;
  // Starts watching; false when the directory cannot be watched.
  virtual bool arm() noexcept = 0;
  // Stops watching and drops queued events.
  virtual void disarm() noexcept = 0;
  // Waits up to `timeout`. Returns true when an entry named `name` appeared
  // in the directory (created or renamed into it) during the wait, false on
  // timeout or when the watch cannot tell. A `name` ending in '*' stands
  // for every name that starts with what comes before it. Never fails: a
  // broken watch degrades to a plain sleep.
  virtual bool wait_for(const std::string& name,
                        std::chrono::microseconds timeout) noexcept = 0;
};

// Who, besides this process's user, may own a wait board it uses.
struct board_owners {
  unsigned uid = 0;               // the lock directory's owner
  std::optional<unsigned> group;  // the group chosen for sharing the lock
};

// Memory shared by the waiters of one lock on one host: a small file
// beside the lock directory (on a local filesystem only), mapped by each
// waiter, and a futex on its words. It decides only when waiters look at
// the lock, never who holds it, so that a board that is missing,
// unreadable or scribbled on costs latency and nothing else, and that
// latency is bounded (docs/protocol.md, The line of waiters).
class wait_board {
 public:
  static constexpr int words = 5;
  virtual ~wait_board() = default;
  // Word i (0 <= i < words), in memory shared with every process that
  // opened the same file. Accessed with atomic builtins only.
  virtual std::uint32_t* word(int i) noexcept = 0;
  // futex(FUTEX_WAIT): sleeps while word(i) holds `expected`, up to
  // `timeout`. True when woken or when the word had already changed;
  // false on timeout.
  virtual bool wait(int i, std::uint32_t expected,
                    std::chrono::microseconds timeout) noexcept = 0;
  // futex(FUTEX_WAKE) for one sleeper on word(i).
  virtual void wake_one(int i) noexcept = 0;
  // False once the board's file was truncated under the mapping: its words
  // are then private zeros, and the board is to be dropped and opened anew.
  virtual bool intact() const noexcept { return true; }
};

class os {
 public:
  virtual ~os() = default;

  // rename(2). Atomic replacement semantics of the platform.
  virtual std::error_code rename(const std::string& from,
                                 const std::string& to) noexcept = 0;
  // mkdir(2) followed by chmod(2) to exactly `mode`, so that the umask cannot
  // narrow a mode chosen for sharing a lock between users. On chmod failure
  // the directory is removed again.
  virtual std::error_code make_directory(const std::string& path,
                                         unsigned mode) noexcept = 0;
  virtual std::error_code remove_directory(const std::string& path) noexcept = 0;
  virtual std::error_code remove_file(const std::string& path) noexcept = 0;
  // lstat(2). ENOENT when missing.
  virtual std::error_code status(const std::string& path,
                                 file_status& out) noexcept = 0;
  // All names in a directory except "." and "..", in readdir order.
  // A listing is not a snapshot: names renamed during it may be missing or
  // appear twice (POSIX leaves it unspecified).
  virtual std::error_code list_directory(const std::string& path,
                                         std::vector<std::string>& names) = 0;
  // open(O_DIRECTORY) + fsync(2): makes renames inside `path` durable.
  virtual std::error_code sync_directory(const std::string& path) noexcept = 0;
  // stat(2), following symbolic links.
  virtual std::error_code status_following(const std::string& path,
                                           file_status& out) noexcept = 0;
  // readlink(2).
  virtual std::error_code read_link(const std::string& path, std::string& target) = 0;

  // --- inside a directory, by descriptor -----------------------------------
  // What a lock directory is worked on with (docs/security.md): a directory
  // is opened once, judged by fstat, and everything inside it is reached
  // relative to its descriptor, so that nobody can swap a path component
  // under us between the judging and the use. `at` is a descriptor from
  // open_directory() or `cwd`. No method follows a symbolic link in the last
  // component of `name`; the components before it are resolved as usual, so
  // callers pass single names where an entry could have been planted.
  static constexpr int cwd = -100;  // AT_FDCWD
  // openat(at, name, O_RDONLY|O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC): ELOOP or
  // ENOTDIR when `name` is a symbolic link or not a directory. A directory
  // that may be searched but not read is opened with O_PATH where the
  // platform has it: a base for the *at calls that cannot be listed.
  virtual std::error_code open_directory(int at, const std::string& name, int& fd) noexcept = 0;
  // fstatat(at, name, AT_SYMLINK_NOFOLLOW); an empty `name` is `at` itself.
  virtual std::error_code status_at(int at, const std::string& name,
                                    file_status& out) noexcept = 0;
  // renameat(2).
  virtual std::error_code rename_at(int from_at, const std::string& from, int to_at,
                                    const std::string& to) noexcept = 0;
  // mkdirat(2), then the mode applied exactly (as make_directory) through a
  // descriptor opened without following links. Both keep the setgid bit a
  // new directory inherits from a setgid parent, which gives its entries
  // the shared group (docs/security.md).
  virtual std::error_code make_directory_at(int at, const std::string& name,
                                            unsigned mode) noexcept = 0;
  // mkdirat(2) alone: the mode as the umask leaves it. For a directory
  // whose mode nobody reads (a share entry, docs/protocol.md), one system
  // call instead of make_directory_at's five.
  virtual std::error_code make_bare_directory_at(int at, const std::string& name,
                                                 unsigned mode) noexcept = 0;
  // unlinkat(2): rmdir with `directory`, unlink otherwise. Never follows.
  virtual std::error_code remove_at(int at, const std::string& name, bool directory) noexcept = 0;
  // All names in the directory open as `fd` except "." and "..", from its
  // start; `fd` stays open and usable.
  virtual std::error_code list_directory_at(int fd, std::vector<std::string>& names) = 0;
  // openat(at, name, O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, mode).
  virtual std::error_code create_exclusive_at(int at, const std::string& name, unsigned mode,
                                              int& fd) noexcept = 0;

  // --- files, by descriptor ---------------------------------------------
  // open(O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, mode): a new file
  // that cannot be a symlink planted by someone else.
  virtual std::error_code create_exclusive(const std::string& path, unsigned mode,
                                           int& fd) noexcept = 0;
  // open(O_RDONLY|O_CLOEXEC|O_NOFOLLOW|O_NONBLOCK). A symbolic link at the
  // path is not followed (ELOOP): a caller that follows links resolves
  // them itself, checking each one (read_file_impl). O_NONBLOCK makes the
  // open of a FIFO return at once instead of waiting for a writer, so that
  // the caller's fstat can refuse it; reads of a regular file ignore it.
  virtual std::error_code open_read(const std::string& path, int& fd) noexcept = 0;
  // One write(2): `written` may be less than `size` (a short write); the
  // caller loops. EINTR before anything was written is retried.
  virtual std::error_code write(int fd, const char* data, std::size_t size,
                                std::size_t& written) noexcept = 0;
  // One read(2); `got` 0 means end of file.
  virtual std::error_code read(int fd, char* data, std::size_t size,
                               std::size_t& got) noexcept = 0;
  // fsync(2), or F_FULLFSYNC where the platform has it (macOS), which also
  // flushes the drive's cache.
  virtual std::error_code sync_file(int fd) noexcept = 0;
  // close(2). Its error counts (NFS reports write errors here); the
  // descriptor is gone either way.
  virtual std::error_code close(int fd) noexcept = 0;
  virtual std::error_code file_status_of(int fd, file_status& out) noexcept = 0;
  virtual std::error_code set_mode(int fd, unsigned mode) noexcept = 0;
  virtual std::error_code set_owner(int fd, unsigned uid, unsigned gid) noexcept = 0;
  // The process's umask, read without changing it where possible.
  virtual unsigned umask_value() noexcept = 0;

  // kill(pid, 0): success, ESRCH (no such process) or EPERM (exists, owned
  // by someone else).
  virtual std::error_code signal_probe(int pid) noexcept = 0;
  // Reads /proc/<pid>/stat. ENOENT when the process is gone or hidden
  // (hidepid), other codes when /proc is unreadable.
  virtual std::error_code read_process_status(int pid,
                                              process_status& out) noexcept = 0;

  // CLOCK_REALTIME in microseconds since the Unix epoch: lease expiries.
  virtual std::int64_t wall_now_us() noexcept = 0;
  // CLOCK_MONOTONIC in microseconds: wait budgets.
  virtual std::int64_t steady_now_us() noexcept = 0;
  virtual void sleep_for(std::chrono::microseconds d) noexcept = 0;
  // Uniformly random 64 bits. Cheap: no system call after the first use in a
  // process (a generator seeded from getrandom(2), reseeded after fork).
  virtual std::uint64_t random_u64() noexcept = 0;

  // This process. Cheap after the first call; recomputed after fork.
  virtual const process_identity& self() = 0;

  // The gid of the group `name` (getgrnam_r), or of the decimal number
  // `name` as it is. ENOENT when there is no such group.
  virtual std::error_code group_id(const std::string& name, unsigned& gid) = 0;
  // Changes in a child after fork(2). A lock remembers the generation that
  // acquired it, so a child never releases its parent's token, without a
  // getpid(2) call on the fast path.
  virtual std::uint64_t fork_generation() noexcept = 0;

  // Returns a disarmed watch on `dir`, or nullptr where none is available.
  virtual std::unique_ptr<dir_watch> watch_directory(const std::string& dir) = 0;

  // statfs(2) of `path` (which must exist); with `with_name`, also the
  // type from the mount table (for messages: it reads /proc/self/mountinfo).
  virtual std::error_code filesystem_of(const std::string& path, bool with_name,
                                        filesystem_info& out) = 0;

  // Opens and maps the wait board at `path`, creating it with exactly `mode`
  // when it is missing and `create` is set. Fails with ENOENT when it is
  // missing and `create` is not; ENOTSUP where no board is used (no futex
  // on this platform; not a regular file; a filesystem on which a shared
  // mapping is not one memory for this host: network and FUSE filesystems);
  // or the errno of the step that failed. Never leaves a file it could not
  // map safely, except one another process is still setting up.
  // An existing file is judged by fstat before anything is written to it or
  // its size changed, because the name is in a directory others may write
  // (a hard link there may name a file of the caller's): it is used only
  // when it is a regular file with one link, owned by this process's
  // effective user, by `owners.uid` (the lock directory's owner) or in
  // `owners.group` (the group chosen for sharing the lock), of size 0 or
  // the board's; otherwise EPERM and the file is left exactly as it was.
  virtual std::error_code open_wait_board(const std::string& path, unsigned mode, bool create,
                                          const board_owners& owners,
                                          std::unique_ptr<wait_board>& out) = 0;
};

// The process-wide POSIX implementation.
std::shared_ptr<os> system_os();

}  // namespace tokenlock::detail
