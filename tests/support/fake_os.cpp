#include "fake_os.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include <gtest/gtest.h>

namespace tokenlock::testing {

fake_os::fake_os(std::shared_ptr<fake_world> world, int pid, std::uint64_t start_time,
                 std::string host_tag, unsigned euid)
    : world_(std::move(world)), real_(detail::system_os()) {
  identity_.pid = pid;
  identity_.start_time = start_time;
  identity_.host_tag = std::move(host_tag);
  const detail::process_identity& real = real_->self();
  identity_.euid = euid == real_euid ? real.euid : euid;
  identity_.groups = real.groups;
  fake_world::proc p;
  p.start_time = start_time;
  world_->processes.emplace(pid, p);
}

fake_os::fake_os(real_process_t) : real_(detail::system_os()) {}

namespace {

constexpr const char* op_names[] = {
    "rename",          "make_directory",    "remove_directory", "remove_file",
    "status",          "list_directory",    "sync_directory",   "status_following",
    "read_link",       "create_exclusive",  "open_read",        "write",
    "read",            "sync_file",         "close",            "file_status_of",
    "set_mode",        "set_owner",         "filesystem_of",    "open_wait_board",
    "create_wait_board", "board_wait",      "board_wake",       "open_directory"};
static_assert(sizeof op_names / sizeof op_names[0] == static_cast<std::size_t>(op::open_directory) + 1,
              "a name for every op");

// In a test: a failure of that test. Elsewhere (a worker process that a
// test drives): a crash the test sees.
void report_unfired(const std::string& what) {
  if (::testing::UnitTest::GetInstance()->current_test_info() != nullptr) {
    ADD_FAILURE() << what;
    return;
  }
  std::fprintf(stderr, "fake_os: %s\n", what.c_str());
  std::abort();
}

}  // namespace

const char* op_name(op o) noexcept { return op_names[static_cast<int>(o)]; }

std::optional<op> op_from_name(const std::string& name) noexcept {
  for (std::size_t i = 0; i < sizeof op_names / sizeof op_names[0]; ++i)
    if (name == op_names[i]) return static_cast<op>(i);
  return std::nullopt;
}

fake_os::~fake_os() { check_fired(); }

void fake_os::fail(op o, const std::string& substring, int err, int times) {
  faults_.push_back({o, substring, err, times, 0, 0});
}

void fake_os::fail_after(op o, const std::string& substring, int err, int skip, int times) {
  faults_.push_back({o, substring, err, times, skip, 0});
}

void fake_os::disarm() noexcept {
  faults_.clear();
  pending_when_.clear();
  before = nullptr;
}

void fake_os::check_fired() {
  for (const fault& f : faults_) {
    if (f.times < 0 && f.fired > 0) continue;
    report_unfired(std::string("a fault armed on ") + op_name(f.o) + " of paths containing \"" +
                   f.substring + "\" never fired" +
                   (f.times > 0 ? " in full: " + std::to_string(f.times) + " call(s) left" : "") +
                   (f.skip > 0 ? ", " + std::to_string(f.skip) + " to let through first" : ""));
  }
  if (!pending_when_.empty()) report_unfired("when(" + pending_when_ + ") never fired");
  faults_.clear();
  pending_when_.clear();
}

void fake_os::short_writes(const std::string& substring, std::size_t max_bytes) {
  short_substring_ = substring;
  short_max_ = max_bytes;
}

std::string fake_os::path_at(int at, const std::string& name) const {
  if (at == cwd) return name;
  const std::string dir = path_of(at);
  if (name.empty() || name == ".") return dir;
  return dir == "/" ? "/" + name : dir + "/" + name;
}

std::error_code fake_os::open_directory(int at, const std::string& name, int& fd) noexcept {
  std::string path = path_at(at, name);
  // "DIR/." (a directory opened through the links in its path) is DIR.
  if (path.size() > 2 && path.compare(path.size() - 2, 2, "/.") == 0) path.resize(path.size() - 2);
  if (auto ec = enter(op::open_directory, path)) return ec;
  auto ec = real_->open_directory(at, name, fd);
  if (!ec) fd_paths_[fd] = path;
  return ec;
}

std::error_code fake_os::status_at(int at, const std::string& name,
                                   detail::file_status& out) noexcept {
  if (auto ec = enter(op::status, path_at(at, name))) return ec;
  return real_->status_at(at, name, out);
}

std::error_code fake_os::rename_at(int from_at, const std::string& from, int to_at,
                                   const std::string& to) noexcept {
  if (auto ec = enter(op::rename, path_at(from_at, from), path_at(to_at, to))) return ec;
  return real_->rename_at(from_at, from, to_at, to);
}

std::error_code fake_os::make_directory_at(int at, const std::string& name,
                                           unsigned mode) noexcept {
  if (auto ec = enter(op::make_directory, path_at(at, name))) return ec;
  return real_->make_directory_at(at, name, mode);
}

std::error_code fake_os::make_bare_directory_at(int at, const std::string& name,
                                                unsigned mode) noexcept {
  if (auto ec = enter(op::make_directory, path_at(at, name))) return ec;
  return real_->make_bare_directory_at(at, name, mode);
}

std::error_code fake_os::remove_at(int at, const std::string& name, bool directory) noexcept {
  if (auto ec = enter(directory ? op::remove_directory : op::remove_file, path_at(at, name)))
    return ec;
  return real_->remove_at(at, name, directory);
}

std::error_code fake_os::list_directory_at(int fd, std::vector<std::string>& names) {
  if (auto ec = enter(op::list_directory, path_of(fd))) return ec;
  return real_->list_directory_at(fd, names);
}

std::error_code fake_os::create_exclusive_at(int at, const std::string& name, unsigned mode,
                                             int& fd) noexcept {
  const std::string path = path_at(at, name);
  if (auto ec = enter(op::create_exclusive, path)) return ec;
  auto ec = real_->create_exclusive_at(at, name, mode, fd);
  if (!ec) {
    fd_paths_[fd] = path;
    stamp(fd);
  }
  return ec;
}

std::string fake_os::path_of(int fd) const {
  auto it = fd_paths_.find(fd);
  return it == fd_paths_.end() ? "fd:" + std::to_string(fd) : it->second;
}

void fake_os::when(op o, const std::string& substring, std::function<void()> action) {
  // A when() still waiting would be dropped unseen by the new one.
  if (!pending_when_.empty())
    report_unfired("when(" + pending_when_ + ") never fired before another when() replaced it");
  arm_when(o, substring, std::move(action));
}

void fake_os::arm_when(op o, const std::string& substring, std::function<void()> action) {
  pending_when_ = std::string(op_name(o)) + ", \"" + substring + "\"";
  before = [this, o, substring, action](op called, const std::string& p, const std::string&) {
    if (called == o && p.find(substring) != std::string::npos) {
      pending_when_.clear();
      action();
    } else {
      arm_when(o, substring, action);  // not yet: still the same when()
    }
  };
}

std::error_code fake_os::enter(op o, const std::string& path, const std::string& path2) {
  calls.push_back(std::string(op_name(o)) + " " + path + (path2.empty() ? "" : " -> " + path2));
  if (before) {
    auto hook = std::move(before);
    before = nullptr;
    hook(o, path, path2);
  }
  for (auto it = faults_.begin(); it != faults_.end(); ++it) {
    if (it->o != o || path.find(it->substring) == std::string::npos) continue;
    if (it->skip > 0) {
      --it->skip;
      continue;
    }
    int err = it->err;
    ++it->fired;
    if (it->times > 0 && --it->times == 0) faults_.erase(it);
    return {err, std::generic_category()};
  }
  return {};
}

std::error_code fake_os::rename(const std::string& from, const std::string& to) noexcept {
  if (auto ec = enter(op::rename, from, to)) return ec;
  return real_->rename(from, to);
}

std::error_code fake_os::make_directory(const std::string& path, unsigned mode) noexcept {
  if (auto ec = enter(op::make_directory, path)) return ec;
  return real_->make_directory(path, mode);
}

std::error_code fake_os::remove_directory(const std::string& path) noexcept {
  if (auto ec = enter(op::remove_directory, path)) return ec;
  return real_->remove_directory(path);
}

std::error_code fake_os::remove_file(const std::string& path) noexcept {
  if (auto ec = enter(op::remove_file, path)) return ec;
  return real_->remove_file(path);
}

std::error_code fake_os::status(const std::string& path, detail::file_status& out) noexcept {
  if (auto ec = enter(op::status, path)) return ec;
  return real_->status(path, out);
}

std::error_code fake_os::list_directory(const std::string& path,
                                        std::vector<std::string>& names) {
  if (auto ec = enter(op::list_directory, path)) return ec;
  return real_->list_directory(path, names);
}

std::error_code fake_os::sync_directory(const std::string& path) noexcept {
  if (auto ec = enter(op::sync_directory, path)) return ec;
  return real_->sync_directory(path);
}

std::error_code fake_os::status_following(const std::string& path,
                                          detail::file_status& out) noexcept {
  if (auto ec = enter(op::status_following, path)) return ec;
  return real_->status_following(path, out);
}

std::error_code fake_os::read_link(const std::string& path, std::string& target) {
  if (auto ec = enter(op::read_link, path)) return ec;
  return real_->read_link(path, target);
}

void fake_os::stamp(int fd) {
  if (!world_ || !world_->server_clock_offset_us) return;
  const std::int64_t t = world_->wall_us + *world_->server_clock_offset_us;
  const std::int64_t g = world_->server_stamp_granularity_us;
  fd_stamps_[fd] = t - ((t % g) + g) % g;
}

std::error_code fake_os::create_exclusive(const std::string& path, unsigned mode,
                                          int& fd) noexcept {
  if (auto ec = enter(op::create_exclusive, path)) return ec;
  auto ec = real_->create_exclusive(path, mode, fd);
  if (!ec) {
    fd_paths_[fd] = path;
    stamp(fd);
  }
  return ec;
}

void fake_os::serve_stale(const std::string& path, const std::string& decoy, int times) {
  stale_[path] = {decoy, times};
}

std::error_code fake_os::open_read(const std::string& path, int& fd) noexcept {
  if (auto ec = enter(op::open_read, path)) return ec;
  std::string from = path;
  auto stale = stale_.find(path);
  if (stale != stale_.end() && stale->second.times != 0) {
    from = stale->second.decoy;
    if (stale->second.times > 0) --stale->second.times;
  }
  auto ec = real_->open_read(from, fd);
  if (!ec) fd_paths_[fd] = path;
  return ec;
}

std::error_code fake_os::write(int fd, const char* data, std::size_t size,
                               std::size_t& written) noexcept {
  const std::string path = path_of(fd);
  if (auto ec = enter(op::write, path)) {
    written = 0;
    return ec;
  }
  if (!short_substring_.empty() && path.find(short_substring_) != std::string::npos)
    size = std::min(size, short_max_);
  auto ec = real_->write(fd, data, size, written);
  if (!ec && written > 0) stamp(fd);
  return ec;
}

std::error_code fake_os::read(int fd, char* data, std::size_t size, std::size_t& got) noexcept {
  if (auto ec = enter(op::read, path_of(fd))) return ec;
  return real_->read(fd, data, size, got);
}

std::error_code fake_os::sync_file(int fd) noexcept {
  if (auto ec = enter(op::sync_file, path_of(fd))) return ec;
  return real_->sync_file(fd);
}

std::error_code fake_os::close(int fd) noexcept {
  const std::string path = path_of(fd);
  fd_paths_.erase(fd);
  fd_stamps_.erase(fd);
  auto injected = enter(op::close, path);
  auto ec = real_->close(fd);  // the descriptor is gone either way
  return injected ? injected : ec;
}

std::error_code fake_os::file_status_of(int fd, detail::file_status& out) noexcept {
  if (auto ec = enter(op::file_status_of, path_of(fd))) return ec;
  auto ec = real_->file_status_of(fd, out);
  auto it = fd_stamps_.find(fd);
  if (!ec && it != fd_stamps_.end()) out.mtime_us = it->second;
  return ec;
}

std::error_code fake_os::set_mode(int fd, unsigned mode) noexcept {
  if (auto ec = enter(op::set_mode, path_of(fd))) return ec;
  return real_->set_mode(fd, mode);
}

std::error_code fake_os::set_owner(int fd, unsigned uid, unsigned gid) noexcept {
  if (auto ec = enter(op::set_owner, path_of(fd))) return ec;
  return real_->set_owner(fd, uid, gid);
}

std::error_code fake_os::signal_probe(int pid) noexcept {
  if (!world_) return real_->signal_probe(pid);
  calls.push_back("signal_probe " + std::to_string(pid));
  auto it = world_->processes.find(pid);
  if (it == world_->processes.end()) return {ESRCH, std::generic_category()};
  return {it->second.probe_error, std::generic_category()};
}

std::error_code fake_os::read_process_status(int pid, detail::process_status& out) noexcept {
  if (!world_) return real_->read_process_status(pid, out);
  calls.push_back("read_process_status " + std::to_string(pid));
  auto it = world_->processes.find(pid);
  if (it == world_->processes.end()) return {ENOENT, std::generic_category()};
  if (it->second.proc_error) return {it->second.proc_error, std::generic_category()};
  out.state = it->second.state;
  out.start_time = it->second.start_time;
  return {};
}

void fake_os::sleep_for(std::chrono::microseconds d) noexcept {
  if (!world_) return real_->sleep_for(d);
  calls.push_back("sleep_for " + std::to_string(d.count()));
  world_->advance(d.count());
}

std::uint64_t fake_os::random_u64() noexcept {
  if (random) return random();
  // Odd in a played world: the library's one-in-N housekeeping (sweeps that
  // list a directory) never fires by chance, so that tests may count calls.
  return world_ ? real_->random_u64() | 1 : real_->random_u64();
}

namespace {

// Reports a release every `interval` microseconds of played time; records
// what the lock does with it in the owner's call log.
class fake_watch final : public detail::dir_watch {
 public:
  fake_watch(fake_os& owner, std::int64_t interval) : owner_(owner), interval_(interval) {}
  bool arm() noexcept override {
    owner_.calls.push_back("watch_arm");
    return true;
  }
  void disarm() noexcept override { owner_.calls.push_back("watch_disarm"); }
  bool wait_for(const std::string&, std::chrono::microseconds timeout) noexcept override {
    owner_.calls.push_back("watch_wait " + std::to_string(timeout.count()));
    if (interval_ <= timeout.count()) {
      owner_.world().advance(interval_);
      return true;
    }
    owner_.world().advance(timeout.count());
    return false;
  }

 private:
  fake_os& owner_;
  std::int64_t interval_;
};

}  // namespace

std::unique_ptr<detail::dir_watch> fake_os::watch_directory(const std::string& dir) {
  if (!world_) return real_->watch_directory(dir);
  calls.push_back("watch_directory " + dir);
  if (release_interval_us < 0) return nullptr;
  return std::make_unique<fake_watch>(*this, release_interval_us);
}

class fake_board final : public detail::wait_board {
 public:
  fake_board(fake_os& owner, std::string path) : owner_(owner), path_(std::move(path)) {}
  std::uint32_t* word(int i) noexcept override { return &owner_.world().boards[path_][i]; }
  bool wait(int i, std::uint32_t expected, std::chrono::microseconds timeout) noexcept override {
    owner_.enter(op::board_wait, path_ + " " + std::to_string(expected) + " " +
                                   std::to_string(timeout.count()));
    if (*word(i) != expected) return true;
    owner_.world().advance(timeout.count());
    return false;
  }
  void wake_one(int) noexcept override { owner_.enter(op::board_wake, path_); }

 private:
  fake_os& owner_;
  std::string path_;
};

std::error_code fake_os::filesystem_of(const std::string& path, bool with_name,
                                       detail::filesystem_info& out) {
  if (auto ec = enter(op::filesystem_of, path)) return ec;
  if (filesystem) {
    out = *filesystem;
    return {};
  }
  return real_->filesystem_of(path, with_name, out);
}

std::error_code fake_os::open_wait_board(const std::string& path, unsigned mode, bool create,
                                         const detail::board_owners& owners,
                                         std::unique_ptr<detail::wait_board>& out) {
  out.reset();
  if (auto ec = enter(create ? op::create_wait_board : op::open_wait_board, path)) return ec;
  if (!world_) return real_->open_wait_board(path, mode, create, owners, out);
  if (!create && !world_->boards.count(path)) return {ENOENT, std::generic_category()};
  world_->boards[path];  // exists from now on, zeroed like a new file
  out = std::make_unique<fake_board>(*this, path);
  return {};
}

}  // namespace tokenlock::testing
