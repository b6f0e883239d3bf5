#include "lockdir/lock_directory.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <vector>

#include "core/errno_advice.hpp"
#include "lockdir/token_name.hpp"
#include "tokenlock/clock_judgement.hpp"
#include "lockdir/trust.hpp"

namespace tokenlock::detail {
namespace {

using std::chrono::microseconds;

// How long to wait before the second listing that confirms an anomaly.
constexpr std::chrono::microseconds confirm_pause{2000};

std::string hex16(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string octal(unsigned mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", mode);
  return buf;
}

struct listing {
  std::vector<std::string> names;
  std::vector<std::string> tokens;     // free and held token names, sorted
  std::vector<std::string> malformed;  // "lockfile.*" names that break the grammar
};

std::error_code list_once(os& sys, const open_dir& dir, listing& out) {
  out = listing{};
  if (auto ec = sys.list_directory_at(dir.fd, out.names)) return ec;
  for (const auto& n : out.names) {
    switch (classify_name(n)) {
      case name_kind::free:
      case name_kind::held:
      case name_kind::legacy: out.tokens.push_back(n); break;
      case name_kind::malformed: out.malformed.push_back(n); break;
      case name_kind::other: break;
    }
  }
  std::sort(out.tokens.begin(), out.tokens.end());
  // A name seen twice in one listing is a readdir artefact, not two tokens.
  out.tokens.erase(std::unique(out.tokens.begin(), out.tokens.end()), out.tokens.end());
  return {};
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& n : v) {
    if (!s.empty()) s += ", ";
    s += shown_name(n);
  }
  return s;
}

void fill_observation(const std::string& name, observation& out) {
  held_token t;
  const name_kind kind = classify_name(name, &t);
  if (kind == name_kind::free) {
    out.kind = observation::free;
    return;
  }
  out.kind = observation::held;
  out.token = observed(name, t, kind);
}

}  // namespace

observed_token observed(const std::string& name, const held_token& t, name_kind kind) {
  observed_token o;
  o.name = name;
  o.expiry_us = t.expiry_us;
  o.host_tag = std::string(t.host_tag);
  o.pid = t.pid;
  o.start_time = t.start_time;
  o.legacy = kind == name_kind::legacy;
  return o;
}

failure make_lock_paths(const boost::filesystem::path& dir, lock_paths& out) {
  std::string s = dir.string();
  if (s.find('\0') != std::string::npos)
    return make_failure(errc::bad_argument, "tokenlock: lock directory path contains a NUL byte");
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  if (s.empty())
    return make_failure(errc::bad_argument, "tokenlock: the lock directory path is empty");
  if (s == "/" || s == "." || s == "..")
    return make_failure(errc::bad_argument,
                        "tokenlock: \"" + s +
                            "\" cannot be a lock directory: the lock directory is created and "
                            "replaced by rename; name a directory of its own, such as data.lock");
  out.dir_path = dir;
  out.dir = s;
  out.dir_slash = s + "/";
  out.free_path = out.dir_slash + std::string(free_token);
  out.board_path = s + ".wait";
  const auto slash = s.rfind('/');
  out.parent = slash == std::string::npos ? "." : slash == 0 ? "/" : s.substr(0, slash);
  out.name = slash == std::string::npos ? s : s.substr(slash + 1);
  out.init_prefix = out.name + ".init.";
  return {};
}

open_dir::open_dir(std::shared_ptr<os> s, int f, const file_status& st,
                   std::optional<unsigned> g) noexcept
    : sys(std::move(s)), fd(f), device(st.device), inode(st.inode), uid(st.uid), group(g) {}

open_dir::~open_dir() { sys->close(fd); }

namespace {

// Opens the directory at the lock's path and judges it; null when missing.
failure open_and_judge(const std::shared_ptr<os>& sys, const lock_paths& paths,
                       const sharing& share, const char* step,
                       std::shared_ptr<const open_dir>& out) {
  out.reset();
  int fd = -1;
  std::error_code ec = sys->open_directory(os::cwd, paths.dir, fd);
  if (ec == std::errc::no_such_file_or_directory) return {};
  if (ec == std::errc::too_many_symbolic_link_levels || ec == std::errc::not_a_directory) {
    file_status st;
    if (!sys->status(paths.dir, st) && st.is_symlink)
      return make_failure(errc::untrusted,
                          describe(step, paths.dir,
                                   "refusing a lock directory that is a symbolic link (owner uid " +
                                       std::to_string(st.uid) +
                                       "): tokenlock never follows one there",
                                   {}) +
                              "; name the directory it points to, or remove the link");
    // A file at the lock's path: flock(1)'s lock file, or a script that
    // locks itself. Said as such, with what to do; nothing is touched.
    if (ec == std::errc::not_a_directory && !sys->status(paths.dir, st) && st.is_regular)
      return make_failure(ec, describe(step, paths.dir,
                                       "it is a regular file, and tokenlock's lock is a directory "
                                       "(a file left by flock(1), or a script locking itself?)",
                                       {}) +
                                  "; name another path for the lock (such as " +
                                  paths.dir + ".lock), or remove the file if nothing "
                                  "locks it with flock(1) any more");
  }
  if (ec) return os_failure(*sys, paths, step, "cannot open the lock directory", "", ec);
  file_status st;
  ec = sys->status_at(fd, "", st);
  if (ec) {
    sys->close(fd);
    return os_failure(*sys, paths, step, "cannot look at the lock directory", "", ec);
  }
  std::optional<unsigned> group;
  failure f = chosen_group(*sys, share, st, step, group);
  if (!f) f = check_trusted(*sys, st, paths.dir, step, "lock directory", group);
  if (f) {
    sys->close(fd);
    return f;
  }
  out = std::make_shared<const open_dir>(sys, fd, st, group);
  std::atomic_store(&paths.opened, out);
  return {};
}

}  // namespace

failure lock_directory_fd(const std::shared_ptr<os>& sys, const lock_paths& paths,
                          const sharing& share, const char* step,
                          std::shared_ptr<const open_dir>& out) {
  out = current_dir(paths);
  if (out) return {};
  return open_and_judge(sys, paths, share, step, out);
}

failure reopen_if_replaced(const std::shared_ptr<os>& sys, const lock_paths& paths,
                           const sharing& share, const char* step,
                           std::shared_ptr<const open_dir>& current) {
  file_status st;
  std::error_code ec = sys->status(paths.dir, st);
  if (ec == std::errc::no_such_file_or_directory) {
    current.reset();
    std::atomic_store(&paths.opened, current);
    return {};
  }
  if (!ec && current && st.device == current->device && st.inode == current->inode) return {};
  return open_and_judge(sys, paths, share, step, current);
}

failure observe(os& sys, const lock_paths& paths, const open_dir* dir, const char* step,
                observation& out) {
  if (!dir) {
    out.kind = observation::missing;
    return {};
  }
  listing first;
  for (int round = 0;; ++round) {
    if (auto ec = list_once(sys, *dir, first)) {
      if (ec == std::errc::no_such_file_or_directory) {
        out.kind = observation::missing;
        return {};
      }
      return os_failure(sys, paths, step, "cannot list the lock directory", "", ec);
    }
    if (first.malformed.empty() && first.tokens.size() == 1) {
      fill_observation(first.tokens.front(), out);
      return {};
    }
    if (first.names.empty()) {
      out.kind = observation::empty;
      return {};
    }
    if (round == 1) break;
    sys.sleep_for(confirm_pause);
  }
  // Two listings a moment apart both show an anomaly; report the second.
  // (Malformed names cannot be readdir artefacts, but confirming costs
  // nothing on a path that ends in an error anyway.)
  if (!first.malformed.empty())
    return make_failure(
        errc::lock_corrupt,
        describe(step, paths.dir,
                 "entry that is not a valid token: " + joined(first.malformed), {}) +
            "; tokenlock never repairs a lock by itself: if no process uses this lock, remove "
            "the directory and it is recreated on next use");
  if (first.tokens.empty())
    return make_failure(
        errc::token_missing,
        describe(step, paths.dir, "the lock directory holds no token (it holds: " +
                                            joined(first.names) + ")",
                 {}) +
            "; someone removed the token outside the protocol, so a holder may still be "
            "inside its critical section: once no process uses this lock, remove the directory "
            "and it is recreated on next use");
  return make_failure(
      errc::lock_corrupt,
      describe(step, paths.dir, "the lock directory holds " +
                                         std::to_string(first.tokens.size()) +
                                         " tokens: " + joined(first.tokens),
               {}) +
          "; a lock has exactly one token unless files were copied or created outside the "
          "protocol: once no process uses this lock, remove the directory and it is recreated "
          "on next use");
}

namespace {

// A legacy token names no owner and no lease: those scripts take over a
// token older than their timeout, and so does tokenlock, with the skew
// allowance a lease gets (their clocks may differ from ours).
judgement judge_legacy(std::int64_t now, std::int64_t skew, std::int64_t max_lease,
                       const lock_options& options, const observed_token& t) {
  judgement j;
  const std::int64_t timeout =
      std::chrono::duration_cast<std::chrono::microseconds>(options.legacy_timeout).count();
  const std::int64_t ends = t.expiry_us + timeout;
  const std::string who = "a script using the legacy rename lock (" + t.name + ", taken " +
                          format_utc(t.expiry_us) + ")";
  if (ends - now > max_lease + skew) {
    j.stale = true;
    j.reason = "legacy token of " + who + " is dated implausibly far in the future: treated as stale";
    return j;
  }
  if (now > ends + skew) {
    j.stale = true;
    j.reason = "legacy token of " + who + " is older than the legacy timeout of " +
               seconds_text(microseconds(timeout)) + " (by " +
               seconds_text(microseconds(now - ends)) + ")";
    return j;
  }
  j.reason = "held by " + who + " until " + format_utc(ends) + " (the legacy timeout of " +
             seconds_text(microseconds(timeout)) + ")";
  return j;
}

}  // namespace

namespace {

// Whether the owner of a token of this host is provably gone; if so, marks
// `j` dead and stale with the reason.
bool owner_is_gone(os& sys, const observed_token& t, judgement& j) {
  auto gone = [&](const std::string& why) {
    j.owner = owner_liveness::dead;
    j.stale = true;
    j.reason = "owner pid " + std::to_string(t.pid) + " on this host " + why;
    return true;
  };
  if (sys.signal_probe(t.pid) == std::errc::no_such_process) return gone("no longer exists");
  // Success or EPERM: a process with that pid exists. /proc tells whether it
  // is a zombie or a newer process that reused the pid. When /proc cannot
  // be read (hidepid on shared hosts, or a race with exit) the owner counts
  // as alive: the next look, or the lease, settles it.
  process_status ps;
  if (sys.read_process_status(t.pid, ps)) return false;
  if (ps.state == 'Z' || ps.state == 'X') return gone("has exited (zombie)");
  if (t.start_time != 0 && ps.start_time != t.start_time)
    return gone("is gone; the pid now belongs to another process (start time " +
                std::to_string(ps.start_time) + ", token says " + std::to_string(t.start_time) +
                ")");
  return false;
}

}  // namespace

judgement judge(os& sys, const lock_options& options, const observed_token& t) {
  judgement j;
  const process_identity& me = sys.self();
  const std::int64_t now = sys.wall_now_us();
  const std::int64_t skew =
      std::chrono::duration_cast<std::chrono::microseconds>(options.skew_allowance).count();
  // The protocol's bound, not this process's max_lease: every process must
  // agree on which leases are implausible, or an honest holder's long lease
  // would be taken over by a process that allows less.
  const std::int64_t max_lease =
      std::chrono::duration_cast<std::chrono::microseconds>(protocol_max_lease).count();
  if (t.legacy) return judge_legacy(now, skew, max_lease, options, t);
  j.same_host = t.host_tag == me.host_tag;
  const std::string who = "pid " + std::to_string(t.pid) +
                          (j.same_host ? " on this host" : " on host " + shown_name(t.host_tag));

  if (t.expiry_us - now > max_lease + skew) {
    j.stale = true;
    j.reason = "lease of " + who + " ends implausibly far in the future (" +
               format_utc(t.expiry_us) + ", more than the maximum lease of " +
               seconds_text(microseconds(max_lease)) + " from now): treated as stale";
    return j;
  }
  if (now > t.expiry_us + skew) {
    j.stale = true;
    j.reason = "lease of " + who + " ended " + seconds_text(microseconds(now - t.expiry_us)) +
               " ago (" + format_utc(t.expiry_us) + ")";
    return j;
  }
  const std::string until = "held by " + who + " until " + format_utc(t.expiry_us);
  if (!j.same_host || !options.detect_dead_owner) {
    j.reason = until;
    return j;
  }
  if (!owner_is_gone(sys, t, j)) {
    j.owner = owner_liveness::alive;
    j.reason = until;
  }
  return j;
}

namespace {

// A directory that the caller opened by descriptor and closes on every way out.
// The directory that holds the lock directory, by descriptor. Its path is
// the caller's and may run through symbolic links (/var/lock is one on
// Debian): "/." makes the last component "." so that the link is followed
// where the caller named it and nowhere else.
std::error_code open_parent(os& sys, const lock_paths& paths, int& fd) {
  return sys.open_directory(os::cwd, paths.parent == "/" ? "/" : paths.parent + "/.", fd);
}

// The creation directory's name: named like a token, so that whoever finds
// it left behind can tell whether its creator still lives
// (sweep_creation_leftovers). A name that would not fit NAME_MAX gets a
// nonce only, swept by its age.
std::string init_name(os& sys, const lock_paths& paths, const lock_options& options) {
  const process_identity& me = sys.self();
  const std::int64_t expiry =
      sys.wall_now_us() +
      std::chrono::duration_cast<std::chrono::microseconds>(options.lease).count();
  const std::string owned =
      make_token(expiry, me.host_tag, me.pid, me.start_time, sys.random_u64());
  std::string init = paths.init_prefix;
  if (paths.init_prefix.size() + owned.size() - held_prefix.size() <= 255)
    init.append(owned, held_prefix.size(), std::string::npos);
  else
    init += hex16(sys.random_u64());
  return init;
}

// With a group named for sharing, the creation directory and its token
// get that group: the other members then trust what this user made.
failure give_named_group(os& sys, const lock_paths& paths, int dir, const std::string& init) {
  std::optional<unsigned> group;
  if (failure f = named_group(sys, paths.share, "create", group)) return f;
  if (!group) return {};
  scoped_fd token{sys};
  std::error_code ec = sys.set_owner(dir, static_cast<unsigned>(-1), *group);
  if (!ec) ec = sys.open_directory(dir, std::string(free_token), token.fd);
  if (!ec) ec = sys.set_owner(token.fd, static_cast<unsigned>(-1), *group);
  if (ec)
    return os_failure(sys, paths, "create",
                      "cannot give " + init + " the group " + std::to_string(*group), "", ec);
  return {};
}

// Fills the creation directory `name` (in the parent open as `parent`)
// with the free token and flushes it. `made` is its identity, checked
// before anything is removed from it.
failure populate_init(os& sys, const lock_paths& paths, int parent, const std::string& name,
                      file_status& made) {
  const std::string init = paths.parent + "/" + name;
  scoped_fd dir{sys};
  std::error_code ec = sys.open_directory(parent, name, dir.fd);
  if (!ec) ec = sys.status_at(dir.fd, "", made);
  if (ec) return os_failure(sys, paths, "create", "cannot open " + init + " that we made", "", ec);
  if (made.uid != sys.self().euid)
    return make_failure(errc::untrusted,
                        describe("create", paths.dir,
                                 "refusing " + init + ": it was replaced by a directory of uid " +
                                     std::to_string(made.uid) + " while we created it",
                                 {}) +
                            "; another user can write " + paths.parent +
                            ": keep locks in a directory only trusted users can write");
  if ((ec = sys.make_directory_at(dir.fd, std::string(free_token), paths.dir_mode)))
    return os_failure(sys, paths, "create", "cannot create the token " + init + "/lockfile", "", ec);
  if (failure f = give_named_group(sys, paths, dir.fd, init)) return f;
  if ((ec = sys.sync_directory(init)))
    return os_failure(sys, paths, "create", "cannot sync " + init, "", ec);
  return {};
}

// Removes the creation directory `name` with its token, if it still is the
// directory `made` (in a parent that others may write, the name may lead
// elsewhere by now).
void remove_init(os& sys, int parent, const std::string& name, const file_status& made) {
  scoped_fd dir{sys};
  file_status st;
  if (sys.open_directory(parent, name, dir.fd) || sys.status_at(dir.fd, "", st) ||
      st.device != made.device || st.inode != made.inode)
    return;
  sys.remove_at(dir.fd, std::string(free_token), true);
  sys.remove_at(parent, name, true);
}

// What the rename of the populated creation directory onto the lock
// directory's name answered: created, lost to another creator, or failed.
failure placed(os& sys, const lock_paths& paths, int parent, const std::string& name,
               std::error_code ec, bool& remove) {
  remove = true;
  if (ec == std::errc::directory_not_empty || ec == std::errc::file_exists) {
    // Somebody else's directory won, or it was not empty after all.
    return {};
  }
  if (ec == std::errc::no_such_file_or_directory) return {};  // swept meanwhile: start over
  if (ec == std::errc::operation_not_permitted || ec == std::errc::permission_denied) {
    // sshfs (SFTP) reports a directory renamed onto a non-empty one as
    // EPERM, where a local filesystem says ENOTEMPTY. If the lock directory
    // now exists and is one we may use, that is what happened; one we may
    // not use (say another user's, in a sticky directory) is refused by the
    // next look, which judges it.
    file_status st;
    if (!sys.status_at(parent, paths.name, st) && st.is_directory) return {};
  }
  if (ec)
    return os_failure(sys, paths, "create",
                      "cannot rename " + paths.parent + "/" + name + " to the lock directory", "",
                      ec);
  remove = false;
  return {};
}

}  // namespace

failure create_lock_directory(os& sys, const lock_paths& paths, const lock_options& options) {
  scoped_fd parent{sys};
  if (std::error_code ec = open_parent(sys, paths, parent.fd)) {
    if (ec == std::errc::no_such_file_or_directory)
      return make_failure(ec, describe("create", paths.dir, "cannot open its parent directory", ec) +
                                  "; the parent directory of the lock directory must exist");
    return os_failure(sys, paths, "create", "cannot open the parent directory " + paths.parent, "", ec);
  }
  const std::string name = init_name(sys, paths, options);
  const std::string init = paths.parent + "/" + name;
  if (std::error_code ec = sys.make_directory_at(parent.fd, name, paths.dir_mode)) {
    std::string what = "cannot create the temporary directory " + init;
    if (ec == std::errc::no_such_file_or_directory)
      return make_failure(ec, describe("create", paths.dir, what, ec) +
                                  "; the parent directory of the lock directory must exist");
    return os_failure(sys, paths, "create", what, "", ec);
  }
  file_status made;
  if (failure f = populate_init(sys, paths, parent.fd, name, made)) {
    if (made.inode != 0)
      remove_init(sys, parent.fd, name, made);
    else
      sys.remove_at(parent.fd, name, true);  // empty: rmdir removes nothing else
    return f;
  }
  bool remove = true;
  failure f = placed(sys, paths, parent.fd, name,
                     sys.rename_at(parent.fd, name, parent.fd, paths.name), remove);
  if (remove) {
    remove_init(sys, parent.fd, name, made);
    if (!f) sweep_creation_leftovers(sys, paths, options);
    return f;
  }
  // Make the new directory entry durable. Failing here is not an error of the
  // lock: the directory exists and works; a crash may undo it, which the
  // next acquire repairs by creating it again.
  sys.sync_directory(paths.parent);
  sweep_creation_leftovers(sys, paths, options);
  return {};
}

namespace {

// Whether the creation leftover `name` (of `st`) is ours to remove now: our
// own, a directory, of the exact form, and its creator gone or stalled past
// its lease (judged like a token), or, when its name holds only a nonce,
// older than any creation can take.
bool removable_leftover(os& sys, const lock_paths& paths, const lock_options& options,
                        const std::string& name, const file_status& st) {
  if (st.is_symlink || !st.is_directory || st.uid != sys.self().euid) return false;
  const std::string rest = name.substr(paths.init_prefix.size());
  held_token t;
  // t's host tag points into this name: it must outlive the judging.
  const std::string as_token = std::string(held_prefix) + rest;
  if (classify_name(as_token, &t) == name_kind::held)
    return judge(sys, options, observed(name, t, name_kind::held)).stale;
  if (rest.size() != 16 || rest.find_first_not_of("0123456789abcdef") != std::string::npos)
    return false;
  const auto age = std::chrono::duration_cast<std::chrono::microseconds>(options.max_lease +
                                                                         options.skew_allowance);
  return st.mtime_us <= sys.wall_now_us() - age.count();
}

}  // namespace

std::size_t sweep_creation_leftovers(os& sys, const lock_paths& paths,
                                     const lock_options& options) {
  scoped_fd parent{sys};
  std::vector<std::string> names;
  if (open_parent(sys, paths, parent.fd) || sys.list_directory_at(parent.fd, names)) return 0;
  const std::string& prefix = paths.init_prefix;
  std::size_t removed = 0;
  for (const auto& n : names) {
    if (n.size() <= prefix.size() || n.compare(0, prefix.size(), prefix) != 0) continue;
    file_status st;
    if (sys.status_at(parent.fd, n, st) || !removable_leftover(sys, paths, options, n, st)) continue;
    // By name, relative to the parent: had its creator renamed it to the
    // lock directory meanwhile, these find nothing under this name and
    // remove nothing. A name swapped for another directory since the look
    // is left alone (remove_init checks the identity).
    remove_init(sys, parent.fd, n, st);
    file_status after;
    if (sys.status_at(parent.fd, n, after) == std::errc::no_such_file_or_directory) ++removed;
  }
  return removed;
}

namespace {

// Depth-limited: an owner's workspace holds temp files, not trees.
void clear_directory(os& sys, int fd, int depth, bool keep_marks) {
  std::vector<std::string> names;
  if (sys.list_directory_at(fd, names)) return;
  for (const auto& n : names) {
    // Owner marks were judged one by one (token_mark.cpp); ours stays.
    if (keep_marks && depth == 0 && !token_of_mark(n).empty()) continue;
    file_status st;
    if (sys.status_at(fd, n, st)) continue;
    if (st.is_directory && !st.is_symlink) {
      scoped_fd sub{sys};
      if (depth < 8 && !sys.open_directory(fd, n, sub.fd)) clear_directory(sys, sub.fd, depth + 1, keep_marks);
      sys.remove_at(fd, n, true);
    } else {
      sys.remove_at(fd, n, false);  // a symbolic link itself, never what it names
    }
  }
}

}  // namespace

void clear_workspace(os& sys, int dir_fd, const std::string& token, bool keep_marks) {
  scoped_fd workspace{sys};
  if (sys.open_directory(dir_fd, token, workspace.fd)) return;
  clear_directory(sys, workspace.fd, 0, keep_marks);
}

failure os_failure(os& sys, const lock_paths& paths, const char* step, const std::string& what,
                   const std::string& entry, std::error_code ec) {
  std::string msg = describe(step, paths.dir, what, ec);
  const std::string uid = std::to_string(sys.self().euid);
  // EPERM depends on the directory; every other errno reads its advice
  // from the one table.
  switch (ec.value()) {
    case EPERM: {
      file_status dir_st, entry_st;
      if (!sys.status(paths.dir, dir_st) && dir_st.is_sticky && !entry.empty() &&
          !sys.status(paths.dir_slash + entry, entry_st)) {
        msg += "; lock directory " + paths.dir + " is sticky and the token belongs to uid " +
               std::to_string(entry_st.uid) + " (we are uid " + uid +
               "); use a non-sticky directory shared by the users that lock";
      } else {
        msg += "; the filesystem or a file attribute forbids this rename (mode " +
               (sys.status(paths.dir, dir_st) ? std::string("unknown") : octal(dir_st.mode)) +
               "); a sticky directory only lets the token's owner rename it";
      }
      break;
    }
    default: {
      const std::string fix = errno_fix(ec, errno_context::lock_directory, paths.dir, uid);
      if (!fix.empty()) msg += "; " + fix;
    }
  }
  return make_failure(ec, std::move(msg));
}

std::string format_utc(std::int64_t us) {
  // Civil date from days since the epoch (H. Hinnant's algorithm): no libc
  // time functions, which are not all thread-safe.
  std::int64_t secs = us >= 0 ? us / 1000000 : (us - 999999) / 1000000;
  std::int64_t frac = us - secs * 1000000;
  std::int64_t days = secs >= 0 ? secs / 86400 : (secs - 86399) / 86400;
  std::int64_t sod = secs - days * 86400;
  days += 719468;
  std::int64_t era = (days >= 0 ? days : days - 146096) / 146097;
  std::int64_t doe = days - era * 146097;
  std::int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  std::int64_t y = yoe + era * 400;
  std::int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  std::int64_t mp = (5 * doy + 2) / 153;
  std::int64_t d = doy - (153 * mp + 2) / 5 + 1;
  std::int64_t m = mp < 10 ? mp + 3 : mp - 9;
  if (m <= 2) ++y;
  char buf[128];
  std::snprintf(buf, sizeof buf, "%04lld-%02lld-%02lldT%02lld:%02lld:%02lld.%06lldZ",
                static_cast<long long>(y), static_cast<long long>(m), static_cast<long long>(d),
                static_cast<long long>(sod / 3600), static_cast<long long>(sod / 60 % 60),
                static_cast<long long>(sod % 60), static_cast<long long>(frac));
  return buf;
}

}  // namespace tokenlock::detail
