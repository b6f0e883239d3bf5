#include "token_mark.hpp"

#include <cerrno>
#include <vector>

#include "token_name.hpp"

namespace tokenlock::detail {

namespace {

constexpr std::string_view mark_prefix = "h.";

// The token a mark stands for: "h.X" -> "lockfile.X".
std::string token_of_mark(std::string_view mark) {
  std::string t(held_prefix);
  t.append(mark.substr(mark_prefix.size()));
  return t;
}

// ESTALE has no std::errc name.
const std::error_code stale_handle(ESTALE, std::generic_category());

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
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

bool lock_needs_owner_marks(os& sys, const lock_paths& paths) {
  int known = paths.owner_marks.load(std::memory_order_relaxed);
  if (known >= 0) return known == 1;
  filesystem_info fs;
  // The lock directory may not exist yet; its parent is on the same
  // filesystem unless the lock directory is itself a mount point.
  std::error_code ec = sys.filesystem_of(paths.dir, false, fs);
  std::string asked = paths.dir;
  if (ec == std::errc::no_such_file_or_directory) {
    const auto slash = paths.dir.rfind('/');
    asked = slash == std::string::npos ? "." : slash == 0 ? "/" : paths.dir.substr(0, slash);
    ec = sys.filesystem_of(asked, false, fs);
  }
  bool marks = true;
  if (!ec && fs.local) {
    marks = false;
  } else if (!ec) {
    // The type's name costs a read of the mount table: only for filesystems
    // that are not local.
    ec = sys.filesystem_of(asked, true, fs);
    marks = ec || needs_owner_marks(fs);
  }
  paths.owner_marks.store(marks ? 1 : 0, std::memory_order_relaxed);
  return marks;
}

std::string owner_mark_name(std::string_view token) {
  std::string m(mark_prefix);
  m.append(token.substr(held_prefix.size()));
  return m;
}

failure mark_and_check(os& sys, const lock_paths& paths, const lock_options& options,
                       const std::string& token, const std::string& token_path,
                       mark_result& result, std::string& holder) {
  result = mark_result::yielded;
  holder.clear();
  const std::string mark = owner_mark_name(token);
  const std::string mark_path = token_path + "/" + mark;
  auto give_up = [&](const char* what, std::error_code ec) {
    // Not left held: the acquisition fails, so the token goes back to free.
    sys.remove_directory(mark_path);
    sys.rename(token_path, paths.free_path);
    return os_failure(sys, paths, "acquire", std::string(what) + " " + token, token, ec);
  };

  // ESTALE: the client's handle for our token's name is out of date, which
  // a fresh lookup usually mends. If it persists we cannot tell whether the
  // name still reaches our token, and renaming through it might move
  // another holder's: we hold nothing and rename nothing (at worst the lock
  // stays taken until our lease ends).
  constexpr int stale_tries = 3;
  std::error_code ec;
  for (int i = 0; i < stale_tries; ++i) {
    ec = sys.make_directory(mark_path, 0700);
    if (ec != stale_handle) break;
  }
  // Gone already: a second rename of the name we took moved our token.
  if (ec == std::errc::no_such_file_or_directory || ec == stale_handle) return {};
  if (ec) return give_up("cannot make the owner mark in", ec);

  std::vector<std::string> names;
  for (int i = 0; i < stale_tries; ++i) {
    names.clear();
    ec = sys.list_directory(token_path, names);
    if (ec != stale_handle) break;
  }
  if (ec == std::errc::no_such_file_or_directory || ec == stale_handle) {
    sys.remove_directory(mark_path);
    return {};
  }
  if (ec) return give_up("cannot list the owner marks in", ec);

  std::string other;
  for (const std::string& n : names) {
    if (n == mark || !starts_with(n, mark_prefix)) continue;
    const std::string implied = token_of_mark(n);
    held_token t;
    // Not a mark any tokenlock writes: not an owner to yield to.
    if (classify_name(implied, &t) != name_kind::held) continue;
    observed_token seen{implied, t.expiry_us, std::string(t.host_tag), t.pid, t.start_time};
    judgement j = judge(sys, options, seen);
    if (j.stale) {
      // A dead or expired owner's mark, left by a crash: it holds nothing.
      sys.remove_directory(token_path + "/" + n);
      continue;
    }
    other = implied;
    holder = j.reason;
  }
  if (other.empty()) {
    result = mark_result::held;
    return {};
  }
  // Someone else holds this token directory: our mark goes, and the
  // directory gets back the name its owner knows it by, so that the owner's
  // release and commit find it. Best effort: if that owner has moved it
  // meanwhile, these calls fail and change nothing of theirs.
  sys.remove_directory(mark_path);
  sys.rename(token_path, paths.dir_slash + other);
  return {};
}

std::error_code remove_owner_mark(os& sys, const std::string& token_path,
                                  const std::string& mark) {
  std::error_code ec = sys.remove_directory(token_path + "/" + mark);
  if (ec == std::errc::no_such_file_or_directory) ec.clear();
  return ec;
}

std::string find_owner_mark(os& sys, const std::string& token_path, std::string_view token) {
  std::vector<std::string> names;
  if (sys.list_directory(token_path, names)) return {};
  const std::string_view owner = owner_part(token);
  for (const std::string& n : names) {
    if (!starts_with(n, mark_prefix)) continue;
    const std::string implied = token_of_mark(n);
    if (classify_name(implied) == name_kind::held && owner_part(implied) == owner) return n;
  }
  return {};
}

}  // namespace tokenlock::detail
