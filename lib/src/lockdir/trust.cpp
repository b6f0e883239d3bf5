#include "lockdir/trust.hpp"

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

const char* const name_the_group =
    "a lock shared by several users needs one group they all belong to, named by each of them: "
    "lock_options::group, tokenlock --group G or TOKENLOCK_GROUP=G";

std::string group_writable(const file_status& st, const std::string& path,
                           std::optional<unsigned> group) {
  return "it is writable by group " + std::to_string(st.gid) + " (mode " + octal(st.mode) +
         "), which is not the group chosen for sharing (" +
         (group ? "group " + std::to_string(*group) : std::string("none is")) + "); run chmod g-w " +
         path + " if that group is not meant to share it; otherwise " + name_the_group;
}

// Why `st` cannot be trusted, and the fix; empty when it can.
std::string distrust(const process_identity& me, const file_status& st, const std::string& path,
                     std::optional<unsigned> group) {
  if (st.is_symlink || !st.is_directory) return "it is not a directory; remove it";
  if (st.mode & 002)
    return "it is writable by every user (mode " + octal(st.mode) + "); run chmod o-w " + path +
           " if its contents are yours, or remove it; " + name_the_group;
  const bool chosen = group && st.gid == *group;
  if ((st.mode & 020) && !chosen) return group_writable(st, path, group);
  if (st.uid != me.euid && st.uid != 0 && !chosen)
    return "it belongs to uid " + std::to_string(st.uid) + " (mode " + octal(st.mode) +
           "), who could change it; have that user (or root) remove it and it is created "
           "again on next use, or, if that user shares it on purpose, " + name_the_group;
  return {};
}

}  // namespace

failure named_group(os& sys, const sharing& s, const char* step, std::optional<unsigned>& out) {
  out.reset();
  if (s.group.empty()) return {};
  unsigned gid = 0;
  if (std::error_code ec = sys.group_id(s.group, gid))
    return make_failure(errc::bad_argument,
                        std::string("tokenlock: ") + step + ": cannot share with group \"" +
                            shown_name(s.group) + "\": " +
                            (ec == std::errc::no_such_file_or_directory ? "no such group"
                                                                        : ec.message()));
  if (!in_groups(sys.self(), gid))
    return make_failure(errc::bad_argument,
                        std::string("tokenlock: ") + step + ": cannot share with group \"" +
                            shown_name(s.group) + "\" (gid " + std::to_string(gid) +
                            "): this user is not a member of it; name a group of this user's "
                            "(id -Gn lists them)");
  out = gid;
  return {};
}

failure chosen_group(os& sys, const sharing& s, const file_status& top, const char* step,
                     std::optional<unsigned>& out) {
  if (failure f = named_group(sys, s, step, out)) return f;
  if (!out && (s.dir_mode & 020) && top.uid == sys.self().euid) out = top.gid;
  return {};
}

failure check_trusted(os& sys, const file_status& st, const std::string& path, const char* step,
                      const char* what, std::optional<unsigned> group) {
  const process_identity& me = sys.self();
  std::string why = distrust(me, st, path, group);
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
                         const char* what, std::optional<unsigned> group) {
  file_status st;
  if (std::error_code ec = sys.status_at(fd, "", st))
    return make_failure(ec, describe(step, path, std::string("cannot look at the ") + what, ec));
  return check_trusted(sys, st, path, step, what, group);
}

failure check_trusted_path(os& sys, const std::string& path, const char* step, const char* what,
                           std::optional<unsigned> group) {
  int fd = -1;
  std::error_code ec = sys.open_directory(os::cwd, path, fd);
  if (ec == std::errc::too_many_symbolic_link_levels || ec == std::errc::not_a_directory) {
    file_status st;
    if (!sys.status(path, st)) return check_trusted(sys, st, path, step, what, group);
  }
  if (ec)
    return make_failure(ec, describe(step, path, std::string("cannot open the ") + what, ec));
  failure f = check_trusted_fd(sys, fd, path, step, what, group);
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
