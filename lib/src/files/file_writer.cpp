#include "files/file_writer.hpp"

#include "core/errno_advice.hpp"
#include "lockdir/trust.hpp"

#include <cerrno>
#include <cstdio>

namespace tokenlock::detail {
namespace {

std::string hint_for(std::error_code ec) {
  const std::string fix = errno_fix(ec, errno_context::write_file);
  return fix.empty() ? fix : "; " + fix;
}

std::string name_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

failure write_failure(const char* step, const write_target& target, const std::string& what,
                      std::error_code ec) {
  return make_failure(ec, describe(step, target.path, what, ec) + hint_for(ec));
}

std::string temp_name(const std::string& target_name, std::uint64_t nonce) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(nonce));
  return "." + target_name + ".tmp." + hex;
}

bool is_temp_name(std::string_view name) noexcept {
  // ".<name>.tmp.<16 lowercase hex>", with a non-empty name.
  constexpr std::string_view mid = ".tmp.";
  if (name.size() < 1 + 1 + mid.size() + 16 || name[0] != '.') return false;
  std::string_view hex = name.substr(name.size() - 16);
  for (char c : hex)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return name.substr(name.size() - 16 - mid.size(), mid.size()) == mid;
}

std::string parent_of(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string link_destination(const std::string& link, const std::string& to) {
  return (!to.empty() && to[0] == '/') ? to : parent_of(link) + "/" + to;
}

failure check_link(os& sys, const char* step, const std::string& link,
                   const file_status& link_st) {
  const std::string dir = parent_of(link);
  file_status dir_st;
  if (auto ec = sys.status_following(dir, dir_st))
    return make_failure(ec, describe(step, shown_name(link),
                                     "cannot look at the directory " + shown_name(dir) +
                                         " of the symbolic link",
                                     ec));
  const bool open_to_all = dir_st.is_sticky && (dir_st.mode & 0002) != 0;
  const unsigned me = sys.self().euid;
  if (!open_to_all || link_st.uid == me || link_st.uid == dir_st.uid) return {};
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", dir_st.mode & 07777);
  return make_failure(
      errc::untrusted,
      "tokenlock: " + std::string(step) + " " + shown_name(link) +
          ": refusing to follow the symbolic link " + shown_name(link) + ": it is owned by uid " +
          std::to_string(link_st.uid) + ", neither this user (uid " + std::to_string(me) +
          ") nor the owner of " + shown_name(dir) + " (uid " + std::to_string(dir_st.uid) +
          "), a directory that is sticky and writable by all (mode " + mode +
          "), where anyone may plant a link; nothing was written or read: name the file it "
          "points to directly, or have that link removed and made by uid " +
          std::to_string(me) + (me == dir_st.uid ? "" : " or " + std::to_string(dir_st.uid)));
}

namespace {

// One entry of the target chain, by lstat: the link to follow (`next`
// set), or what is replaced (out.exists and out.existing set when it is a
// regular file), or a refusal.
failure look_at_entry(os& sys, const write_options& options, int hops, write_target& out,
                      std::string& next) {
  next.clear();
  file_status st;
  std::error_code ec = sys.status(out.path, st);
  if (ec == std::errc::no_such_file_or_directory) return {};
  if (ec) return write_failure("write", out, "cannot look at the target", ec);
  if (st.is_symlink && options.symlinks == symlink_policy::follow) {
    if (hops >= 40)  // the kernel's limit
      return write_failure("write", out, "too many levels of symbolic links",
                           std::make_error_code(std::errc::too_many_symbolic_link_levels));
    if (failure f = check_link(sys, "write", out.path, st)) return f;
    std::string to;
    if (auto lec = sys.read_link(out.path, to))
      return write_failure("write", out, "cannot read the symbolic link", lec);
    next = link_destination(out.path, to);
    return {};
  }
  // A link that is replaced is no file of ours: its destination (maybe
  // another user's file, maybe a setuid program) lends the new file
  // neither mode nor owner; the new file is made as if the name were free.
  if (st.is_symlink) return {};
  if (st.is_directory)
    return write_failure("write", out, "the target is a directory",
                         std::make_error_code(std::errc::is_a_directory));
  if (!st.is_regular)
    return make_failure(std::make_error_code(std::errc::invalid_argument),
                        describe("write", out.path,
                                 "the target is not a regular file (a device, FIFO or socket "
                                 "cannot be replaced atomically)",
                                 {}));
  out.exists = true;
  out.existing = st;
  return {};
}

failure check_directory(os& sys, write_target& out) {
  file_status dir_st;
  std::error_code ec = sys.status_following(out.dir, dir_st);
  if (ec == std::errc::no_such_file_or_directory)
    return make_failure(ec, describe("write", out.path, "its directory " + out.dir + " does not exist", ec) +
                                "; create the directory first");
  if (ec) return write_failure("write", out, "cannot look at the directory " + out.dir, ec);
  if (!dir_st.is_directory)
    return write_failure("write", out, out.dir + " is not a directory",
                         std::make_error_code(std::errc::not_a_directory));
  out.dir_device = dir_st.device;
  return {};
}

}  // namespace

failure resolve_target(os& sys, const boost::filesystem::path& target,
                       const write_options& options, write_target& out) {
  std::string path = target.string();
  auto bad = [&](const std::string& why) {
    return make_failure(errc::bad_argument, "tokenlock: write \"" + path + "\": " + why);
  };
  if (path.empty()) return bad("the target path is empty");
  if (path.find('\0') != std::string::npos) return bad("the target path contains a NUL byte");
  if (path.back() == '/') return bad("the target path ends in '/': name a file");
  for (int hops = 0;; ++hops) {
    out = write_target{};
    out.path = path;
    out.dir = parent_of(path);
    out.name = name_of(path);
    if (out.name == "." || out.name == "..") return bad("the target must name a file");
    std::string next;
    if (failure f = look_at_entry(sys, options, hops, out, next)) return f;
    if (next.empty()) break;
    path = next;
  }
  return check_directory(sys, out);
}

failure create_temp(os& sys, const write_target& target, const std::string& in_dir,
                    const write_options& options, temp_file& out) {
  out.path = in_dir + "/" + temp_name(target.name, sys.random_u64());
  unsigned mode;
  bool exact;
  // The caller's mode wins. Else the replaced file's owner chose it, but
  // its setuid, setgid and sticky bits are not copied: they belong to that
  // file's contents, not to whatever is written now (a root writer would
  // otherwise make a setuid-root file of new contents).
  if (options.mode) {
    mode = *options.mode & 07777;
    exact = true;
  } else if (target.exists) {
    mode = target.existing.mode & 0777;
    exact = true;
  } else {
    mode = 0644 & ~sys.umask_value();
    exact = false;
  }
  // Recorded before it exists, so that no stop signal can leave it behind.
  out.record = cleanup_entry(cleanup_track_file(out.path));
  if (auto ec = sys.create_exclusive(out.path, mode & 0777, out.fd)) {
    out.fd = -1;
    out.record.reset();  // it may be another writer's file
    std::string what = "cannot create the temporary file " + out.path;
    if (ec == std::errc::filename_too_long)
      return make_failure(ec, describe("create", target.path, what, ec) +
                                  "; the temporary name adds 22 bytes to the target's name: "
                                  "use a shorter name");
    return write_failure("create", target, what, ec);
  }
  if (exact) {
    if (auto ec = sys.set_mode(out.fd, mode)) {
      failure f = write_failure("create", target, "cannot set mode on " + out.path, ec);
      abandon(sys, out);
      return f;
    }
  }
  // Best effort: as root, keep the replaced file's owner and group so that
  // the program that owns the data can still write it.
  if (target.exists && sys.self().euid == 0 &&
      (target.existing.uid != 0 || target.existing.gid != 0))
    sys.set_owner(out.fd, target.existing.uid, target.existing.gid);
  return {};
}

failure write_all(os& sys, temp_file& file, std::string_view data, const write_target& target) {
  while (!data.empty()) {
    std::size_t n = 0;
    if (auto ec = sys.write(file.fd, data.data(), data.size(), n))
      return write_failure("write", target, "cannot write the temporary file " + file.path, ec);
    if (n == 0)
      return write_failure("write", target, "the write to " + file.path + " made no progress",
                           std::make_error_code(std::errc::io_error));
    data.remove_prefix(n);
  }
  return {};
}

failure finish_temp(os& sys, temp_file& file, const write_options& options,
                    const write_target& target) {
  if (options.sync != durability::none) {
    if (auto ec = sys.sync_file(file.fd))
      return write_failure("sync", target, "cannot flush the temporary file " + file.path, ec);
  }
  const int fd = file.fd;
  file.fd = -1;
  if (auto ec = sys.close(fd))
    return write_failure("close", target, "closing the temporary file " + file.path + " failed", ec);
  return {};
}

failure commit_temp(os& sys, const std::string& rename_from, const write_target& target,
                    const write_options& options) {
  if (auto ec = sys.rename(rename_from, target.path)) {
    sys.remove_file(rename_from);
    return write_failure("rename", target, "cannot rename " + rename_from + " over the target", ec);
  }
  return sync_target_directory(sys, target, options.sync, "the new contents are in place", "");
}

failure sync_target_directory(os& sys, const write_target& target, durability sync,
                              const char* done, const char* advice) {
  if (sync != durability::file_and_dir) return {};
  const std::error_code ec = sys.sync_directory(target.dir);
  if (!ec) return {};
  std::string what = std::string(done) + ", but flushing the directory " + target.dir +
                     " failed (" + ec.message() + "): a crash may undo it" + advice;
  // fsync(2) needs the directory open, and open needs read permission,
  // which a drop directory (mode 0333) or a web server's user may lack.
  if (ec == std::errc::permission_denied || ec == std::errc::operation_not_permitted)
    what += "; give this user read permission on " + target.dir +
            " (chmod u+r, or g+r for a shared group), or write with sync file";
  return make_failure(errc::dir_sync_failed, describe("sync", target.path, what, {}));
}

failure write_temp(os& sys, const write_target& target, const std::string& in_dir,
                   std::string_view data, const write_options& options, temp_file& out) {
  if (failure f = create_temp(sys, target, in_dir, options, out)) return f;
  failure f = write_all(sys, out, data, target);
  if (!f) f = finish_temp(sys, out, options, target);
  if (f) abandon(sys, out);
  return f;
}

void abandon(os& sys, temp_file& file) noexcept {
  if (file.fd >= 0) {
    sys.close(file.fd);
    file.fd = -1;
  }
  if (!file.path.empty()) sys.remove_file(file.path);
  file.record.reset();
}

}  // namespace tokenlock::detail
