#include "file_writer.hpp"

#include <cerrno>
#include <cstdio>

namespace tokenlock::detail {
namespace {

std::string hint_for(std::error_code ec) {
  switch (ec.value()) {
    case ENOSPC: return "; free some space on the filesystem";
    case EDQUOT: return "; the user's disk quota is exhausted";
    case EFBIG: return "; the file is larger than the process may write (RLIMIT_FSIZE)";
    case EACCES:
      return "; the user needs write and search permission on the target's directory";
    case EROFS: return "; the target is on a read-only filesystem";
    case EIO: return "; the device reported an I/O error: check the disk";
    default: return {};
  }
}

std::string parent_of(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
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

failure resolve_target(os& sys, const boost::filesystem::path& target,
                       const write_options& options, write_target& out) {
  std::string path = target.string();
  auto bad = [&](const std::string& why) {
    return make_failure(errc::bad_argument, "tokenlock: write \"" + path + "\": " + why);
  };
  if (path.empty()) return bad("the target path is empty");
  if (path.find('\0') != std::string::npos) return bad("the target path contains a NUL byte");
  if (path.back() == '/') return bad("the target path ends in '/': name a file");
  // Follow a chain of links only when asked; 40 hops is the kernel's limit.
  for (int hops = 0;; ++hops) {
    out = write_target{};
    out.path = path;
    out.dir = parent_of(path);
    out.name = name_of(path);
    if (out.name == "." || out.name == "..") return bad("the target must name a file");
    file_status st;
    std::error_code ec = sys.status(path, st);
    if (ec == std::errc::no_such_file_or_directory) break;
    if (ec) return write_failure("write", out, "cannot look at the target", ec);
    if (st.is_symlink && options.symlinks == symlink_policy::follow) {
      if (hops >= 40)
        return write_failure("write", out, "too many levels of symbolic links",
                             std::make_error_code(std::errc::too_many_symbolic_link_levels));
      std::string link;
      if (auto lec = sys.read_link(path, link))
        return write_failure("write", out, "cannot read the symbolic link", lec);
      path = (!link.empty() && link[0] == '/') ? link : out.dir + "/" + link;
      continue;
    }
    if (st.is_symlink) {
      // Replaced by a regular file; it takes the mode of what the link
      // pointed to, when that is a regular file.
      file_status dest;
      if (!sys.status_following(path, dest) && dest.is_regular) {
        out.exists = true;
        out.existing = dest;
      }
      break;
    }
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
    break;
  }
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

failure create_temp(os& sys, const write_target& target, const std::string& in_dir,
                    const write_options& options, temp_file& out) {
  out.path = in_dir + "/" + temp_name(target.name, sys.random_u64());
  unsigned mode;
  bool exact;
  // The file's owner chose its mode; write_options::mode is for new files.
  if (target.exists) {
    mode = target.existing.mode;
    exact = true;
  } else if (options.mode) {
    mode = *options.mode & 07777;
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
