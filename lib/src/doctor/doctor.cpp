// The doctor's checks (tokenlock/doctor.hpp): each property tried in a
// scratch directory with the calls of the OS seam that the lock itself
// makes, so that what the doctor finds is what the lock meets there.
#include "tokenlock/doctor.hpp"

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>

#include "core/errno_advice.hpp"
#include "core/failure.hpp"
#include "core/netfs_advice.hpp"
#include "posix/os.hpp"
#include "lockdir/token_mark.hpp"
#include "lockdir/token_name.hpp"
#include "tokenlock/clock.hpp"
#include "tokenlock/clock_judgement.hpp"
#include "tokenlock/lock_options.hpp"

namespace tokenlock {
namespace detail {
namespace {

using std::chrono::microseconds;
using finding = doctor_finding;
using verdict = doctor_verdict;

// How to get past a failed system call that was not the property checked.
std::string fix_for(std::error_code ec) { return errno_fix(ec, errno_context::doctor); }

std::string milliseconds_text(std::int64_t us) { return std::to_string((us + 500) / 1000) + " ms"; }

// When a condition became true: at the first look, after a while, or not
// within the wait.
struct seen_after {
  bool seen = false;
  bool at_once = false;
  std::int64_t after_us = 0;
};

class checkup {
 public:
  checkup(os& sys, std::string dir, std::string scratch_name, const doctor_options& options)
      : sys_(sys),
        dir_(std::move(dir)),
        name_(std::move(scratch_name)),
        scratch_(dir_ + "/" + name_),
        options_(options),
        peer_(options.peer),
        peer_wait_(options.peer_wait) {}

  const std::string& scratch() const { return scratch_; }
  const std::vector<finding>& findings() const { return findings_; }
  const std::string& filesystem_name() const { return fs_.name; }

  std::error_code create_scratch() { return sys_.make_directory(scratch_, 0755); }

  // The local checks, then the peer's; a peer that never shows the scratch
  // directory is bad_argument, since every peer check would fail alike.
  failure run_checks() {
    run_local_checks();
    if (stopped()) return {};
    if (peer_.empty()) {
      report(finding{verdict::skip, "another mount", "no --peer DIR2 given", {}});
      return {};
    }
    if (!peer_shows_scratch()) {
      if (stopped()) return {};
      return make_failure(
          errc::bad_argument,
          "tokenlock: --peer " + peer_ + " does not show " + dir_ + "'s scratch directory " +
              name_ + " after " + seconds_text(peer_wait_) +
              ": DIR2 must be the same directory of the share as DIR, mounted elsewhere (for "
              "/mnt/a/locks, say /mnt/b/locks); if it is, its mount caches names longer than "
              "--peer-wait (" + cache_fix("", true) + ")");
    }
    report(finding{verdict::ok, "another mount",
                   peer_ + " shows DIR's scratch directory" +
                       (same_mount_ ? std::string(" (on the same mount as DIR: the checks below "
                                                  "show this mount's own view)")
                                    : std::string()),
                   {}});
    run_peer_checks();
    return {};
  }

  // Removes everything the checks made; a cleanup finding when something
  // would not go (said even after a stop: the caller has to remove it).
  void remove_scratch() {
    std::string where;
    if (auto ec = remove_tree(scratch_, 0, where))
      report(finding{verdict::fail, "cleanup", "cannot remove " + where + ": " + errno_cause(ec),
                     "remove " + scratch_ + " by hand"});
  }

 private:
  bool stopped() const { return options_.stop && options_.stop(); }

  void run_local_checks() {
    fs_known_ = !sys_.filesystem_of(scratch_, true, fs_);
    const std::function<finding()> checks[] = {
        [this] { return rename_to_new_name(); },       [this] { return rename_onto_empty(); },
        [this] { return rename_onto_non_empty(); },    [this] { return rename_file_over_file(); },
        [this] { return rename_of_vanished_name(); },  [this] { return exclusive_create(); },
        [this] { return token_names(); },              [this] { return fsync_of_file(); },
        [this] { return fsync_of_directory(); },       [this] { return wait_board(); },
        [this] { return owner_marks(); },              [this] { return clock(); },
    };
    for (const auto& check : checks) {
      if (stopped()) return;
      report(check());
    }
  }

  // The peer shows the scratch directory; `same_mount_`: on the device DIR
  // has (the same mount, a bind mount or a symbolic link to it), not
  // another client.
  bool peer_shows_scratch() {
    const seen_after s = poll([&] {
      file_status st;
      return !sys_.status(peer_at(""), st) && st.is_directory;
    });
    if (!s.seen) return false;
    file_status here, there;
    same_mount_ = !sys_.status(scratch_, here) && !sys_.status(peer_at(""), there) &&
                  here.device == there.device;
    if (sys_.filesystem_of(peer_at(""), true, peer_fs_) || peer_fs_.name.empty())
      peer_fs_.name = fs_.name;
    return true;
  }

  void run_peer_checks() {
    const std::function<finding()> checks[] = {
        [this] { return peer_sees_renames(); },
        [this] { return peer_rename_of_vanished_name(); },
        [this] { return peer_reads_new_contents(); },
    };
    for (const auto& check : checks) {
      if (stopped()) return;
      report(check());
    }
  }

  void report(finding f) {
    findings_.push_back(std::move(f));
    if (options_.on_finding) options_.on_finding(findings_.back());
  }

  std::string at(const std::string& name) const { return scratch_ + "/" + name; }
  std::string peer_at(const std::string& name) const {
    return peer_ + "/" + name_ + (name.empty() ? "" : "/" + name);
  }
  // The filesystem type for details that speak of it ("ext4", "fuse.sshfs").
  std::string fs_label(const filesystem_info& fs) const {
    return fs.name.empty() ? std::string("this filesystem") : fs.name;
  }

  bool exists(const std::string& path) {
    file_status st;
    return !sys_.status(path, st);
  }
  bool gone(const std::string& path) {
    file_status st;
    return sys_.status(path, st) == std::errc::no_such_file_or_directory;
  }
  std::error_code make_dir(const std::string& path) { return sys_.make_directory(path, 0755); }
  // A directory that looks like a lock's: with a token inside.
  std::error_code make_lock_like(const std::string& path) {
    if (auto ec = make_dir(path)) return ec;
    return make_dir(path + "/lockfile");
  }
  std::error_code write_file(const std::string& path, const std::string& contents) {
    int fd = -1;
    if (auto ec = sys_.create_exclusive(path, 0644, fd)) return ec;
    std::error_code ec;
    for (std::size_t done = 0; done < contents.size() && !ec;) {
      std::size_t n = 0;
      ec = sys_.write(fd, contents.data() + done, contents.size() - done, n);
      if (!ec && n == 0) ec = std::make_error_code(std::errc::io_error);
      done += n;
    }
    const auto closed = sys_.close(fd);
    return ec ? ec : closed;
  }
  std::error_code read_file(const std::string& path, std::string& out) {
    out.clear();
    int fd = -1;
    if (auto ec = sys_.open_read(path, fd)) return ec;
    std::error_code ec;
    char buf[256];
    for (;;) {
      std::size_t n = 0;
      if ((ec = sys_.read(fd, buf, sizeof buf, n)) || n == 0) break;
      out.append(buf, n);
    }
    sys_.close(fd);
    return ec;
  }
  seen_after poll(const std::function<bool()>& look) {
    const std::int64_t start = sys_.steady_now_us();
    for (bool first = true;; first = false) {
      if (look()) return {true, first, sys_.steady_now_us() - start};
      const std::int64_t waited = sys_.steady_now_us() - start;
      if (stopped() || waited >= peer_wait_.count()) return {false, false, waited};
      // Polling the other mount's view, which has no way to tell us.
      sys_.sleep_for(std::chrono::milliseconds(10));
    }
  }

  static finding make(verdict v, const char* property, std::string detail, std::string fix = {}) {
    return finding{v, property, std::move(detail), std::move(fix)};
  }
  // A step that only prepares a check failed: the check cannot run.
  static finding setup_failed(const char* property, const std::string& step, std::error_code ec) {
    return make(verdict::fail, property, "cannot " + step + ": " + errno_cause(ec), fix_for(ec));
  }

  finding rename_to_new_name() {
    const char* p = "rename of a directory to a new name";
    const std::string a = at("rename.a"), b = at("rename.b");
    if (auto ec = make_lock_like(a)) return setup_failed(p, "create rename.a", ec);
    const std::string fix =
        "tokenlock cannot lock here: acquire, release and refresh are each this rename; keep "
        "lock directories on another filesystem";
    if (auto ec = sys_.rename(a, b)) return make(verdict::fail, p, "failed with " + errno_cause(ec), fix);
    if (!exists(b + "/lockfile") || !gone(a))
      return make(verdict::fail, p, "rename.a -> rename.b succeeded, but the old name or the "
                                    "contents are not where they belong", fix);
    return make(verdict::ok, p, "the directory moved with its contents and the old name is gone "
                                "(acquire, release, refresh)");
  }

  finding rename_onto_empty() {
    const char* p = "rename of a directory onto an empty directory";
    const std::string src = at("create.init"), dst = at("create.lock");
    if (auto ec = make_lock_like(src)) return setup_failed(p, "create create.init", ec);
    if (auto ec = make_dir(dst)) return setup_failed(p, "create create.lock", ec);
    const std::string fix =
        "an existing empty lock directory cannot be set up here: remove empty lock directories "
        "by hand (tokenlock creates a missing one itself)";
    if (auto ec = sys_.rename(src, dst))
      return make(verdict::fail, p, "refused with " + errno_cause(ec), fix);
    if (!exists(dst + "/lockfile") || !gone(src))
      return make(verdict::fail, p, "succeeded, but the contents are not where they belong", fix);
    return make(verdict::ok, p, "it replaced the empty directory (creating a lock directory)");
  }

  finding rename_onto_non_empty() {
    const char* p = "rename of a directory onto a non-empty directory";
    const std::string src = at("race.init"), dst = at("race.lock");
    if (auto ec = make_lock_like(src)) return setup_failed(p, "create race.init", ec);
    if (auto ec = make_lock_like(dst)) return setup_failed(p, "create race.lock", ec);
    const std::error_code ec = sys_.rename(src, dst);
    if (!ec)
      return make(verdict::fail, p, "it replaced a directory that held a token",
                  "two processes that create one lock directory at once could both install a "
                  "token here: do not keep lock directories on this filesystem");
    if (!exists(src + "/lockfile") || !exists(dst + "/lockfile"))
      return make(verdict::fail, p, "refused with " + errno_cause(ec) + ", but changed the directories",
                  "do not keep lock directories on this filesystem");
    if (ec == std::errc::directory_not_empty || ec == std::errc::file_exists)
      return make(verdict::ok, p, "refused with " + errno_cause(ec) +
                                      ": of two processes creating one lock directory, one wins");
    if (ec == std::errc::operation_not_permitted || ec == std::errc::permission_denied)
      return make(verdict::warn, p,
                  "refused with " + errno_cause(ec) + " where POSIX says ENOTEMPTY (sshfs does this); "
                  "tokenlock takes it for a lost race when the lock directory exists");
    return make(verdict::fail, p, "refused with " + errno_cause(ec) + " instead of ENOTEMPTY or EEXIST",
                "a process that loses the race to create a lock directory fails with this error: "
                "create each lock directory once before processes share it (tokenlock status "
                "does not create it; tokenlock run LOCKDIR true does)");
  }

  finding rename_file_over_file() {
    const char* p = "rename of a file over a file";
    const std::string target = at("file.target"), temp = at("file.tmp");
    if (auto ec = write_file(target, "old\n")) return setup_failed(p, "write file.target", ec);
    if (auto ec = write_file(temp, "new\n")) return setup_failed(p, "write file.tmp", ec);
    const std::string fix =
        "atomic writes (tokenlock write and incr, update_file) cannot commit here: keep the data "
        "files on another filesystem";
    if (auto ec = sys_.rename(temp, target))
      return make(verdict::fail, p, "failed with " + errno_cause(ec), fix);
    std::string now;
    if (auto ec = read_file(target, now)) return setup_failed(p, "read file.target back", ec);
    if (now != "new\n" || !gone(temp))
      return make(verdict::fail, p, "succeeded, but file.target does not hold the new contents",
                  fix);
    return make(verdict::ok, p, "the new file replaced the old one (atomic writes commit so)");
  }

  finding rename_of_vanished_name() {
    const char* p = "rename of a vanished name";
    const std::string a = at("gone.a");
    if (auto ec = make_lock_like(a)) return setup_failed(p, "create gone.a", ec);
    if (auto ec = sys_.rename(a, at("gone.b"))) return setup_failed(p, "rename gone.a", ec);
    const std::error_code ec = sys_.rename(a, at("gone.c"));
    if (ec == std::errc::no_such_file_or_directory)
      return make(verdict::ok, p, "renaming a name that was renamed away fails with ENOENT (a "
                                  "lost lock is noticed; commits are fenced)");
    if (!ec)
      return make(verdict::fail, p, "renaming a name that was renamed away succeeded",
                  "takeovers are not noticed and commits not fenced here: do not keep lock "
                  "directories on this filesystem");
    return make(verdict::warn, p,
                "renaming a name that was renamed away fails with " + errno_cause(ec) +
                    " instead of ENOENT: nothing is renamed, but tokenlock reports an error "
                    "where it would report a lost lock");
  }

  finding exclusive_create() {
    const char* p = "exclusive create";
    const std::string path = at("excl");
    int fd = -1;
    if (auto ec = sys_.create_exclusive(path, 0644, fd)) return setup_failed(p, "create excl", ec);
    sys_.close(fd);
    const std::error_code ec = sys_.create_exclusive(path, 0644, fd);
    if (ec == std::errc::file_exists)
      return make(verdict::ok, p, "a second O_EXCL create of one name fails with EEXIST "
                                  "(temporary files never collide)");
    if (!ec) {
      sys_.close(fd);
      return make(verdict::fail, p, "a second O_EXCL create of one name succeeded",
                  "two writers could share one temporary file: use NFSv3 or later, or another "
                  "filesystem");
    }
    return make(verdict::fail, p, "a second O_EXCL create fails with " + errno_cause(ec) +
                                      " instead of EEXIST",
                "atomic writes fail here: keep the data files on another filesystem");
  }

  finding token_names() {
    const char* p = "token names";
    // As long as a token name gets: every field at its widest.
    const std::string name = make_token(INT64_MAX, "Doctor_Checks-Long_Host-Names_32-0123abcd",
                                                2147483647, UINT64_MAX, UINT64_MAX);
    if (auto ec = make_dir(at(name))) {
      if (ec == std::errc::filename_too_long)
        return make(verdict::fail, p,
                    "a name of " + std::to_string(name.size()) + " bytes is refused with " +
                        errno_cause(ec),
                    "filesystems with short names (eCryptfs: 143 bytes) cannot hold tokens: keep "
                    "lock directories on another filesystem");
      return setup_failed(p, "create a directory named like a token", ec);
    }
    std::vector<std::string> names;
    if (auto ec = sys_.list_directory(scratch_, names)) return setup_failed(p, "list " + name_, ec);
    for (const auto& n : names)
      if (n == name)
        return make(verdict::ok, p, "a " + std::to_string(name.size()) +
                                        "-byte token name is created and listed back unchanged");
    return make(verdict::fail, p, "a token name is listed back changed (case or characters)",
                "tokenlock cannot recognise its tokens here: keep lock directories on a "
                "filesystem that keeps names as given");
  }

  finding fsync_of_file() {
    const char* p = "fsync of a file";
    int fd = -1;
    if (auto ec = sys_.create_exclusive(at("sync.file"), 0644, fd))
      return setup_failed(p, "create sync.file", ec);
    std::size_t n = 0;
    std::error_code ec = sys_.write(fd, "x", 1, n);
    if (ec) {
      sys_.close(fd);
      return setup_failed(p, "write sync.file", ec);
    }
    ec = sys_.sync_file(fd);
    sys_.close(fd);
    if (ec)
      return make(verdict::fail, p, "failed with " + errno_cause(ec),
                  "durable writes fail here: use --sync none (write_options durability none), "
                  "and a crash may lose the last update");
    return make(verdict::ok, p, "succeeded (--sync file and file_and_dir)");
  }

  finding fsync_of_directory() {
    const char* p = "fsync of a directory";
    if (auto ec = sys_.sync_directory(scratch_))
      return make(verdict::fail, p, "failed with " + errno_cause(ec),
                  "--sync file_and_dir (the default) reports every write as failed after its "
                  "rename here: use --sync file");
    return make(verdict::ok, p, "succeeded (--sync file_and_dir, the default)");
  }

  finding wait_board() {
    const char* p = "wait board";
    const std::string label = fs_label(fs_);
    const std::string polls = "waiters poll on " + label +
                              " (a shared mapping is one memory only on a local filesystem); "
                              "locking works the same, waiting costs more CPU";
    if (fs_known_ && !fs_.local) return make(verdict::ok, p, polls);
    const std::string path = at("lock.wait");
    std::unique_ptr<detail::wait_board> one, two;
    std::error_code ec = sys_.open_wait_board(path, 0600, true, {sys_.self().euid, {}}, one);
    if (ec == std::errc::not_supported) return make(verdict::ok, p, polls);
    if (!ec) ec = sys_.open_wait_board(path, 0600, false, {sys_.self().euid, {}}, two);
    if (ec)
      return make(verdict::warn, p,
                  "the board cannot be mapped: " + errno_cause(ec) + "; waiters poll instead");
    // Two mappings of one file: what one process stores, the other loads.
    __atomic_store_n(two->word(1), 0x746f6b65u, __ATOMIC_SEQ_CST);
    const bool shared = __atomic_load_n(one->word(1), __ATOMIC_SEQ_CST) == 0x746f6b65u;
    one.reset();
    two.reset();
    sys_.remove_file(path);
    if (!shared)
      return make(verdict::warn, p, "two mappings of the board do not share memory on " + label +
                                        "; waiters wait longer");
    return make(verdict::ok, p, "maps and is shared on " + label + ": waiters on this host line up");
  }

  // Not a test of the filesystem (a rename through a stale name needs two
  // clients and a race), but what the lock will do here, and why.
  finding owner_marks() {
    const char* p = "owner marks";
    if (!fs_known_)
      return make(verdict::ok, p,
                  "the filesystem type is unknown: holders mark their tokens, to be safe from a "
                  "rename through a stale name (docs/protocol.md, Owner marks)");
    if (!needs_owner_marks(fs_))
      return make(verdict::ok, p,
                  "not needed on " + fs_label(fs_) +
                      ": its renames go by name, so a name that is gone fails with ENOENT");
    return make(verdict::ok, p,
                "holders mark their tokens on " + fs_label(fs_) +
                    " (3 more operations per lock cycle): a client may rename a directory "
                    "through a name it no longer has (docs/protocol.md, Owner marks)");
  }

  finding clock() {
    const char* p = "clock offset";
    std::error_code ec;
    const clock_offset c = estimate_clock_offset(scratch_, clock_offset_options{5}, ec);
    if (ec) {
      std::string m = last_error_message();
      if (m.rfind("tokenlock: ", 0) == 0) m.erase(0, 11);
      return make(verdict::fail, p, "not measured: " + m, fix_for(ec));
    }
    clock_judgement j = judge_clock_offset(c, lock_options{}.skew_allowance);
    if (fs_.name.find("glusterfs") != std::string::npos)
      j.text += " (GlusterFS with features.ctime on stamps files with the client's clock: then "
                "this shows nothing)";
    const verdict v = j.verdict == clock_verdict::within   ? verdict::ok
                      : j.verdict == clock_verdict::beyond ? verdict::fail
                                                           : verdict::warn;
    return make(v, p, j.text, j.fix);
  }

  finding peer_sees_renames() {
    const char* p = "renames seen through the peer";
    const std::string a = at("peer.a"), b = at("peer.b");
    if (auto ec = make_lock_like(a)) return setup_failed(p, "create peer.a", ec);
    // The peer looks at the old name first, as a waiter does, so that
    // whatever it caches is cached.
    if (!poll([&] { return exists(peer_at("peer.a")); }).seen)
      return make(verdict::fail, p,
                  "a directory made through DIR did not appear through the peer within " +
                      seconds_text(peer_wait_),
                  cache_fix(peer_fs_.name, true));
    if (auto ec = sys_.rename(a, b)) return setup_failed(p, "rename peer.a", ec);
    const seen_after s = poll([&] { return gone(peer_at("peer.a")) && exists(peer_at("peer.b")); });
    const std::string what = "a directory renamed through DIR shows renamed through the peer";
    if (s.at_once) return make(verdict::ok, p, what + " at once");
    if (s.seen)
      return make(verdict::warn, p,
                  what + " only after " + milliseconds_text(s.after_us) +
                      ": waiters there see releases late, and a holder there may use a name "
                      "already taken over for that long",
                  cache_fix(peer_fs_.name, true));
    return make(verdict::fail, p,
                "the peer still shows the old name " + seconds_text(peer_wait_) +
                    " after a rename through DIR",
                cache_fix(peer_fs_.name, true));
  }

  finding peer_rename_of_vanished_name() {
    const char* p = "rename through the peer of a vanished name";
    const std::string a = at("fence.a");
    if (auto ec = make_lock_like(a)) return setup_failed(p, "create fence.a", ec);
    if (!poll([&] { return exists(peer_at("fence.a")); }).seen)
      return make(verdict::fail, p,
                  "a directory made through DIR did not appear through the peer within " +
                      seconds_text(peer_wait_),
                  cache_fix(peer_fs_.name, true));
    if (auto ec = sys_.rename(a, at("fence.b"))) return setup_failed(p, "rename fence.a", ec);
    const std::error_code ec = sys_.rename(peer_at("fence.a"), peer_at("fence.c"));
    if (ec == std::errc::no_such_file_or_directory)
      return make(verdict::ok, p, "a name renamed away through DIR cannot be renamed through the "
                                  "peer (ENOENT): the fence holds across mounts");
    if (!ec)
      return make(verdict::fail, p, "a name renamed away through DIR was renamed again through "
                                    "the peer: a holder there could release or commit after a "
                                    "takeover",
                  "do not share locks between these mounts");
    return make(verdict::warn, p,
                "fails with " + errno_cause(ec) + " instead of ENOENT: nothing is renamed, but "
                "tokenlock reports an error where it would report a lost lock");
  }

  finding peer_reads_new_contents() {
    const char* p = "contents seen through the peer";
    const std::string file = at("data"), temp = at("data.tmp");
    if (auto ec = write_file(file, "first\n")) return setup_failed(p, "write data", ec);
    std::string got;
    // The peer reads the old contents first, as the previous holder's
    // reader would have, so that whatever it caches is cached.
    if (!poll([&] { return !read_file(peer_at("data"), got) && got == "first\n"; }).seen)
      return make(verdict::fail, p,
                  "a file written through DIR could not be read through the peer within " +
                      seconds_text(peer_wait_),
                  cache_fix(peer_fs_.name, true));
    if (auto ec = write_file(temp, "second\n")) return setup_failed(p, "write data.tmp", ec);
    if (auto ec = sys_.rename(temp, file)) return setup_failed(p, "rename data.tmp over data", ec);
    const seen_after s = poll([&] { return !read_file(peer_at("data"), got) && got == "second\n"; });
    const std::string fix = cache_fix(peer_fs_.name, false);
    if (s.at_once)
      return make(verdict::ok, p, "a file replaced by rename through DIR reads new through the "
                                  "peer at once (update_file starts from the last commit)");
    if (s.seen)
      return make(verdict::fail, p,
                  "the peer read the old contents for " + milliseconds_text(s.after_us) +
                      " after a rename through DIR: an update there right after one here would "
                      "start from the old contents and lose the first",
                  fix);
    return make(verdict::fail, p,
                "the peer still reads the old contents " + seconds_text(peer_wait_) +
                    " after a rename through DIR: updates through both mounts lose updates",
                fix);
  }

  // Depth-limited: doctor makes two levels at most.
  std::error_code remove_tree(const std::string& path, int depth, std::string& where) {
    std::vector<std::string> names;
    if (auto ec = sys_.list_directory(path, names)) {
      where = path;
      return ec;
    }
    for (const auto& n : names) {
      const std::string child = path + "/" + n;
      file_status st;
      if (auto ec = sys_.status(child, st)) {
        where = child;
        return ec;
      }
      std::error_code ec = st.is_directory && depth < 4 ? remove_tree(child, depth + 1, where)
                                                        : sys_.remove_file(child);
      if (ec) {
        if (where.empty()) where = child;
        return ec;
      }
    }
    if (auto ec = sys_.remove_directory(path)) {
      where = path;
      return ec;
    }
    return {};
  }

  os& sys_;
  std::string dir_, name_, scratch_;
  const doctor_options& options_;
  std::string peer_;
  microseconds peer_wait_{0};
  filesystem_info fs_, peer_fs_;
  bool fs_known_ = false;
  bool same_mount_ = false;
  std::vector<finding> findings_;
};

// DIR and the peer must be directories that exist: they are what the
// doctor is asked about, so a wrong one is the caller's to fix.
failure check_directory(os& sys, const std::string& what, const std::string& path) {
  file_status st;
  const std::error_code ec = sys.status_following(path, st);
  if (ec == std::errc::no_such_file_or_directory)
    return make_failure(ec, "tokenlock: " + what + " " + path +
                                " does not exist; give an existing directory");
  if (ec == std::errc::not_a_directory || (!ec && !st.is_directory))
    return make_failure(std::make_error_code(std::errc::not_a_directory),
                        "tokenlock: " + what + " " + path +
                            " is not a directory; give an existing directory");
  if (ec)
    return make_failure(ec, "tokenlock: cannot look at " + what + " " + path + ": " +
                                errno_cause(ec) + "; " + fix_for(ec));
  return {};
}

failure run_doctor(os& sys, const std::string& dir, const doctor_options& options,
                   doctor_report& report) {
  report = doctor_report{};
  if (dir.empty()) return make_failure(errc::bad_argument, "tokenlock: doctor: DIR is empty");
  if (auto f = check_directory(sys, "DIR", dir)) return f;
  if (!options.peer.empty())
    if (auto f = check_directory(sys, "--peer", options.peer)) return f;
  char nonce[17];
  std::snprintf(nonce, sizeof nonce, "%016" PRIx64, sys.random_u64());
  checkup c(sys, dir, std::string(".tokenlock-doctor.") + nonce, options);
  report.scratch = c.scratch();
  if (auto ec = c.create_scratch())
    return make_failure(ec, "tokenlock: cannot create the scratch directory " + c.scratch() +
                                ": " + errno_cause(ec) + "; " + fix_for(ec));
  failure f;
  try {
    f = c.run_checks();
  } catch (...) {
    c.remove_scratch();  // a callback threw: nothing may stay behind
    throw;
  }
  c.remove_scratch();
  report.filesystem = c.filesystem_name();
  report.findings = c.findings();
  return f;
}

}  // namespace
}  // namespace detail

const char* doctor_verdict_name(doctor_verdict v) noexcept {
  switch (v) {
    case doctor_verdict::ok: return "ok";
    case doctor_verdict::warn: return "warn";
    case doctor_verdict::fail: return "fail";
    case doctor_verdict::skip: return "skip";
  }
  return "fail";
}

int doctor_report::failed() const noexcept {
  int n = 0;
  for (const auto& f : findings) n += f.verdict == doctor_verdict::fail;
  return n;
}

doctor_report check_directory_health(const std::string& dir, const doctor_options& options) {
  doctor_report r;
  detail::run_throwing([&] { return detail::run_doctor(*detail::system_os(), dir, options, r); });
  return r;
}

doctor_report check_directory_health(const std::string& dir, const doctor_options& options,
                                     std::error_code& ec) noexcept {
  doctor_report r;
  detail::run_noexcept(ec, [&] { return detail::run_doctor(*detail::system_os(), dir, options, r); });
  return r;
}

}  // namespace tokenlock
