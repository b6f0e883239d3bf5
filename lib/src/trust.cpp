#include "trust.hpp"

#include <algorithm>
#include <cstdio>

namespace tokenlock::detail {
namespace {

std::string octal(unsigned mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", mode);
  return buf;
}

bool in_groups(const process_identity& me, unsigned gid) {
  return std::find(me.groups.begin(), me.groups.end(), gid) != me.groups.end();
}

// Why `st` cannot be trusted, and the fix; empty when it can.
std::string distrust(const process_identity& me, const file_status& st, const std::string& path,
                     bool group_sharing) {
  const std::string share =
      "a lock shared by several users needs a group they all belong to: give " + path +
      " that group, mode 0775, and choose group sharing (lock_options::dir_mode 0775, "
      "tokenlock --dir-mode 0775 or TOKENLOCK_DIR_MODE=0775)";
  if (st.is_symlink || !st.is_directory) return "it is not a directory; remove it";
  if (st.mode & 002)
    return "it is writable by every user (mode " + octal(st.mode) + "); run chmod o-w " + path +
           " if its contents are yours, or remove it; " + share;
  const bool group_ok = group_sharing && in_groups(me, st.gid);
  if ((st.mode & 020) && !group_ok) {
    if (!group_sharing)
      return "it is writable by group " + std::to_string(st.gid) + " (mode " + octal(st.mode) +
             ") and group sharing was not chosen; run chmod g-w " + path +
             " if the group is not meant to share it, or choose group sharing "
             "(lock_options::dir_mode 0775, tokenlock --dir-mode 0775 or TOKENLOCK_DIR_MODE=0775)";
    return "it is writable by group " + std::to_string(st.gid) + " (mode " + octal(st.mode) +
           "), which is not one of this user's groups; " + share;
  }
  if (st.uid != me.euid && st.uid != 0 && !group_ok)
    return "it belongs to uid " + std::to_string(st.uid) + " (mode " + octal(st.mode) +
           "), who could change it; have that user (or root) remove it and it is created "
           "again on next use, or, if that user shares it on purpose, " + share;
  return {};
}

}  // namespace

failure check_trusted(os& sys, const file_status& st, const std::string& path, const char* step,
                      const char* what, bool group_sharing) {
  const process_identity& me = sys.self();
  std::string why = distrust(me, st, path, group_sharing);
  if (why.empty()) return {};
  return make_failure(errc::untrusted,
                      describe(step, path,
                               std::string("refusing the ") + what + " (owner uid " +
                                   std::to_string(st.uid) + ", mode " + octal(st.mode) +
                                   "; this process runs as uid " + std::to_string(me.euid) +
                                   "): another user could plant or swap entries in it, and "
                                   "nothing in it was touched",
                               {}) +
                          "; " + why);
}

failure check_trusted_fd(os& sys, int fd, const std::string& path, const char* step,
                         const char* what, bool group_sharing) {
  file_status st;
  if (std::error_code ec = sys.status_at(fd, "", st))
    return make_failure(ec, describe(step, path, std::string("cannot look at the ") + what, ec));
  return check_trusted(sys, st, path, step, what, group_sharing);
}

failure check_trusted_path(os& sys, const std::string& path, const char* step, const char* what,
                           bool group_sharing) {
  int fd = -1;
  std::error_code ec = sys.open_directory(os::cwd, path, fd);
  if (ec == std::errc::too_many_symbolic_link_levels || ec == std::errc::not_a_directory) {
    file_status st;
    if (!sys.status(path, st)) return check_trusted(sys, st, path, step, what, group_sharing);
  }
  if (ec)
    return make_failure(ec, describe(step, path, std::string("cannot open the ") + what, ec));
  failure f = check_trusted_fd(sys, fd, path, step, what, group_sharing);
  sys.close(fd);
  return f;
}

std::string shown_name(const std::string& name) {
  std::string out;
  out.reserve(name.size());
  for (unsigned char c : name) {
    if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace tokenlock::detail
