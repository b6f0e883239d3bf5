#include "lockdir/token_mark.hpp"

#include <cerrno>
#include <vector>

#include "lockdir/token_name.hpp"

namespace tokenlock::detail {

namespace {

// ESTALE has no std::errc name.
const std::error_code stale_handle(ESTALE, std::generic_category());

// A client's handle for a name another client renamed: asking again usually
// mends it.
constexpr int stale_tries = 3;

bool gone(std::error_code ec) {
  return ec == std::errc::no_such_file_or_directory || ec == stale_handle;
}

std::error_code list_token(os& sys, const std::string& token_path, std::vector<std::string>& names) {
  std::error_code ec;
  for (int i = 0; i < stale_tries; ++i) {
    names.clear();
    ec = sys.list_directory(token_path, names);
    if (ec != stale_handle) break;
  }
  return ec;
}

// What the other marks in a token say.
struct marks_seen {
  std::string live_token;   // a live owner's token name (the first one seen)
  std::string live_reason;  // who that is, for messages
};

// Judges the marks in `names` other than `ours`: removes those of the owner
// we took over from and those whose owners are dead or expired, and reports
// a live one.
marks_seen judge_marks(os& sys, const lock_options& options, const std::string& token_path,
                       const std::vector<std::string>& names, std::string_view ours,
                       std::string_view taken_from) {
  marks_seen seen;
  const std::string_view taken_owner = taken_from.empty() ? std::string_view() : owner_part(taken_from);
  for (const std::string& n : names) {
    if (n == ours) continue;
    const std::string implied = token_of_mark(n);
    // Not a mark any tokenlock writes: not an owner to yield to.
    if (implied.empty()) continue;
    if (!taken_owner.empty() && owner_part(implied) == taken_owner) {
      // The owner we took this token from (stale, or broken with force).
      sys.remove_directory(token_path + "/" + n);
      continue;
    }
    held_token t;
    classify_name(implied, &t);
    judgement j = judge(sys, options, observed(implied, t, name_kind::held));
    if (j.stale) {
      // A dead or expired owner's mark, left by a crash: it holds nothing.
      sys.remove_directory(token_path + "/" + n);
      continue;
    }
    if (seen.live_token.empty()) {
      seen.live_token = implied;
      seen.live_reason = std::move(j.reason);
    }
  }
  return seen;
}

// One token being confirmed by its owner mark: mark_and_check's arguments,
// and the mark's name and path.
struct mark_check {
  os& sys;
  const lock_paths& paths;
  const lock_options& options;
  const char* step;
  const std::string& token;
  const std::string& token_path;
  std::string_view taken_from;
  std::string mark;
  std::string mark_path;
};

std::error_code make_mark(const mark_check& m) {
  std::error_code ec;
  for (int i = 0; i < stale_tries; ++i) {
    ec = m.sys.make_directory(m.mark_path, 0700);
    if (ec != stale_handle) break;
  }
  // A retransmitted mkdir whose first reply was lost.
  if (ec == std::errc::file_exists) ec.clear();
  return ec;
}

// The acquisition fails. The token goes back to "lockfile" only when a
// listing shows that it holds nobody else's live mark: a rename through
// our name might otherwise move another holder's token.
failure give_up(const mark_check& m, const std::string& what, std::error_code ec) {
  m.sys.remove_directory(m.mark_path);
  std::vector<std::string> names;
  std::string_view outcome = "; the token stays until its lease ends";
  if (!list_token(m.sys, m.token_path, names) &&
      judge_marks(m.sys, m.options, m.token_path, names, m.mark, m.taken_from)
          .live_token.empty() &&
      !m.sys.rename(m.token_path, m.paths.free_path))
    outcome = "; the lock was freed again";
  failure f = os_failure(m.sys, m.paths, m.step, what + " " + m.token, m.token, ec);
  f.message.append(outcome);
  return f;
}

// Someone else holds this token directory: it gets back the name its
// owner knows it by (`live_token`), so that the owner's release and commit
// find it. Our mark goes only after that rename, through the new name:
// while it is inside, whoever takes the directory through a stale name of
// their own sees it and steps back too, instead of holding beside its
// owner.
void yield_to(const mark_check& m, const std::string& live_token) {
  const std::string back = m.paths.dir_slash + live_token;
  if (!m.sys.rename(m.token_path, back))
    m.sys.remove_directory(back + "/" + m.mark);
  else
    m.sys.remove_directory(m.mark_path);
}

}  // namespace

bool needs_owner_marks(const filesystem_info& fs) {
  if (fs.local) return false;
  // Their servers resolve a rename's source by its name at the moment of
  // the rename (SFTP and the MooseFS master by path, NFS, SMB and Ceph by
  // directory and name), so a name that is gone fails with ENOENT.
  static constexpr std::string_view by_name[] = {
      "fuse.sshfs", "fuse.mfs", "fuse.moosefs", "nfs", "nfs4", "cifs", "smb3", "ceph", "fuse.ceph",
      "fuse.ceph-fuse"};
  for (std::string_view n : by_name)
    if (fs.name == n) return false;
  return true;
}

bool path_needs_owner_marks(os& sys, const std::string& path, std::error_code& ec) {
  filesystem_info fs;
  ec = sys.filesystem_of(path, false, fs);
  if (ec) return true;
  if (fs.local) return false;
  // The type's name costs a read of the mount table: only for filesystems
  // that are not local.
  ec = sys.filesystem_of(path, true, fs);
  return ec || needs_owner_marks(fs);
}

bool lock_needs_owner_marks(os& sys, const lock_paths& paths) {
  int known = paths.owner_marks.load(std::memory_order_relaxed);
  if (known >= 0) return known == 1;
  // The lock directory may not exist yet; its parent is on the same
  // filesystem unless the lock directory is itself a mount point.
  std::error_code ec;
  bool marks = path_needs_owner_marks(sys, paths.dir, ec);
  if (ec == std::errc::no_such_file_or_directory) marks = path_needs_owner_marks(sys, paths.parent, ec);
  paths.owner_marks.store(marks ? 1 : 0, std::memory_order_relaxed);
  return marks;
}

failure mark_and_check(os& sys, const lock_paths& paths, const lock_options& options,
                       const char* step, const std::string& token,
                       const std::string& token_path, std::string_view taken_from,
                       mark_result& result, std::string& holder) {
  result = mark_result::abandoned;
  holder.clear();
  std::string mark = owner_mark_name(token);
  std::string mark_path = token_path + "/" + mark;
  const mark_check m{sys, paths, options, step, token, token_path, taken_from, std::move(mark),
                     std::move(mark_path)};
  std::error_code ec = make_mark(m);
  // Gone already: a second rename of the name we took moved our token. Or a
  // persistent ESTALE, after which we cannot tell: either way we hold
  // nothing and rename nothing through that name.
  if (gone(ec)) return {};
  if (ec) return give_up(m, "cannot make the owner mark in", ec);

  std::vector<std::string> names;
  ec = list_token(sys, token_path, names);
  if (gone(ec)) {
    sys.remove_directory(m.mark_path);
    return {};
  }
  if (ec) return give_up(m, "cannot list the owner marks in", ec);

  marks_seen seen = judge_marks(sys, options, token_path, names, m.mark, taken_from);
  if (seen.live_token.empty()) {
    result = mark_result::held;
    return {};
  }
  result = mark_result::yielded;
  holder = std::move(seen.live_reason);
  yield_to(m, seen.live_token);
  return {};
}

std::error_code remove_owner_mark(os& sys, const std::string& token_path, std::string_view token) {
  std::error_code ec = sys.remove_directory(token_path + "/" + owner_mark_name(token));
  if (ec != std::errc::no_such_file_or_directory) return ec;
  // A refresh that could not rename the mark left it under an older lease.
  std::vector<std::string> names;
  if (list_token(sys, token_path, names)) return {};
  const std::string_view owner = owner_part(token);
  for (const std::string& n : names) {
    const std::string implied = token_of_mark(n);
    if (!implied.empty() && owner_part(implied) == owner) {
      ec = sys.remove_directory(token_path + "/" + n);
      if (ec && ec != std::errc::no_such_file_or_directory) return ec;
    }
  }
  return {};
}

std::error_code restore_owner_mark(os& sys, const std::string& token_path, std::string_view token) {
  std::error_code ec = sys.make_directory(token_path + "/" + owner_mark_name(token), 0700);
  if (ec == std::errc::file_exists) ec.clear();
  return ec;
}

std::error_code rename_owner_mark(os& sys, const std::string& token_path,
                                  std::string_view old_token, std::string_view token) {
  std::error_code ec = sys.rename(token_path + "/" + owner_mark_name(old_token),
                                  token_path + "/" + owner_mark_name(token));
  if (ec == std::errc::no_such_file_or_directory) return restore_owner_mark(sys, token_path, token);
  return ec;
}

}  // namespace tokenlock::detail
