// The POSIX implementation of the OS seam: the only file in the library that
// calls the operating system.
#include "posix/os.hpp"

#include "core/fnv1a.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string_view>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#endif

namespace tokenlock::detail {
namespace {

std::error_code errno_code(int e) { return {e, std::generic_category()}; }
std::error_code last_errno() { return errno_code(errno); }

template <class F>
int retry_eintr(F f) {
  int r;
  do {
    r = f();
  } while (r == -1 && errno == EINTR);
  return r;
}

// Filesystems on which a shared mapping is one page of memory for every
// process of this host, and a file's size is what fstat says. On a network
// or FUSE filesystem neither holds: a FUSE client may report the size
// another process just set with ftruncate before its own page cache knows
// it, and the first store into the mapping then dies of SIGBUS; a mapping
// of a file that another host's client also writes is overwritten by that
// client's copy at random times; some clients refuse MAP_SHARED (ENODEV).
// The line of waiters only times the waits, so waiters on any other
// filesystem simply poll; and the updater checks there that what it read
// is the version last committed (update.cpp).
bool local_filesystem_type(long type) {
  switch (static_cast<unsigned long>(type)) {
    case 0xEF53UL:      // ext2, ext3, ext4
    case 0x58465342UL:  // xfs
    case 0x9123683EUL:  // btrfs
    case 0x01021994UL:  // tmpfs
    case 0x858458F6UL:  // ramfs
    case 0xF2F52010UL:  // f2fs
    case 0x794C7630UL:  // overlayfs (containers)
    case 0x2FC12FC1UL:  // zfs
    case 0x52654973UL:  // reiserfs
    case 0x3153464AUL:  // jfs
    case 0xCA451A4EUL:  // bcachefs
    case 0x3434UL:      // nilfs2
      return true;
    default: return false;
  }
}

// Bumped in the child by pthread_atfork. Everything derived from the process
// (identity, random seed) compares against it instead of calling getpid(2).
std::atomic<std::uint64_t> g_fork_generation{0};
void on_fork_child() { g_fork_generation.fetch_add(1, std::memory_order_relaxed); }

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}


std::string read_small_file(const char* path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

std::string readlink_string(const char* path) {
  char buf[256];
  ssize_t n = ::readlink(path, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::error_code fill_random(void* buf, size_t len) {
  auto* p = static_cast<unsigned char*>(buf);
#if defined(__linux__)
  while (len > 0) {
    ssize_t n = ::getrandom(p, len, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return last_errno();
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return {};
#else
  int fd = retry_eintr([] { return ::open("/dev/urandom", O_RDONLY | O_CLOEXEC); });
  if (fd < 0) return last_errno();
  while (len > 0) {
    ssize_t n = ::read(fd, p, len);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      auto ec = n < 0 ? last_errno() : errno_code(EIO);
      ::close(fd);
      return ec;
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  ::close(fd);
  return {};
#endif
}

// /proc/<pid>/stat: "pid (comm) state ppid ...". comm may contain spaces and
// parentheses, so fields are counted from the last ')'.
bool parse_proc_stat(std::string_view line, process_status& out) {
  auto close = line.rfind(')');
  if (close == std::string_view::npos) return false;
  std::string_view rest = line.substr(close + 1);
  int field = 2;  // the ')' ends field 2
  size_t i = 0;
  while (i < rest.size()) {
    while (i < rest.size() && rest[i] == ' ') ++i;
    size_t j = i;
    while (j < rest.size() && rest[j] != ' ') ++j;
    if (j == i) break;
    ++field;
    std::string_view tok = rest.substr(i, j - i);
    if (field == 3) out.state = tok[0];
    if (field == 22) {
      std::uint64_t v = 0;
      for (char c : tok) {
        if (c < '0' || c > '9') return false;
        v = v * 10 + static_cast<std::uint64_t>(c - '0');
      }
      out.start_time = v;
      return true;
    }
    i = j;
  }
  return false;
}

std::string sanitized_host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "host";
  std::string out;
  for (const char* p = buf; *p && out.size() < 32; ++p) {
    char c = *p;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '-';
    out.push_back(ok ? c : '_');
  }
  return out;
}

#if defined(__linux__)
class inotify_watch final : public dir_watch {
 public:
  inotify_watch(int fd, std::string dir) : fd_(fd), dir_(std::move(dir)) {}
  ~inotify_watch() override { ::close(fd_); }

  bool arm() noexcept override {
    if (wd_ >= 0) return true;
    wd_ = ::inotify_add_watch(fd_, dir_.c_str(),
                              IN_MOVED_TO | IN_CREATE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR);
    return wd_ >= 0;
  }

  // inotify_rm_watch frees the mark asynchronously; closing the instance
  // instead would wait for an SRCU grace period, milliseconds.
  void disarm() noexcept override {
    if (wd_ >= 0) ::inotify_rm_watch(fd_, wd_);
    wd_ = -1;
    alignas(inotify_event) char buf[4096];
    while (::read(fd_, buf, sizeof buf) > 0) {
    }
  }

  // `pattern` is a name, or a prefix followed by '*' (dir_watch::wait_for).
  static bool names_match(const std::string& pattern, const char* name) noexcept {
    if (!pattern.empty() && pattern.back() == '*')
      return std::strncmp(name, pattern.data(), pattern.size() - 1) == 0;
    return pattern == name;
  }

  bool wait_for(const std::string& name, std::chrono::microseconds timeout) noexcept override {
    timespec start{};
    ::clock_gettime(CLOCK_MONOTONIC, &start);
    const std::int64_t start_us = start.tv_sec * 1000000LL + start.tv_nsec / 1000;
    for (;;) {
      timespec now{};
      ::clock_gettime(CLOCK_MONOTONIC, &now);
      std::int64_t left = timeout.count() - (now.tv_sec * 1000000LL + now.tv_nsec / 1000 - start_us);
      if (left <= 0) return false;
      timespec ts{static_cast<time_t>(left / 1000000), static_cast<long>(left % 1000000) * 1000};
      pollfd pfd{fd_, POLLIN, 0};
      int r = ::ppoll(&pfd, 1, &ts, nullptr);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      alignas(inotify_event) char buf[4096];
      ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n <= 0) {
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        return false;
      }
      for (char* p = buf; p < buf + n;) {
        auto* ev = reinterpret_cast<inotify_event*>(p);
        if (ev->mask & (IN_Q_OVERFLOW | IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) return true;
        if (ev->len > 0 && names_match(name, ev->name)) return true;
        p += sizeof(inotify_event) + ev->len;
      }
    }
  }

 private:
  int fd_;
  std::string dir_;
  int wd_ = -1;
};

// Truncation guard for mapped boards. Anyone who may write the board can
// also truncate it (`: > D.wait`, an editor, a clean-up script), and a
// store into a mapped page past the end of its file raises SIGBUS, which
// would kill a process that merely waits for a lock. So a SIGBUS handler,
// installed once with the first board, looks up the faulting address: on a
// board it puts zeroed private memory in the page's place, so that the
// access completes, and marks the board broken (the waiter drops it and
// maps the file afresh on its next wait). Any other SIGBUS gets what it
// would have got without us: the previous handler, or the default action.
namespace board_guard {

constexpr std::size_t page = 4096;
constexpr int slots = 256;
std::atomic<char*> base[slots];
std::atomic<bool> broken[slots];
struct sigaction previous;

void on_sigbus(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  char* const addr = static_cast<char*>(info->si_addr);
  for (int i = 0; i < slots; ++i) {
    char* const b = base[i].load(std::memory_order_acquire);
    if (b == nullptr || addr < b || addr >= b + page) continue;
    // mmap(2) is a plain system call here, safe in a handler.
    if (::mmap(b, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) !=
        MAP_FAILED) {
      broken[i].store(true, std::memory_order_release);
      errno = saved_errno;
      return;
    }
    break;  // the access would fault again: let it end as it would have
  }
  if (previous.sa_flags & SA_SIGINFO) {
    previous.sa_sigaction(sig, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
  } else {
    // SIGBUS stays blocked until we return, then the default action ends
    // the process as it would have without this handler.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(SIGBUS, &dfl, nullptr);
    ::raise(SIGBUS);
  }
  errno = saved_errno;
}

bool install() {
  static const bool installed = [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    return ::sigaction(SIGBUS, &sa, &previous) == 0;
  }();
  return installed;
}

// The slot now guarding the page at `b`, or -1 when none is free.
int enter(char* b) {
  if (!install()) return -1;
  for (int i = 0; i < slots; ++i) {
    char* expected = nullptr;
    if (base[i].compare_exchange_strong(expected, b, std::memory_order_acq_rel)) {
      // Nothing reads the new board's flag before this returns.
      broken[i].store(false, std::memory_order_release);
      return i;
    }
  }
  return -1;
}

void leave(int slot) { base[slot].store(nullptr, std::memory_order_release); }

}  // namespace board_guard

// The wait board: one page of a file beside the lock directory, shared by
// mapping. The file is never shrunk by tokenlock; a mapping outlives the
// descriptor and the file's name.
class mapped_board final : public wait_board {
 public:
  static constexpr std::size_t file_size = board_guard::page;
  mapped_board(void* base, int slot) : base_(base), slot_(slot) {}
  ~mapped_board() override {
    board_guard::leave(slot_);
    ::munmap(base_, file_size);
  }

  std::uint32_t* word(int i) noexcept override { return static_cast<std::uint32_t*>(base_) + i; }

  bool intact() const noexcept override {
    return !board_guard::broken[slot_].load(std::memory_order_acquire);
  }

  bool wait(int i, std::uint32_t expected, std::chrono::microseconds timeout) noexcept override {
    if (timeout.count() <= 0) return false;
    timespec ts{static_cast<time_t>(timeout.count() / 1000000),
                static_cast<long>(timeout.count() % 1000000) * 1000};
    // A shared (not private) futex: the key is the file's page, so it
    // works between processes.
    long r = ::syscall(SYS_futex, word(i), FUTEX_WAIT, expected, &ts, nullptr, 0);
    if (r == 0) return true;
    // EAGAIN: the word changed before we slept. EINTR: the caller loops
    // and looks at the lock anyway.
    return errno == EAGAIN || errno == EINTR;
  }

  void wake_one(int i) noexcept override {
    ::syscall(SYS_futex, word(i), FUTEX_WAKE, 1, nullptr, nullptr, 0);
  }

 private:
  void* base_;
  int slot_;
};

// The type of the mount that holds `path`, from the line of
// /proc/self/mountinfo with the same device number ("fuse.sshfs"); empty
// when it cannot be told.
std::string mount_type(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  const std::string dev =
      std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw"
    std::size_t a = line.find(' ');
    if (a == std::string::npos) continue;
    a = line.find(' ', a + 1);
    if (a == std::string::npos) continue;
    const std::size_t b = line.find(' ', a + 1);
    if (b == std::string::npos || line.compare(a + 1, b - a - 1, dev) != 0) continue;
    const std::size_t sep = line.find(" - ");
    if (sep == std::string::npos) continue;
    const std::size_t t = sep + 3, e = line.find(' ', t);
    return line.substr(t, e == std::string::npos ? std::string::npos : e - t);
  }
  return {};
}

// Whether an open board file may be written and sized: see
// os::open_wait_board. A hard link planted beside the lock to a file of the
// caller's has two links; a file of another size is no board.
std::error_code judge_board(const struct stat& st, const board_owners& owners) {
  const bool ours = st.st_uid == ::geteuid() || st.st_uid == owners.uid ||
                    (owners.group && st.st_gid == *owners.group);
  if (!S_ISREG(st.st_mode) || st.st_nlink != 1 || !ours ||
      (st.st_size != 0 && static_cast<std::size_t>(st.st_size) != mapped_board::file_size))
    return errno_code(EPERM);
  return {};
}

// The board's descriptor (-1 with errno set): opened, or created with
// exactly `mode` when missing and `create` is set.
int open_board_file(const std::string& path, unsigned mode, bool create) {
  // The board nearly always exists: open it first, because an open with
  // O_CREAT locks the directory, which the lock's holder renames in.
  // O_NONBLOCK and O_NOCTTY: a FIFO or a terminal planted there neither
  // blocks the open nor becomes ours; fstat refuses both afterwards.
  auto open_existing = [&] {
    return retry_eintr([&] {
      return ::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    });
  };
  int fd = open_existing();
  if (fd >= 0 || errno != ENOENT || !create) return fd;
  // Decided before the file exists, so that no filesystem where it would
  // not be used gets one.
  const auto slash = path.rfind('/');
  const std::string parent =
      slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  struct statfs sfs {};
  if (retry_eintr([&] { return ::statfs(parent.c_str(), &sfs); }) != 0) return -1;
  if (!local_filesystem_type(static_cast<long>(sfs.f_type))) {
    errno = ENOTSUP;
    return -1;
  }
  fd = retry_eintr([&] {
    return ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  static_cast<mode_t>(mode));
  });
  if (fd >= 0)
    // Exactly `mode`, whatever the umask: the board is shared like the lock.
    (void)::fchmod(fd, static_cast<mode_t>(mode));
  else if (errno == EEXIST)
    fd = open_existing();
  return fd;
}

std::error_code map_board(const std::string& path, unsigned mode, bool create,
                          const board_owners& owners, std::unique_ptr<wait_board>& out) {
  out.reset();
  const int fd = open_board_file(path, mode, create);
  if (fd < 0) return last_errno();
  std::error_code ec;
  struct stat st {};
  struct statfs sfs {};
  void* base = MAP_FAILED;
  if (::fstat(fd, &st) != 0 || ::fstatfs(fd, &sfs) != 0)
    ec = last_errno();
  else if ((ec = judge_board(st, owners)))
    ;
  else if (!local_filesystem_type(static_cast<long>(sfs.f_type)))
    ec = errno_code(ENOTSUP);  // a board left by an older version on such a filesystem, too
  else if (static_cast<std::size_t>(st.st_size) < mapped_board::file_size &&
           ::ftruncate(fd, mapped_board::file_size) != 0)
    ec = last_errno();
  else if ((base = ::mmap(nullptr, mapped_board::file_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                          fd, 0)) == MAP_FAILED)
    ec = last_errno();
  ::close(fd);
  if (ec) return ec;
  // Guarded before its first access (board_guard).
  const int slot = board_guard::enter(static_cast<char*>(base));
  if (slot < 0) {
    ::munmap(base, mapped_board::file_size);
    return errno_code(ENOTSUP);
  }
  out = std::make_unique<mapped_board>(base, slot);
  return {};
}
#endif

class posix_os final : public os {
 public:
  posix_os() {
    static std::once_flag registered;
    std::call_once(registered, [] { ::pthread_atfork(nullptr, nullptr, on_fork_child); });
  }

  std::error_code rename(const std::string& from, const std::string& to) noexcept override {
    if (retry_eintr([&] { return ::rename(from.c_str(), to.c_str()); }) != 0) return last_errno();
    return {};
  }

  std::error_code make_directory(const std::string& path, unsigned mode) noexcept override {
    if (retry_eintr([&] { return ::mkdir(path.c_str(), static_cast<mode_t>(mode)); }) != 0)
      return last_errno();
    struct stat st {};
    const mode_t keep = ::lstat(path.c_str(), &st) == 0 ? (st.st_mode & S_ISGID) : 0;  // as make_directory_at
    if (retry_eintr([&] { return ::chmod(path.c_str(), static_cast<mode_t>(mode) | keep); }) != 0) {
      auto ec = last_errno();
      ::rmdir(path.c_str());
      return ec;
    }
    return {};
  }

  std::error_code remove_directory(const std::string& path) noexcept override {
    if (retry_eintr([&] { return ::rmdir(path.c_str()); }) != 0) return last_errno();
    return {};
  }

  std::error_code remove_file(const std::string& path) noexcept override {
    if (retry_eintr([&] { return ::unlink(path.c_str()); }) != 0) return last_errno();
    return {};
  }

  std::error_code status(const std::string& path, file_status& out) noexcept override {
    struct stat st {};
    if (retry_eintr([&] { return ::lstat(path.c_str(), &st); }) != 0) return last_errno();
    fill_status(st, out);
    return {};
  }

  std::error_code status_following(const std::string& path, file_status& out) noexcept override {
    struct stat st {};
    if (retry_eintr([&] { return ::stat(path.c_str(), &st); }) != 0) return last_errno();
    fill_status(st, out);
    return {};
  }

  std::error_code read_link(const std::string& path, std::string& target) override {
    std::string buf(256, '\0');
    for (;;) {
      ssize_t n = ::readlink(path.c_str(), &buf[0], buf.size());
      if (n < 0) return last_errno();
      if (static_cast<size_t>(n) < buf.size()) {
        buf.resize(static_cast<size_t>(n));
        target = std::move(buf);
        return {};
      }
      buf.resize(buf.size() * 2);
    }
  }

  std::error_code open_directory(int at, const std::string& name, int& fd) noexcept override {
    fd = retry_eintr([&] {
      return ::openat(at, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    });
#if defined(O_PATH)
    // A directory this user may search and write but not read (a drop
    // directory, mode 0333) still serves as the base of *at calls.
    if (fd < 0 && errno == EACCES)
      fd = retry_eintr([&] {
        return ::openat(at, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      });
#endif
    return fd < 0 ? last_errno() : std::error_code{};
  }

  std::error_code status_at(int at, const std::string& name, file_status& out) noexcept override {
    struct stat st {};
    const int r = name.empty() ? retry_eintr([&] { return ::fstat(at, &st); })
                               : retry_eintr([&] {
                                   return ::fstatat(at, name.c_str(), &st, AT_SYMLINK_NOFOLLOW);
                                 });
    if (r != 0) return last_errno();
    fill_status(st, out);
    return {};
  }

  std::error_code rename_at(int from_at, const std::string& from, int to_at,
                            const std::string& to) noexcept override {
    if (retry_eintr([&] { return ::renameat(from_at, from.c_str(), to_at, to.c_str()); }) != 0)
      return last_errno();
    return {};
  }

  std::error_code make_bare_directory_at(int at, const std::string& name,
                                         unsigned mode) noexcept override {
    if (retry_eintr([&] { return ::mkdirat(at, name.c_str(), static_cast<mode_t>(mode)); }) != 0)
      return last_errno();
    return {};
  }

  std::error_code make_directory_at(int at, const std::string& name,
                                    unsigned mode) noexcept override {
    if (retry_eintr([&] { return ::mkdirat(at, name.c_str(), static_cast<mode_t>(mode)); }) != 0)
      return last_errno();
    int fd = -1;
    std::error_code ec = open_directory(at, name, fd);
    struct stat st {};
    if (!ec && ::fstat(fd, &st) != 0) ec = last_errno();
    // The setgid bit a directory inherits from a setgid parent stays: it is
    // what gives the entries of a group-shared directory its group.
    const mode_t keep = st.st_mode & S_ISGID;
    if (!ec && retry_eintr([&] { return ::fchmod(fd, static_cast<mode_t>(mode) | keep); }) != 0)
      ec = last_errno();
    if (fd >= 0) ::close(fd);
    if (ec) ::unlinkat(at, name.c_str(), AT_REMOVEDIR);
    return ec;
  }

  std::error_code remove_at(int at, const std::string& name, bool directory) noexcept override {
    if (retry_eintr([&] { return ::unlinkat(at, name.c_str(), directory ? AT_REMOVEDIR : 0); }) != 0)
      return last_errno();
    return {};
  }

  std::error_code list_directory_at(int fd, std::vector<std::string>& names) override {
    // A listing of its own: readdir moves the position of the descriptor it
    // reads, which other threads may be listing through too.
    int own = -1;
    if (auto ec = open_directory(fd, ".", own)) return ec;
    return list_open_directory(own, names);
  }

  std::error_code create_exclusive_at(int at, const std::string& name, unsigned mode,
                                      int& fd) noexcept override {
    fd = retry_eintr([&] {
      return ::openat(at, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                      static_cast<mode_t>(mode));
    });
    return fd < 0 ? last_errno() : std::error_code{};
  }

  std::error_code create_exclusive(const std::string& path, unsigned mode, int& fd) noexcept override {
    fd = retry_eintr([&] {
      return ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    static_cast<mode_t>(mode));
    });
    return fd < 0 ? last_errno() : std::error_code{};
  }

  std::error_code open_read(const std::string& path, int& fd) noexcept override {
    fd = retry_eintr(
        [&] { return ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK); });
    return fd < 0 ? last_errno() : std::error_code{};
  }

  std::error_code write(int fd, const char* data, std::size_t size,
                        std::size_t& written) noexcept override {
    ssize_t n;
    do {
      n = ::write(fd, data, size);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      written = 0;
      return last_errno();
    }
    written = static_cast<std::size_t>(n);
    return {};
  }

  std::error_code read(int fd, char* data, std::size_t size, std::size_t& got) noexcept override {
    ssize_t n;
    do {
      n = ::read(fd, data, size);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      got = 0;
      return last_errno();
    }
    got = static_cast<std::size_t>(n);
    return {};
  }

  std::error_code sync_file(int fd) noexcept override {
#if defined(F_FULLFSYNC)
    if (::fcntl(fd, F_FULLFSYNC) == 0) return {};
    // Filesystems that do not support it fall back to fsync.
#endif
    if (retry_eintr([&] { return ::fsync(fd); }) != 0) return last_errno();
    return {};
  }

  std::error_code close(int fd) noexcept override {
    // Not retried on EINTR: on Linux the descriptor is released before the
    // interruption, and a retry could close a descriptor another thread
    // just opened.
    if (::close(fd) != 0 && errno != EINTR) return last_errno();
    return {};
  }

  std::error_code file_status_of(int fd, file_status& out) noexcept override {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return last_errno();
    fill_status(st, out);
    return {};
  }

  std::error_code set_mode(int fd, unsigned mode) noexcept override {
    if (retry_eintr([&] { return ::fchmod(fd, static_cast<mode_t>(mode)); }) != 0) return last_errno();
    return {};
  }

  std::error_code set_owner(int fd, unsigned uid, unsigned gid) noexcept override {
    if (retry_eintr([&] { return ::fchown(fd, static_cast<uid_t>(uid), static_cast<gid_t>(gid)); }) != 0)
      return last_errno();
    return {};
  }

  unsigned umask_value() noexcept override {
    // /proc/self/status has it read-only (Linux 4.7+); umask(2) can only
    // read it by setting it, which races with other threads creating files.
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("Umask:", 0) == 0) return static_cast<unsigned>(std::stoul(line.substr(6), nullptr, 8));
    }
    static std::mutex m;
    std::lock_guard<std::mutex> lock(m);
    mode_t old = ::umask(022);
    ::umask(old);
    return old;
  }

  std::error_code list_directory(const std::string& path,
                                 std::vector<std::string>& names) override {
    int fd = retry_eintr([&] {
      return ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    });
    if (fd < 0) return last_errno();
    return list_open_directory(fd, names);
  }

  // Lists and closes `fd`. getdents64(2) into a buffer of our own: a DIR
  // stream (fdopendir) costs an fstat and two fcntl calls more per listing,
  // and a shared lock's holders list at every join and leave.
  static std::error_code list_open_directory(int fd, std::vector<std::string>& names) {
    names.clear();
    alignas(8) char buf[32768];
    for (;;) {
      const ssize_t n = ::getdents64(fd, buf, sizeof buf);
      if (n < 0) {
        if (errno == EINTR) continue;
        auto ec = last_errno();
        ::close(fd);
        return ec;
      }
      if (n == 0) break;
      for (ssize_t at = 0; at < n;) {
        const auto* e = reinterpret_cast<const dirent64*>(buf + at);
        at += e->d_reclen;
        if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
        names.emplace_back(e->d_name);
      }
    }
    ::close(fd);
    return {};
  }

  std::error_code sync_directory(const std::string& path) noexcept override {
    int fd = retry_eintr([&] { return ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); });
    if (fd < 0) return last_errno();
    std::error_code ec;
    if (retry_eintr([&] { return ::fsync(fd); }) != 0) ec = last_errno();
    ::close(fd);
    return ec;
  }

  std::error_code signal_probe(int pid) noexcept override {
    if (pid <= 0) return errno_code(EINVAL);  // 0 and -1 address groups, never one process
    if (::kill(static_cast<pid_t>(pid), 0) != 0) return last_errno();
    return {};
  }

  std::error_code read_process_status(int pid, process_status& out) noexcept override {
    if (pid <= 0) return errno_code(EINVAL);
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = retry_eintr([&] { return ::open(path, O_RDONLY | O_CLOEXEC); });
    if (fd < 0) return last_errno();
    char buf[1024];
    ssize_t n;
    do {
      n = ::read(fd, buf, sizeof buf - 1);
    } while (n < 0 && errno == EINTR);
    auto ec = n < 0 ? last_errno() : std::error_code{};
    ::close(fd);
    if (ec) return ec;
    // A process that exits between open and read yields an empty file.
    if (n == 0) return errno_code(ENOENT);
    if (!parse_proc_stat(std::string_view(buf, static_cast<size_t>(n)), out))
      return errno_code(EPROTO);
    return {};
  }

  std::int64_t wall_now_us() noexcept override { return clock_us(CLOCK_REALTIME); }
  std::int64_t steady_now_us() noexcept override { return clock_us(CLOCK_MONOTONIC); }

  void sleep_for(std::chrono::microseconds d) noexcept override {
    if (d.count() <= 0) return;
    timespec ts{static_cast<time_t>(d.count() / 1000000), static_cast<long>(d.count() % 1000000) * 1000};
    while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }

  std::uint64_t random_u64() noexcept override {
    std::uint64_t gen = g_fork_generation.load(std::memory_order_relaxed);
    if (seed_generation_.load(std::memory_order_acquire) != gen + 1) reseed(gen);
    return splitmix64(seed_.load(std::memory_order_relaxed) +
                      counter_.fetch_add(0x9e3779b97f4a7c15ULL, std::memory_order_relaxed));
  }

  std::error_code group_id(const std::string& name, unsigned& gid) override {
    if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos &&
        name.size() < 10) {
      gid = static_cast<unsigned>(std::stoul(name));
      return {};
    }
    group g{};
    group* found = nullptr;
    std::vector<char> buf(4096);
    int err = 0;
    while ((err = ::getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &found)) == ERANGE &&
           buf.size() < (1u << 20))
      buf.resize(buf.size() * 2);
    if (err) return errno_code(err);
    if (!found) return errno_code(ENOENT);
    gid = static_cast<unsigned>(g.gr_gid);
    return {};
  }

  const process_identity& self() override {
    std::uint64_t gen = g_fork_generation.load(std::memory_order_relaxed);
    if (identity_generation_.load(std::memory_order_acquire) == gen + 1) return identity_;
    std::lock_guard<std::mutex> lock(identity_mutex_);
    if (identity_generation_.load(std::memory_order_relaxed) != gen + 1) {
      process_identity id;
      id.pid = static_cast<int>(::getpid());
      id.euid = static_cast<unsigned>(::geteuid());
      id.groups.push_back(static_cast<unsigned>(::getegid()));
      const int n = ::getgroups(0, nullptr);
      if (n > 0) {
        std::vector<gid_t> g(static_cast<std::size_t>(n));
        const int got = ::getgroups(n, g.data());
        for (int i = 0; i < got; ++i) id.groups.push_back(static_cast<unsigned>(g[static_cast<std::size_t>(i)]));
      }
      process_status ps;
      if (!read_process_status(id.pid, ps)) id.start_time = ps.start_time;
      std::string host = sanitized_host_name();
      // The boot id tells reboots apart, the pid namespace tells containers
      // apart: only when both match do our kill(2) and /proc see the owner.
      std::uint64_t h = fnv1a(read_small_file("/proc/sys/kernel/random/boot_id"));
      h = fnv1a(readlink_string("/proc/self/ns/pid"), h);
      h = fnv1a(host, h);
      char hex[9];
      std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(h ^ (h >> 32)));
      id.host_tag = host + "-" + hex;
      identity_ = std::move(id);
      identity_generation_.store(gen + 1, std::memory_order_release);
    }
    return identity_;
  }

  std::uint64_t fork_generation() noexcept override {
    return g_fork_generation.load(std::memory_order_relaxed);
  }

  std::unique_ptr<dir_watch> watch_directory(const std::string& dir) override {
#if defined(__linux__)
    int fd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (fd < 0) return nullptr;
    return std::make_unique<inotify_watch>(fd, dir);
#else
    (void)dir;
    return nullptr;
#endif
  }

  std::error_code filesystem_of(const std::string& path, bool with_name,
                                filesystem_info& out) override {
    out = filesystem_info{};
#if defined(__linux__)
    struct statfs sfs {};
    if (retry_eintr([&] { return ::statfs(path.c_str(), &sfs); }) != 0) return last_errno();
    out.local = local_filesystem_type(static_cast<long>(sfs.f_type));
    if (with_name) out.name = mount_type(path);
#else
    // Elsewhere the local filesystems are not told apart: treated as local.
    (void)path;
    (void)with_name;
    out.local = true;
#endif
    return {};
  }

  std::error_code open_wait_board(const std::string& path, unsigned mode, bool create,
                                  const board_owners& owners,
                                  std::unique_ptr<wait_board>& out) override {
#if defined(__linux__)
    return map_board(path, mode, create, owners, out);
#else
    (void)path;
    (void)mode;
    (void)create;
    (void)owners;
    out.reset();
    return errno_code(ENOTSUP);
#endif
  }

 private:
  static std::int64_t clock_us(clockid_t id) noexcept {
    timespec ts{};
    ::clock_gettime(id, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
  }

  static void fill_status(const struct stat& st, file_status& out) noexcept {
    out.is_directory = S_ISDIR(st.st_mode);
    out.is_regular = S_ISREG(st.st_mode);
    out.is_symlink = S_ISLNK(st.st_mode);
    out.is_sticky = (st.st_mode & S_ISVTX) != 0;
    out.mode = st.st_mode & 07777;
    out.uid = st.st_uid;
    out.gid = st.st_gid;
    out.device = static_cast<std::uint64_t>(st.st_dev);
    out.inode = static_cast<std::uint64_t>(st.st_ino);
    out.size = static_cast<std::uint64_t>(st.st_size);
#if defined(__APPLE__)
    out.mtime_us = static_cast<std::int64_t>(st.st_mtimespec.tv_sec) * 1000000 + st.st_mtimespec.tv_nsec / 1000;
#else
    out.mtime_us = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000 + st.st_mtim.tv_nsec / 1000;
#endif
    out.type = S_ISREG(st.st_mode)    ? '-'
               : S_ISDIR(st.st_mode)  ? 'd'
               : S_ISLNK(st.st_mode)  ? 'l'
               : S_ISFIFO(st.st_mode) ? 'p'
               : S_ISCHR(st.st_mode)  ? 'c'
               : S_ISBLK(st.st_mode)  ? 'b'
               : S_ISSOCK(st.st_mode) ? 's'
                                      : '?';
  }

  void reseed(std::uint64_t gen) noexcept {
    std::lock_guard<std::mutex> lock(seed_mutex_);
    if (seed_generation_.load(std::memory_order_relaxed) == gen + 1) return;
    std::uint64_t s = 0;
    if (fill_random(&s, sizeof s)) {
      // No kernel randomness: the nonce still only has to be unique within
      // this process, which the counter guarantees; mix in what differs.
      timespec ts{};
      ::clock_gettime(CLOCK_MONOTONIC, &ts);
      s = splitmix64(static_cast<std::uint64_t>(ts.tv_nsec) ^
                     (static_cast<std::uint64_t>(::getpid()) << 32));
    }
    seed_.store(s, std::memory_order_relaxed);
    seed_generation_.store(gen + 1, std::memory_order_release);
  }

  std::mutex identity_mutex_;
  std::atomic<std::uint64_t> identity_generation_{0};  // fork generation + 1
  process_identity identity_;

  std::mutex seed_mutex_;
  std::atomic<std::uint64_t> seed_generation_{0};
  std::atomic<std::uint64_t> seed_{0};
  std::atomic<std::uint64_t> counter_{0};
};

}  // namespace

std::shared_ptr<os> system_os() {
  static const std::shared_ptr<os> instance = std::make_shared<posix_os>();
  return instance;
}

}  // namespace tokenlock::detail
