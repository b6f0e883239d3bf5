// A test double for the OS seam. Filesystem calls go to the real system
// (tests work in a real temporary directory), while everything that makes a
// process a process is played: its pid, start time and host tag, the table
// of live processes kill(2) and /proc answer from, the two clocks (sleeping
// advances them instead of waiting), and fork. Several fake_os objects that
// share one fake_world act as several processes or hosts in one test.
//
// Faults: fail(op, substring, errno) makes the next matching calls fail
// without touching the disk. Interleavings: `before` runs ahead of every call
// and may act as another process at exactly that point. Operations are
// named by `op`, not by strings, so that a misspelt one does not compile;
// and a fault or when() that never fired is a test failure when the
// fake_os goes away (a test that armed a fault its code never reached
// proved nothing).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "posix/os.hpp"

namespace tokenlock::testing {

struct fake_world {
  std::int64_t wall_us = 1'800'000'000'000'000;  // 2027-01-15, far from any real token
  std::int64_t steady_us = 1'000'000;
  struct proc {
    char state = 'S';
    std::uint64_t start_time = 0;
    int probe_error = 0;  // what kill(pid, 0) answers, 0 = success (EPERM: another user's)
    int proc_error = 0;   // what reading /proc answers (ENOENT: hidepid)
  };
  std::map<int, proc> processes;  // absent = no such process
  // Wait boards by path, shared by the played processes like a mapped file.
  std::map<std::string, std::array<std::uint32_t, detail::wait_board::words>> boards;
  // A file server's clock. When set, a file that a played process creates
  // or writes gets the modification time a server would stamp, wall_us +
  // *server_clock_offset_us at that moment rounded down to a multiple of
  // server_stamp_granularity_us, and file_status_of reports it. Unset: the
  // real filesystem's stamps.
  std::optional<std::int64_t> server_clock_offset_us;
  std::int64_t server_stamp_granularity_us = 1;

  void advance(std::int64_t us) {
    wall_us += us;
    steady_us += us;
  }
};

// The calls that fail(), fail_after(), when() and `before` can name.
enum class op {
  rename,
  make_directory,
  remove_directory,
  remove_file,
  status,
  list_directory,
  sync_directory,
  status_following,
  read_link,
  create_exclusive,
  open_read,
  write,
  read,
  sync_file,
  close,
  file_status_of,
  set_mode,
  set_owner,
  filesystem_of,
  open_wait_board,
  create_wait_board,
  board_wait,
  board_wake,
  open_directory,
};
// Its name in `calls` ("rename"), and back (nullopt for a name that is no
// op), so that a call log's names can be read as ops.
const char* op_name(op o) noexcept;
std::optional<op> op_from_name(const std::string& name) noexcept;

class fake_os final : public detail::os {
 public:
  fake_os(std::shared_ptr<fake_world> world, int pid, std::uint64_t start_time,
          std::string host_tag = "testhost-0000abcd", unsigned euid = real_euid);
  // The default euid: the real one, so that the files the test makes are
  // the played process's own (whom a lock directory may trust).
  static constexpr unsigned real_euid = ~0u;
  // The real process: identity, clocks, kill, /proc, sleeping and watches
  // are the system's; only faults and hooks are added. For real-process
  // tests that must stop a process at an exact call.
  struct real_process_t {};
  explicit fake_os(real_process_t);

  ~fake_os() override;

  // The next `times` calls of `op` whose first path contains `substring`
  // fail with `err` (times < 0: every call, and at least one must come).
  void fail(op o, const std::string& substring, int err, int times = 1);
  // As fail(), but lets the first `skip` matching calls through: fails the
  // (skip+1)-th write of a file, say.
  void fail_after(op o, const std::string& substring, int err, int skip, int times = 1);
  // Every write(2) to a file whose path contains `substring` writes at most
  // `max_bytes` (a real short write).
  void short_writes(const std::string& substring, std::size_t max_bytes);
  // Runs before each call with the op and its paths (path2: a rename's
  // target); may act as another process. Cleared before it runs, so it fires
  // once unless it re-arms (see when()).
  std::function<void(op o, const std::string& path, const std::string& path2)> before;
  // Arms `before` to run `action` at the first call of `o` whose first path
  // contains `substring`, letting earlier calls pass. Arming another when()
  // before this one fired is reported as a failure (it would be lost).
  void when(op o, const std::string& substring, std::function<void()> action);
  // Forgets the faults and the when() still armed: for a test whose fault
  // may rightly never be reached (say why where it is called).
  void disarm() noexcept;
  // Every call made, as "op path[ -> path2]".
  std::vector<std::string> calls;

  void simulate_fork() { ++fork_generation_; }
  // When >= 0, watch_directory returns a watch that reports a release every
  // this many microseconds of played time; -1: no watch is available.
  std::int64_t release_interval_us = -1;
  fake_world& world() { return *world_; }

  std::error_code rename(const std::string& from, const std::string& to) noexcept override;
  std::error_code make_directory(const std::string& path, unsigned mode) noexcept override;
  std::error_code remove_directory(const std::string& path) noexcept override;
  std::error_code remove_file(const std::string& path) noexcept override;
  std::error_code status(const std::string& path, detail::file_status& out) noexcept override;
  std::error_code list_directory(const std::string& path,
                                 std::vector<std::string>& names) override;
  std::error_code sync_directory(const std::string& path) noexcept override;
  std::error_code status_following(const std::string& path,
                                   detail::file_status& out) noexcept override;
  std::error_code read_link(const std::string& path, std::string& target) override;
  // The *_at calls are recorded and faulted as their path twins, with the
  // path the directory was opened by joined to the name ("rename D/lockfile
  // -> D/lockfile.123..."), so that a fault or when() names the same paths
  // whichever form the library uses; open_directory is an op of its own.
  std::error_code open_directory(int at, const std::string& name, int& fd) noexcept override;
  std::error_code status_at(int at, const std::string& name,
                            detail::file_status& out) noexcept override;
  std::error_code rename_at(int from_at, const std::string& from, int to_at,
                            const std::string& to) noexcept override;
  std::error_code make_directory_at(int at, const std::string& name,
                                    unsigned mode) noexcept override;
  std::error_code make_bare_directory_at(int at, const std::string& name,
                                         unsigned mode) noexcept override;
  std::error_code remove_at(int at, const std::string& name, bool directory) noexcept override;
  std::error_code list_directory_at(int fd, std::vector<std::string>& names) override;
  std::error_code create_exclusive_at(int at, const std::string& name, unsigned mode,
                                      int& fd) noexcept override;
  std::error_code create_exclusive(const std::string& path, unsigned mode,
                                   int& fd) noexcept override;
  std::error_code open_read(const std::string& path, int& fd) noexcept override;
  std::error_code write(int fd, const char* data, std::size_t size,
                        std::size_t& written) noexcept override;
  std::error_code read(int fd, char* data, std::size_t size, std::size_t& got) noexcept override;
  std::error_code sync_file(int fd) noexcept override;
  std::error_code close(int fd) noexcept override;
  std::error_code file_status_of(int fd, detail::file_status& out) noexcept override;
  std::error_code set_mode(int fd, unsigned mode) noexcept override;
  std::error_code set_owner(int fd, unsigned uid, unsigned gid) noexcept override;
  unsigned umask_value() noexcept override { return real_->umask_value(); }
  std::error_code signal_probe(int pid) noexcept override;
  std::error_code read_process_status(int pid, detail::process_status& out) noexcept override;
  std::int64_t wall_now_us() noexcept override {
    return world_ ? world_->wall_us : real_->wall_now_us();
  }
  std::int64_t steady_now_us() noexcept override {
    return world_ ? world_->steady_us : real_->steady_now_us();
  }
  void sleep_for(std::chrono::microseconds d) noexcept override;
  std::uint64_t random_u64() noexcept override;
  // When set, random_u64() answers with it. Otherwise the real source; in a
  // played world made odd, so that no one-in-N sweep fires unless a test
  // sets this.
  std::function<std::uint64_t()> random;
  const detail::process_identity& self() override { return world_ ? identity_ : real_->self(); }
  std::error_code group_id(const std::string& name, unsigned& gid) override {
    return real_->group_id(name, gid);
  }
  std::uint64_t fork_generation() noexcept override {
    return world_ ? fork_generation_ : real_->fork_generation();
  }
  std::unique_ptr<detail::dir_watch> watch_directory(const std::string& dir) override;
  // The real answer, unless `filesystem` says otherwise ("filesystem_of
  // PATH" can also be made to fail).
  std::error_code filesystem_of(const std::string& path, bool with_name,
                                detail::filesystem_info& out) override;
  std::optional<detail::filesystem_info> filesystem;
  // A client that serves a stale version: the next `times` open_read calls
  // of `path` open `decoy` instead (times < 0: every call).
  void serve_stale(const std::string& path, const std::string& decoy, int times);
  // A board in the world (or, for the real process, the system's). Calls:
  // "open_wait_board PATH" (an existing board only: ENOENT when the world
  // has none) or "create_wait_board PATH" (fail() makes either
  // unavailable), "board_wait PATH
  // TURN TIMEOUT_US" (it plays the timeout unless the turn already moved,
  // and runs `before` first, so a test may act as the head handing its
  // place on) and "board_wake PATH".
  std::error_code open_wait_board(const std::string& path, unsigned mode, bool create,
                                  const detail::board_owners& owners,
                                  std::unique_ptr<detail::wait_board>& out) override;

  // Descriptors this process has opened and not closed (for leak checks).
  std::size_t open_descriptors() const { return fd_paths_.size(); }

 private:
  // Records the call, runs the hook, and returns the injected error if any.
  std::error_code enter(op o, const std::string& path, const std::string& path2 = {});
  // Reports each fault and when() that did not fire in full.
  void check_fired();
  void arm_when(op o, const std::string& substring, std::function<void()> action);
  friend class fake_board;

  struct fault {
    op o;
    std::string substring;
    int err;
    int times;
    int skip;
    int fired;
  };
  std::string pending_when_;  // the when() armed and not yet fired, described
  std::string path_of(int fd) const;
  // `name` inside directory descriptor `at`, as a path.
  std::string path_at(int at, const std::string& name) const;
  struct stale_copy {
    std::string decoy;
    int times;
  };
  std::map<std::string, stale_copy> stale_;
  std::map<int, std::string> fd_paths_;
  // Played server stamps by descriptor (fake_world::server_clock_offset_us).
  std::map<int, std::int64_t> fd_stamps_;
  void stamp(int fd);
  std::string short_substring_;
  std::size_t short_max_ = 0;
  std::shared_ptr<fake_world> world_;
  std::shared_ptr<detail::os> real_;
  detail::process_identity identity_;
  std::vector<fault> faults_;
  std::uint64_t fork_generation_ = 0;
};

}  // namespace tokenlock::testing
