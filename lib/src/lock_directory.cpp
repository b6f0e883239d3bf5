#include "lock_directory.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <vector>

#include "token_name.hpp"

namespace tokenlock::detail {
namespace {

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

std::string seconds_text(std::int64_t us) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3f s", static_cast<double>(us) / 1e6);
  return buf;
}

struct listing {
  std::vector<std::string> names;
  std::vector<std::string> tokens;     // free and held token names, sorted
  std::vector<std::string> malformed;  // "lockfile.*" names that break the grammar
};

std::error_code list_once(os& sys, const lock_paths& paths, listing& out) {
  out = listing{};
  if (auto ec = sys.list_directory(paths.dir, out.names)) return ec;
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
    s += n;
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
  out.init_prefix = (slash == std::string::npos ? s : s.substr(slash + 1)) + ".init.";
  return {};
}

failure observe(os& sys, const lock_paths& paths, const char* step, observation& out) {
  listing first;
  for (int round = 0;; ++round) {
    if (auto ec = list_once(sys, paths, first)) {
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
               seconds_text(timeout) + " (by " + seconds_text(now - ends) + ")";
    return j;
  }
  j.reason = "held by " + who + " until " + format_utc(ends) + " (the legacy timeout of " +
             seconds_text(timeout) + ")";
  return j;
}

}  // namespace

judgement judge(os& sys, const lock_options& options, const observed_token& t) {
  judgement j;
  const process_identity& me = sys.self();
  const std::int64_t now = sys.wall_now_us();
  const std::int64_t skew =
      std::chrono::duration_cast<std::chrono::microseconds>(options.skew_allowance).count();
  const std::int64_t max_lease =
      std::chrono::duration_cast<std::chrono::microseconds>(options.max_lease).count();
  if (t.legacy) return judge_legacy(now, skew, max_lease, options, t);
  j.same_host = t.host_tag == me.host_tag;
  const std::string who = "pid " + std::to_string(t.pid) +
                          (j.same_host ? " on this host" : " on host " + t.host_tag);

  if (t.expiry_us - now > max_lease + skew) {
    j.stale = true;
    j.reason = "lease of " + who + " ends implausibly far in the future (" +
               format_utc(t.expiry_us) + ", more than the maximum lease of " +
               seconds_text(max_lease) + " from now): treated as stale";
    return j;
  }
  if (now > t.expiry_us + skew) {
    j.stale = true;
    j.reason = "lease of " + who + " ended " + seconds_text(now - t.expiry_us) + " ago (" +
               format_utc(t.expiry_us) + ")";
    return j;
  }
  const std::string until = "held by " + who + " until " + format_utc(t.expiry_us);
  if (!j.same_host || !options.detect_dead_owner) {
    j.reason = until;
    return j;
  }
  std::error_code probe = sys.signal_probe(t.pid);
  if (probe == std::errc::no_such_process) {
    j.owner = owner_liveness::dead;
    j.stale = true;
    j.reason = "owner pid " + std::to_string(t.pid) + " on this host no longer exists";
    return j;
  }
  // Success or EPERM: a process with that pid exists. /proc tells whether it
  // is a zombie or a newer process that reused the pid. When /proc cannot
  // be read (hidepid on shared hosts, or a race with exit) the owner counts
  // as alive: the next look, or the lease, settles it.
  process_status ps;
  if (!sys.read_process_status(t.pid, ps)) {
    if (ps.state == 'Z' || ps.state == 'X') {
      j.owner = owner_liveness::dead;
      j.stale = true;
      j.reason = "owner pid " + std::to_string(t.pid) + " on this host has exited (zombie)";
      return j;
    }
    if (t.start_time != 0 && ps.start_time != t.start_time) {
      j.owner = owner_liveness::dead;
      j.stale = true;
      j.reason = "owner pid " + std::to_string(t.pid) +
                 " on this host is gone; the pid now belongs to another process (start time " +
                 std::to_string(ps.start_time) + ", token says " + std::to_string(t.start_time) +
                 ")";
      return j;
    }
  }
  j.owner = owner_liveness::alive;
  j.reason = until;
  return j;
}

failure create_lock_directory(os& sys, const lock_paths& paths, const lock_options& options) {
  // Named like a token, so that whoever finds it left behind can tell
  // whether its creator still lives (sweep_creation_leftovers). A name that
  // would not fit NAME_MAX gets a nonce only, swept by its age.
  const process_identity& me = sys.self();
  const std::int64_t expiry = sys.wall_now_us() + std::chrono::duration_cast<std::chrono::microseconds>(options.lease).count();
  const std::string owned = make_token(expiry, me.host_tag, me.pid, me.start_time, sys.random_u64());
  std::string init = paths.dir + ".init.";
  if (paths.init_prefix.size() + owned.size() - held_prefix.size() <= 255)
    init.append(owned, held_prefix.size(), std::string::npos);
  else
    init += hex16(sys.random_u64());
  const std::string init_token = init + "/" + std::string(free_token);
  auto cleanup = [&] {
    sys.remove_directory(init_token);
    sys.remove_directory(init);
  };
  if (auto ec = sys.make_directory(init, options.dir_mode)) {
    std::string what = "cannot create the temporary directory " + init;
    if (ec == std::errc::no_such_file_or_directory)
      return make_failure(ec, describe("create", paths.dir, what, ec) +
                                  "; the parent directory of the lock directory must exist");
    return os_failure(sys, paths, "create", what, "", ec);
  }
  if (auto ec = sys.make_directory(init_token, options.dir_mode)) {
    cleanup();
    return os_failure(sys, paths, "create", "cannot create the token " + init_token, "", ec);
  }
  if (auto ec = sys.sync_directory(init)) {
    cleanup();
    return os_failure(sys, paths, "create", "cannot sync " + init, "", ec);
  }
  std::error_code ec = sys.rename(init, paths.dir);
  if (ec == std::errc::directory_not_empty || ec == std::errc::file_exists) {
    // Somebody else's directory won, or it was not empty after all.
    cleanup();
    sweep_creation_leftovers(sys, paths, options);
    return {};
  }
  if (ec == std::errc::no_such_file_or_directory) {
    // A sweeper judged us stalled past our lease and removed it: start over.
    cleanup();
    return {};
  }
  if (ec == std::errc::operation_not_permitted || ec == std::errc::permission_denied) {
    // sshfs (SFTP) reports a directory renamed onto a non-empty one as
    // EPERM, where a local filesystem says ENOTEMPTY. If the lock directory
    // now exists, that is what happened: we lost the race, as above. (A
    // real permission problem shows again, and is explained, at the next
    // rename inside it.)
    file_status st;
    if (!sys.status(paths.dir, st) && st.is_directory) {
      cleanup();
      return {};
    }
  }
  if (ec) {
    cleanup();
    return os_failure(sys, paths, "create", "cannot rename " + init + " to the lock directory",
                      "", ec);
  }
  // Make the new directory entry durable. Failing here is not an error of the
  // lock: the directory exists and works; a crash may undo it, which the
  // next acquire repairs by creating it again.
  sys.sync_directory(paths.parent);
  sweep_creation_leftovers(sys, paths, options);
  return {};
}

std::size_t sweep_creation_leftovers(os& sys, const lock_paths& paths,
                                     const lock_options& options) {
  std::vector<std::string> names;
  if (sys.list_directory(paths.parent, names)) return 0;
  const std::string& prefix = paths.init_prefix;
  const std::string dir_of = paths.parent == "/" ? "/" : paths.parent + "/";
  std::size_t removed = 0;
  for (const auto& n : names) {
    if (n.size() <= prefix.size() || n.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string p = dir_of + n;
    const std::string rest = n.substr(prefix.size());
    held_token t;
    // t's host tag points into this name: it must outlive the judging.
    const std::string as_token = std::string(held_prefix) + rest;
    if (classify_name(as_token, &t) == name_kind::held) {
      if (!judge(sys, options, observed(n, t, name_kind::held)).stale) continue;
    } else if (rest.size() == 16 &&
               rest.find_first_not_of("0123456789abcdef") == std::string::npos) {
      // No owner in the name: old enough that no creation can still be on.
      file_status st;
      const auto age = std::chrono::duration_cast<std::chrono::microseconds>(
          options.max_lease + options.skew_allowance);
      if (sys.status(p, st) || !st.is_directory ||
          st.mtime_us > sys.wall_now_us() - age.count())
        continue;
    } else {
      continue;
    }
    // By path: had its creator renamed it to the lock directory meanwhile,
    // these find nothing under this name and remove nothing.
    sys.remove_directory(p + "/" + std::string(free_token));
    if (!sys.remove_directory(p)) ++removed;
  }
  return removed;
}

void clear_workspace(os& sys, const std::string& token_dir, bool keep_marks) {
  // Depth-limited: an owner's workspace holds temp files, not trees.
  struct local {
    static void clear(os& s, const std::string& dir, int depth, bool keep_marks) {
      std::vector<std::string> names;
      if (s.list_directory(dir, names)) return;
      for (const auto& n : names) {
        // Owner marks were judged one by one (token_mark.cpp); ours stays.
        if (keep_marks && depth == 0 && !token_of_mark(n).empty()) continue;
        const std::string p = dir + "/" + n;
        file_status st;
        if (s.status(p, st)) continue;
        if (st.is_directory) {
          if (depth < 8) clear(s, p, depth + 1, keep_marks);
          s.remove_directory(p);
        } else {
          s.remove_file(p);
        }
      }
    }
  };
  local::clear(sys, token_dir, 0, keep_marks);
}

failure os_failure(os& sys, const lock_paths& paths, const char* step, const std::string& what,
                   const std::string& entry, std::error_code ec) {
  std::string msg = describe(step, paths.dir, what, ec);
  const std::string uid = std::to_string(sys.self().euid);
  switch (ec.value()) {
    case EACCES:
      msg += "; the user (uid " + uid + ") needs write and search permission on " + paths.dir +
             " and search permission on its parents: for a lock shared by several users, give "
             "them a common group and a lock directory of mode 0775 (lock_options::dir_mode)";
      break;
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
    case EROFS:
      msg += "; the lock directory is on a read-only filesystem: put it on a writable one";
      break;
    case ENOTDIR:
      msg += "; a component of " + paths.dir + " is not a directory";
      break;
    case ENAMETOOLONG:
      msg += "; token names are up to 130 bytes long: use a shorter lock directory path";
      break;
    case ENOSPC:
    case EDQUOT:
      msg += "; free some space (or quota) on the filesystem of " + paths.dir;
      break;
    case ELOOP:
      msg += "; too many symbolic links in the path, or the lock directory is a symbolic link";
      break;
    default: break;
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
