#include "tokenlock/update.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <string_view>
#include <vector>
#include <exception>
#include <optional>

#include "tokenlock/keep_alive.hpp"

#include "files/file_writer.hpp"
#include "files/atomic_write_impl.hpp"
#include "core/decimal.hpp"
#include "core/fnv1a.hpp"
#include "lockdir/lock_directory.hpp"
#include "core/netfs_advice.hpp"
#include "lockdir/trust.hpp"
#include "files/update_impl.hpp"

namespace tokenlock {

using namespace detail;

namespace detail {

namespace {

failure lost_before_commit(const write_target& t, const std::string& token) {
  return make_failure(errc::lock_lost,
                      describe("commit", t.path,
                               "the lock was taken over before the commit (our token " + token +
                                   " is gone: our lease ended or we were judged dead); nothing "
                                   "was written and the new owner's data is intact",
                               {}));
}

// ESTALE counts as gone where ENOENT does: a GlusterFS client that still
// holds a descriptor or a cached name of a directory that a takeover
// moved and cleared answers with it.
bool is_estale(std::error_code ec) { return ec == std::error_code(ESTALE, std::generic_category()); }

bool missing_code(std::error_code ec) {
  return ec == std::errc::no_such_file_or_directory || is_estale(ec);
}

// Whether our token is gone. A lookup that says ENOENT is confirmed by a
// listing of the lock directory: a network client may answer a lookup from
// a stale cache (seen on GlusterFS with its caches off in the kernel, where
// every lookup goes to the client: "taken over before the commit" with no
// other holder), while a listing comes from the server.
//
// A lookup that finds the token is also checked against a listing: an
// sshfs client keeps a name in its entry cache after another client
// renamed it, so a commit through the token fails with ENOENT from the
// server while the lookup still finds it. Only a failed step asks, so
// this costs nothing on the way to a commit.
bool token_gone(os& sys, const lock_handle& h) {
  file_status st;
  const bool found = !missing_code(sys.status(h.path().string(), st));
  std::vector<std::string> names;
  if (sys.list_directory(h.directory().string(), names)) return !found;
  return std::find(names.begin(), names.end(), h.token()) == names.end();
}

// ---- The version mark -----------------------------------------------------
//
// A network or FUSE client may, for a while, serve the version of a file
// that another client has already replaced by rename: GlusterFS's md-cache
// and open-behind keep the old inode behind the name, sshfs keeps a cached
// size that cuts the new contents short. An update computed from such a
// read loses the updates in between, and the lock cannot see it: the lock
// was taken correctly. So on those filesystems every commit also leaves a
// mark of what it committed in the lock's workspace, as a name:
// `D/<token>/w/v.<hash>.<mtime>`, the FNV-1a hash of the contents and the
// modification time the file server gave them. The workspace travels with
// the token, so the next holder lists it (a directory listing goes to the
// server: the token's path is new for this acquisition) and compares the
// mark with what it read. A mismatch with a version older than the mark
// is a stale read: re-read until the cache lets go, or fail. A version
// newer than the mark by more than the clock skew allowance was written
// outside the lock (by hand, or by a process on the file server itself,
// whose local filesystem keeps no mark): it is what there is, and it is
// used. On local filesystems reads are never stale and no mark is kept.

struct version_mark {
  bool present = false;
  std::string name;
  std::uint64_t hash = 0;
  std::int64_t mtime_us = 0;
};

constexpr std::string_view mark_prefix = "v.";

std::string mark_name(std::uint64_t hash, std::int64_t mtime_us) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "v.%016llx.%lld", static_cast<unsigned long long>(hash),
                static_cast<long long>(mtime_us));
  return buf;
}

bool parse_mark(const std::string& name, version_mark& out) {
  if (name.size() < 20 || name.compare(0, 2, mark_prefix) != 0 || name[18] != '.') return false;
  std::uint64_t h = 0;
  auto r1 = std::from_chars(name.data() + 2, name.data() + 18, h, 16);
  if (r1.ec != std::errc() || r1.ptr != name.data() + 18) return false;
  std::int64_t m = 0;
  auto r2 = std::from_chars(name.data() + 19, name.data() + name.size(), m);
  if (r2.ec != std::errc() || r2.ptr != name.data() + name.size()) return false;
  out = version_mark{true, name, h, m};
  return true;
}

// The newest mark in `workspace`; none when it has none or does not exist.
failure read_mark(os& sys, const write_target& t, const std::string& workspace,
                  version_mark& out) {
  out = version_mark{};
  std::vector<std::string> names;
  std::error_code ec = sys.list_directory(workspace, names);
  // ENOTDIR: a legacy script's file token, which has no workspace (the
  // commit then cannot be fenced, and says so).
  if (ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory) return {};
  if (ec) return write_failure("read", t, "cannot list the lock's workspace " + workspace, ec);
  for (const auto& n : names) {
    version_mark m;
    if (parse_mark(n, m) && (!out.present || m.mtime_us > out.mtime_us)) out = m;
  }
  return {};
}

// After a commit: the mark of what it committed. Best effort: without it
// the next holder sees a version newer than the old mark and takes it.
void write_mark(os& sys, const std::string& workspace, const version_mark& old,
                std::uint64_t hash, std::int64_t mtime_us) {
  const std::string name = mark_name(hash, mtime_us);
  if (old.present && old.name == name) return;
  const std::string next = workspace + "/" + name;
  if (old.present && !sys.rename(workspace + "/" + old.name, next)) return;
  int fd = -1;
  if (!sys.create_exclusive(next, 0644, fd)) sys.close(fd);
}

// The fenced commit: temp file in the token directory's subdirectory
// `w`, renamed over the target through the token's path; the caller
// flushes the directory. Sets `cross_device` (and writes nothing) when the
// rename reports EXDEV (bind mounts share a device number).
//
// Why a subdirectory: ext4 without a journal makes an fsync of a newly
// linked file also write its directory, and that directory's parent if it
// was itself just linked, and so on up. The token directory is renamed at
// every acquire, so a temp file directly in it made each flush write the
// lock directory's block too. `w` is made once and never renamed, so the
// walk stops there: one synchronous write less per update, what a temp
// file beside the target costs (docs/atomic-writes.md, update_file and
// increment_counter). The path still runs through the token's name, so
// the fence is the same. A takeover clears `w` with the rest of the
// workspace; the next update makes it again, with the lock's dir_mode.
// The token directory and its workspace `w`, open by descriptor and judged
// (trust.hpp) before anything is written in them: a workspace that another
// user could write lets that user swap the temporary file for one of their
// own just before the commit renames it over the target.
struct workspace_fds {
  os& sys;
  int token = -1;
  int w = -1;
  bool made = false;  // `w` is new: a failed update removes it again
  ~workspace_fds() {
    if (w >= 0) sys.close(w);
    if (token >= 0) sys.close(token);
  }
};

failure open_workspace(os& sys, const lock_handle& h, const open_dir& d, const write_target& t,
                       unsigned dir_mode, workspace_fds& ws) {
  const std::string token_dir = h.path().string();
  const std::string workspace = token_dir + "/w";
  const std::optional<unsigned> group = d.group;
  std::error_code ec = sys.open_directory(d.fd, h.token(), ws.token);
  if (missing_code(ec) && token_gone(sys, h))
    return lost_before_commit(t, h.token());
  if (ec) return write_failure("commit", t, "cannot open the lock's token " + token_dir, ec);
  if (failure f = check_trusted_fd(sys, ws.token, token_dir, "commit", "lock's token", group))
    return f;
  ec = sys.open_directory(ws.token, "w", ws.w);
  if (ec == std::errc::no_such_file_or_directory) {
    // EEXIST: it was there after all (a network client's lookup missed it).
    ec = sys.make_directory_at(ws.token, "w", dir_mode);
    if (ec && ec != std::errc::file_exists)
      return write_failure("create", t, "cannot create the workspace " + workspace, ec);
    ws.made = !ec;
    ec = sys.open_directory(ws.token, "w", ws.w);
  }
  if (ec) return write_failure("commit", t, "cannot open the workspace " + workspace, ec);
  // In the shared group, so that the group's other members trust it too
  // (where the directories are not set-group-ID); ours either way.
  if (ws.made && group) (void)sys.set_owner(ws.w, static_cast<unsigned>(-1), *group);
  return check_trusted_fd(sys, ws.w, workspace, "commit", "lock's workspace", group);
}

// How a commit treats the workspace: the mode of a `w` it makes, the mark
// it keeps (null: none, on local filesystems), and whether it sweeps this
// target's temporary files that a killed commit left there.
struct commit_rules {
  unsigned dir_mode = 0755;
  const version_mark* mark = nullptr;
  bool sweep = false;
};

// A temporary file in the workspace of a lock we hold is a killed commit's
// (the workspace goes with the token from holder to holder, and only a
// takeover clears it) unless a commit of ours is writing it right now: one
// this old is not.
constexpr std::chrono::seconds workspace_leftover_age{60};

// What a failure to open the workspace or to create the temporary file in
// it means. ENOENT for a file created through the token's name in a
// workspace just opened by descriptor: a component of that path is gone,
// which is the token's name taken over, though an sshfs client may still
// find it in its lookup and listing caches (token_gone then says no).
// ESTALE alone is not that: it is reported as it is unless the token is
// gone.
failure workspace_failure(os& sys, const lock_handle& h, const write_target& t,
                          const workspace_fds& ws, const failure& f) {
  const bool enoent_in_workspace = ws.w >= 0 && f.code == std::errc::no_such_file_or_directory;
  if (enoent_in_workspace || (missing_code(f.code) && token_gone(sys, h)))
    return lost_before_commit(t, h.token());
  return f;
}

failure fenced_commit(os& sys, const lock_handle& h, const write_target& t,
                      std::string_view contents, const write_options& options,
                      const commit_rules& rules, bool& cross_device) {
  cross_device = false;
  const std::string workspace = h.path().string() + "/w";
  const auto d = handle_directory(h);
  if (!d) return lost_before_commit(t, h.token());
  workspace_fds ws{sys};
  failure f = open_workspace(sys, h, *d, t, rules.dir_mode, ws);
  // A failed update leaves nothing behind, not even a workspace it made.
  // Through the token's name, not its descriptor: after a takeover the
  // descriptor is the new owner's token, and its `w` is not ours to remove.
  auto undo_workspace = [&] {
    if (ws.made) sys.remove_at(d->fd, h.token() + "/w", true);
  };
  if (!f && rules.sweep) {
    std::size_t swept = 0;
    sweep_impl(sys, workspace, workspace_leftover_age, swept, t.name);
  }
  temp_file tmp;
  // By path, through the token's name, though the workspace was judged by
  // descriptor: a descriptor follows the directory, and a token taken over
  // meanwhile would get our temporary file in its new owner's workspace.
  if (!f) f = write_temp(sys, t, workspace, contents, options, tmp);
  if (f) {
    undo_workspace();
    return workspace_failure(sys, h, t, ws, f);
  }
  // The time the file server gave the new version, for the mark.
  file_status written;
  const bool marked = rules.mark && !sys.status(tmp.path, written);
  // Relative to the lock directory and through the token's name: the fence.
  const std::string in_lock = h.token() + "/w/" + tmp.path.substr(workspace.size() + 1);
  std::error_code ec = sys.rename_at(d->fd, in_lock, os::cwd, t.path);
  if (ec == std::errc::cross_device_link) {
    sys.remove_file(tmp.path);
    undo_workspace();
    cross_device = true;
    return {};
  }
  if (ec) {
    sys.remove_file(tmp.path);  // gone with the token when the lock was lost
    undo_workspace();
    // The temporary file was just made through the token's name, so a
    // rename that no longer finds it, into a directory that is there, lost
    // the token: an sshfs client may still find the old name in both its
    // lookup and its listing caches.
    file_status dir;
    if (missing_code(ec) && (token_gone(sys, h) || !sys.status(t.dir, dir)))
      return lost_before_commit(t, h.token());
    return write_failure("rename", t, "cannot rename " + tmp.path + " over the target", ec);
  }
  if (marked) write_mark(sys, workspace, *rules.mark, fnv1a(contents), written.mtime_us);
  return {};
}

// Lock and target on different filesystems: temp beside the target, and
// a refresh rename just before the commit proves we still hold the lock.
failure unfenced_commit(os& sys, lock_handle& h, const write_target& t,
                        const std::string& contents, const write_options& options) {
  temp_file tmp;
  if (failure f = write_temp(sys, t, t.dir, contents, options, tmp)) return f;
  std::error_code ec;
  const std::string token = h.token();
  h.refresh(ec);
  if (ec) {
    abandon(sys, tmp);
    if (ec == errc::lock_lost) return lost_before_commit(t, token);
    return make_failure(ec, last_error_message());
  }
  return commit_temp(sys, tmp.path, t, options);
}

// The status of `fd` after `current` was read through it, when the two
// agree on the size. A client that keeps an older size cuts the read there
// (sshfs's default mount), and its attributes may expire between the read
// and this fstat: the time is then the new version's while the bytes were
// cut at the old size, which must not pass as a version of its own.
bool status_of_whole_read(os& sys, const std::optional<std::string>& current, int fd,
                          file_status& st) {
  return current && fd >= 0 && !sys.file_status_of(fd, st) && st.size == current->size();
}

// Whether `current` (read through descriptor `fd`) is the version that
// `mark` describes, or one written after it outside the lock.
bool matches_mark(os& sys, const version_mark& mark, const std::optional<std::string>& current,
                  int fd, std::int64_t skew_us) {
  if (!mark.present) return true;
  if (current && fnv1a(*current) == mark.hash) return true;
  // Newer than the mark: written outside the lock, after the last commit.
  file_status st;
  return status_of_whole_read(sys, current, fd, st) && st.mtime_us > mark.mtime_us + skew_us;
}

// Strictly newer than the mark, whatever the skew allowance.
bool newer_than_mark(os& sys, const version_mark& mark, const std::optional<std::string>& current,
                     int fd) {
  file_status st;
  return status_of_whole_read(sys, current, fd, st) && st.mtime_us > mark.mtime_us;
}

bool stale_handle(const failure& f) { return is_estale(f.code); }

constexpr std::int64_t stale_read_budget_us = 3'000'000;

// The refusal after a stale-read wait that did not end: what the client
// kept reading, and the cache setting to change.
failure stale_read_failure(os& sys, const write_target& t, const failure& f,
                           const version_mark& mark, const std::optional<std::string>& current,
                           int fd, int reads, std::int64_t start) {
  filesystem_info fs;
  sys.filesystem_of(t.dir, true, fs);
  const std::string type = fs.name.empty() ? "a network filesystem" : fs.name;
  std::string seen;
  file_status st;
  if (!f && fd >= 0 && !sys.file_status_of(fd, st))
    seen = ": it reads " + std::to_string(current ? current->size() : 0) +
           " bytes modified at " + format_utc(st.mtime_us) + ", the last update wrote " +
           mark.name + " at " + format_utc(mark.mtime_us);
  const std::string what =
      stale_handle(f) ? "this client keeps resolving the file to one the server no longer "
                        "has (" + f.code.message() + ")"
                      : "this client keeps reading a version older than the one the last "
                        "update committed" + seen;
  return make_failure(
      errc::stale_data,
      describe("read", t.path,
               what + " (" + std::to_string(reads) + " reads in " +
                   std::to_string((sys.steady_now_us() - start) / 1000) +
                   " ms); nothing was written",
               {}) +
          "; the filesystem (" + type +
          ") serves stale cached data: " + cache_fix(fs.name, false) +
          " (tokenlock doctor DIR --peer DIR2 checks a mount). If the file was "
          "written outside the lock in the same second as the last update, write it again, "
          "or remove the lock directory while no process uses it");
}

// Reads the target under the lock, keeping it open in `fd`. On a network
// filesystem a read is stale when it is older than the mark, or when the
// client's cached name leads to a file the server no longer has (ESTALE,
// GlusterFS); then it reads again until the cache lets go, for up to
// stale_read_budget, and then fails with stale_data.
failure read_under_lock(os& sys, const write_target& t, const lock_options& lo, bool network,
                        const version_mark& mark, std::optional<std::string>& current,
                        int& fd, const read_rules& rules) {
  failure f = read_file_impl(sys, t.path, current, &fd, rules);
  if (!network) return f;
  const std::int64_t skew_us =
      std::chrono::duration_cast<std::chrono::microseconds>(lo.skew_allowance).count();
  auto settled = [&] { return !f && matches_mark(sys, mark, current, fd, skew_us); };
  if (settled() || (f && !stale_handle(f))) return f;
  // Caches let go after their timeout (a second or so by default); the
  // lease must outlast the wait, so it takes at most a quarter of it.
  const std::int64_t start = sys.steady_now_us();
  const std::int64_t budget = std::min<std::int64_t>(
      stale_read_budget_us,
      std::chrono::duration_cast<std::chrono::microseconds>(lo.lease).count() / 4);
  std::int64_t pause = 5000;
  // One version, read again and again for the whole wait, and newer than
  // the mark though within the skew allowance: written outside the lock
  // (a legacy script, by hand) just after the last commit. A stale cache
  // serves the version the commit replaced, which is older.
  const std::uint64_t first_hash = current ? fnv1a(*current) : 0;
  bool one_version = current.has_value();
  for (int reads = 1;; ++reads) {
    const std::int64_t left = start + budget - sys.steady_now_us();
    if (left <= 0 && !f && one_version && newer_than_mark(sys, mark, current, fd)) return f;
    if (left <= 0) return stale_read_failure(sys, t, f, mark, current, fd, reads, start);
    sys.sleep_for(std::chrono::microseconds(std::min(pause, left)));
    pause = std::min<std::int64_t>(pause * 2, 200'000);
    if (fd >= 0) sys.close(fd);
    fd = -1;
    f = read_file_impl(sys, t.path, current, &fd, rules);
    if (settled() || (f && !stale_handle(f))) return f;
    if (!current || fnv1a(*current) != first_hash) one_version = false;
  }
}


// Whether the commit can be fenced through the token: the token is a
// directory on the target's filesystem. `why` says why not; empty when it
// can.
failure fence_possible(os& sys, const lock_handle& h, const write_target& t, std::string& why) {
  why.clear();
  file_status token;
  std::error_code ec = sys.status(h.path().string(), token);
  if (missing_code(ec)) {
    if (token_gone(sys, h)) return lost_before_commit(t, h.token());
    // Listed, so ours: the lock directory has the token's device.
    ec = sys.status(h.directory().string(), token);
  }
  if (ec)
    return make_failure(ec, describe("commit", t.path,
                                     "cannot look at the lock's token " + h.path().string(), ec));
  // A token that is a file, as a legacy script's setup may have made
  // "lockfile" (docs/protocol.md, Legacy tokens), has no room for the
  // fenced temporary file.
  if (!token.is_directory)
    why = "the lock's token " + h.path().string() +
          " is a file, not a directory, so the commit cannot be fenced through it; nothing was "
          "written: once no legacy script uses the lock, remove the lock directory and it is "
          "recreated with a directory token";
  else if (token.device != t.dir_device)
    why = "the lock directory " + h.directory().string() +
          " and the target are on different filesystems, so the commit cannot be fenced; "
          "nothing was written: put the lock directory beside the file";
  return {};
}

// Whether the lock's directory is on a network filesystem, where commits
// keep version marks (see "The version mark" above). Unknown counts as
// local, as the library does everywhere else.
bool on_network(os& sys, const lock_handle& h) {
  filesystem_info fs;
  return !sys.filesystem_of(h.directory().string(), false, fs) && !fs.local;
}

// The file lock's commit: fenced through the token, or else, when the
// token cannot fence it, `cross_device` set and nothing written.
failure commit_through_token(os& sys, const lock_handle& h, const write_target& t,
                             std::string_view contents, const write_options& in_lock,
                             const commit_rules& rules, std::string& why) {
  if (failure f = fence_possible(sys, h, t, why)) return f;
  if (!why.empty()) return {};
  bool cross_device = false;
  if (failure f = fenced_commit(sys, h, t, contents, in_lock, rules, cross_device))
    return f;
  // The devices matched, yet the rename crossed filesystems: bind mounts.
  if (cross_device)
    why = "the lock directory " + h.directory().string() +
          " and the target are on different filesystems (mounts), so the commit cannot be "
          "fenced; nothing was written: put the lock directory beside the file";
  return {};
}

// Whether this commit sweeps (about one in options.sweep_every).
bool sweeps(os& sys, const update_options& options) {
  return options.sweep_every != 0 && sys.random_u64() % options.sweep_every == 0;
}

// The file lock's part of the update flow (update_flow, update_impl.hpp).
class file_lock_steps {
 public:
  file_lock_steps(os& sys, const rename_lock& lock, const update_options& options,
                  update_result& result)
      : sys_(sys), lock_(lock), options_(options), result_(result) {}

  failure acquire() {
    // Asked before acquiring, to keep the system call out of the critical
    // section; a lock directory that does not exist yet is asked after.
    filesystem_info fs;
    bool known = !sys_.filesystem_of(lock_.directory().string(), false, fs);
    std::error_code ec;
    h_ = lock_.acquire(ec);
    if (ec) return make_failure(ec, last_error_message());
    if (!known) known = !sys_.filesystem_of(h_.path().string(), false, fs);
    network_ = known && !fs.local;
    return {};
  }

  std::chrono::milliseconds lease() const { return lock_.options().lease; }
  lock_handle& handle() { return h_; }

  failure read(const write_target& t, std::optional<std::string>& current, int& fd,
               const read_rules& rules) {
    if (network_)
      if (failure f = read_mark(sys_, t, h_.path().string() + "/w", mark_)) return f;
    return read_under_lock(sys_, t, lock_.options(), network_, mark_, current, fd, rules);
  }

  failure commit(const write_target& t, const std::string& next, const write_options& in_lock) {
    std::string why;
    const commit_rules rules{created_mode(sharing_of(lock_.options())), network_ ? &mark_ : nullptr,
                             sweeps(sys_, options_)};
    if (failure f = commit_through_token(sys_, h_, t, next, in_lock, rules, why))
      return f;
    if (why.empty()) return {};
    if (options_.require_fence) return make_failure(errc::not_fenced, describe("commit", t.path, why, {}));
    result_.fenced = false;
    return unfenced_commit(sys_, h_, t, next, in_lock);
  }

  void release() {
    std::error_code ec;
    h_.release(ec);
  }

 private:
  os& sys_;
  const rename_lock& lock_;
  const update_options& options_;
  update_result& result_;
  lock_handle h_;
  bool network_ = false;
  version_mark mark_;
};

failure commit_impl(const lock_handle& h, const boost::filesystem::path& target,
                    std::string_view contents, const write_options& options) {
  if (h.mode() == lock_mode::shared) return refuse_shared("commit", target.string());
  // A handle that held a token and let it go (released, or found taken
  // over by a refresh or keep_alive) keeps its lock; one that never held
  // any has none.
  if (h.token().empty() && h.directory().empty())
    return make_failure(errc::bad_argument,
                        "tokenlock: commit " + target.string() +
                            ": the lock handle holds no lock (acquire it first); nothing was "
                            "written");
  if (h.token().empty())
    return make_failure(errc::lock_lost,
                        describe("commit", target.string(),
                                 "the handle no longer holds the lock " + h.directory().string() +
                                     " (it was released, or a refresh found it taken over); "
                                     "nothing was written",
                                 {}));
  if (!h.owns())
    return make_failure(errc::not_owner,
                        describe("commit", target.string(),
                                 "the lock is held by the process that acquired it, not by "
                                 "this forked child; nothing was written",
                                 {}));
  os& sys = handle_os(h);
  write_target t;
  if (failure f = resolve_target(sys, target, options, t)) return f;
  const bool network = on_network(sys, h);
  version_mark mark;
  if (network)
    if (failure f = read_mark(sys, t, h.path().string() + "/w", mark)) return f;
  std::string why;
  const commit_rules rules{handle_dir_mode(h), network ? &mark : nullptr,
                           sweeps(sys, update_options{})};
  if (failure f =
          commit_through_token(sys, h, t, contents, in_lock_options(options), rules, why))
    return f;
  if (!why.empty())
    return make_failure(errc::not_fenced,
                        describe("commit", t.path,
                                 why + " (an update under the lock, update_file or tokenlock "
                                       "write --lock, commits there with an ownership check "
                                       "just before)",
                                 {}));
  // Worded as the updater's: to its caller the commit is the update.
  return sync_target_directory(sys, t, options.sync, "the update is committed",
                               "; do not repeat the update");
}

}  // namespace

failure update_impl(os& sys, const boost::filesystem::path& target, const rename_lock& lock,
                    const compute_function& compute, const update_options& options,
                    update_result& result, const read_rules* rules) {
  result = update_result{};
  if (lock.options().mode == lock_mode::shared || lock.options().slots)
    return refuse_shared("update", target.string());
  file_lock_steps steps(sys, lock, options, result);
  return update_flow(sys, steps, target, compute, options,
                     rules ? *rules : update_read_rules(options));
}

void sweep_target_temps(os& sys, const write_target& t, std::chrono::milliseconds lease,
                        const update_options& options) {
  // Anything older than a lease cannot belong to a live writer that holds
  // this lock; the unfenced commit, atomic_write and the command's write
  // leave theirs beside the target when they crash.
  if (!sweeps(sys, options)) return;
  std::size_t swept = 0;
  sweep_impl(sys, t.dir, std::chrono::duration_cast<std::chrono::microseconds>(lease), swept,
             t.name);
}

failure sync_after_commit(os& sys, const write_target& t, const update_options& options) {
  return sync_target_directory(sys, t, options.write.sync, "the update is committed",
                               "; do not repeat the update");
}

failure parse_counter(const std::string& path, const std::optional<std::string>& text,
                      std::optional<std::uint64_t>& value) {
  value.reset();
  if (!text) return {};
  const std::string& s = *text;
  std::uint64_t v = 0;
  const bool ok = !s.empty() && s.back() == '\n' &&
                  parse_decimal(std::string_view(s).substr(0, s.size() - 1), 20, true, UINT64_MAX, v);
  if (!ok) {
    std::string shown;
    for (char c : s.substr(0, 24)) {
      if (c >= 0x20 && c < 0x7f) {
        shown += c;
      } else {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
        shown += buf;
      }
    }
    if (s.size() > 24) shown += "...";
    return make_failure(errc::corrupt_data,
                        describe("read counter", path,
                                 "the file does not hold one unsigned decimal and a newline "
                                 "(it holds \"" +
                                     shown + "\", " + std::to_string(s.size()) +
                                     " bytes); it was left as it is: repair or remove it by hand",
                                 {}));
  }
  value = v;
  return {};
}

}  // namespace detail

namespace detail {

compute_function counter_step(const std::string& path, std::uint64_t by, std::uint64_t& out) {
  return [&out, path, by](const std::optional<std::string>& current, std::string& next) -> failure {
    std::optional<std::uint64_t> v;
    if (failure f = parse_counter(path, current, v)) return f;
    const std::uint64_t old = v.value_or(0);
    if (by > UINT64_MAX - old)
      return make_failure(std::make_error_code(std::errc::value_too_large),
                          describe("increment", path,
                                   "adding " + std::to_string(by) + " to " + std::to_string(old) +
                                       " would overflow 64 bits; the counter was left as it is",
                                   {}));
    out = old + by;
    next = std::to_string(out) + "\n";
    return {};
  };
}

}  // namespace detail

update_result update_file(const boost::filesystem::path& target, const rename_lock& lock,
                          const update_function& fn, const update_options& options) {
  update_result r;
  failure f = with_user_function(fn, [&](const compute_function& c) {
    return update_impl(*system_os(), target, lock, c, options, r);
  });
  if (f) throw_failure(f);
  return r;
}

update_result update_file(const boost::filesystem::path& target, const rename_lock& lock,
                          const update_function& fn, const update_options& options,
                          std::error_code& ec) {
  update_result r;
  failure f = with_user_function(fn, [&](const compute_function& c) {
    failure inner;
    run_noexcept(ec, [&] {
      inner = update_impl(*system_os(), target, lock, c, options, r);
      return inner;
    });
    return inner;
  });
  (void)f;
  return r;
}

std::uint64_t increment_counter(const boost::filesystem::path& file, const rename_lock& lock,
                                std::uint64_t by, const update_options& options) {
  std::uint64_t value = 0;
  update_result r;
  run_throwing([&] {
    const read_rules rules = counter_update_rules(options);
    return update_impl(*system_os(), file, lock, counter_step(file.string(), by, value), options, r,
                       &rules);
  });
  return value;
}

std::uint64_t increment_counter(const boost::filesystem::path& file, const rename_lock& lock,
                                std::uint64_t by, const update_options& options,
                                std::error_code& ec) noexcept {
  std::uint64_t value = 0;
  update_result r;
  run_noexcept(ec, [&] {
    const read_rules rules = counter_update_rules(options);
    return update_impl(*system_os(), file, lock, counter_step(file.string(), by, value), options, r,
                       &rules);
  });
  // After dir_sync_failed the new value is committed: hand it out too.
  return !ec || ec == errc::dir_sync_failed ? value : 0;
}

void commit_file(const lock_handle& lock, const boost::filesystem::path& target,
                 std::string_view contents, const write_options& options) {
  run_throwing([&] { return commit_impl(lock, target, contents, options); });
}

void commit_file(const lock_handle& lock, const boost::filesystem::path& target,
                 std::string_view contents, const write_options& options,
                 std::error_code& ec) noexcept {
  run_noexcept(ec, [&] { return commit_impl(lock, target, contents, options); });
}

std::optional<std::uint64_t> read_counter(const boost::filesystem::path& file) {
  std::optional<std::uint64_t> v;
  run_throwing([&] {
    std::optional<std::string> text;
    if (failure f = read_file_impl(*system_os(), file.string(), text, nullptr, counter_rules()))
      return f;
    return parse_counter(file.string(), text, v);
  });
  return v;
}

std::optional<std::uint64_t> read_counter(const boost::filesystem::path& file,
                                          std::error_code& ec) noexcept {
  std::optional<std::uint64_t> v;
  run_noexcept(ec, [&] {
    std::optional<std::string> text;
    if (failure f = read_file_impl(*system_os(), file.string(), text, nullptr, counter_rules()))
      return f;
    return parse_counter(file.string(), text, v);
  });
  if (ec) v.reset();
  return v;
}

}  // namespace tokenlock
