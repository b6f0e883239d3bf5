#include "core/errno_advice.hpp"

#include <cerrno>

namespace tokenlock::detail {
namespace {

// One row per errno; a column per context (errno_context's order), null
// where that context has nothing to add. EPERM in a lock directory is
// judged by os_failure, which looks at the directory's sticky bit.
struct row {
  int value;
  const char* name;
  const char* fix[4];
};

constexpr const char* permission_for_doctor =
    "run doctor as a user that locks there: it needs write permission on DIR";
constexpr const char* permission_for_clock =
    "the user needs write and search permission on {dir} (or measure in another directory of the "
    "same filesystem)";
constexpr const char* space_for_lock = "free some space (or quota) on the filesystem of {dir}";
constexpr const char* space_for_clock = "the filesystem is full, or the quota used up";
constexpr const char* space_for_doctor = "free space (or quota) on the filesystem";

constexpr row table[] = {
    {ENOENT, "ENOENT", {nullptr, nullptr, "the directory does not exist", nullptr}},
    {EEXIST, "EEXIST", {}},
    {ENOTEMPTY, "ENOTEMPTY", {}},
    {EPERM, "EPERM", {nullptr, nullptr, permission_for_clock, permission_for_doctor}},
    {EACCES,
     "EACCES",
     {"the user needs write and search permission on the target's directory",
      "the user (uid {uid}) needs write and search permission on {dir} and search permission on "
      "its parents: for a lock shared by several users, give them a common group and a lock "
      "directory of mode 0775 (lock_options::dir_mode)",
      permission_for_clock, permission_for_doctor}},
    {EXDEV, "EXDEV", {}},
    {EINVAL, "EINVAL", {}},
    {ENOTSUP, "ENOTSUP", {}},
    {ENOSYS, "ENOSYS", {}},
    {EIO,
     "EIO",
     {"the device reported an I/O error: check the disk", nullptr, nullptr,
      "check the disk or the file server (kernel log)"}},
    {EROFS,
     "EROFS",
     {"the target is on a read-only filesystem",
      "the lock directory is on a read-only filesystem: put it on a writable one",
      "the filesystem is read-only: measure in a writable directory of the same file server",
      "tokenlock needs a writable filesystem"}},
    {ENOSPC,
     "ENOSPC",
     {"free some space on the filesystem", space_for_lock, space_for_clock, space_for_doctor}},
    {EDQUOT,
     "EDQUOT",
     {"the user's disk quota is exhausted", space_for_lock, space_for_clock, space_for_doctor}},
    {EFBIG,
     "EFBIG",
     {"the file is larger than the process may write (RLIMIT_FSIZE)", nullptr, nullptr,
      "raise the file size limit (ulimit -f)"}},
    {EBUSY, "EBUSY", {}},
    {ESTALE, "ESTALE", {}},
    {ENAMETOOLONG,
     "ENAMETOOLONG",
     {nullptr, "token names are up to 130 bytes long: use a shorter lock directory path", nullptr,
      nullptr}},
    {ENOTDIR,
     "ENOTDIR",
     {nullptr, "a component of {dir} is not a directory",
      "a component of the path is not a directory", nullptr}},
    {EISDIR, "EISDIR", {}},
    {ELOOP,
     "ELOOP",
     {nullptr,
      "too many symbolic links in the path, or the lock directory is a symbolic link", nullptr,
      nullptr}},
};

// For an errno without advice of its own in the context.
constexpr const char* otherwise[4] = {
    nullptr, nullptr, nullptr,
    "doctor makes the calls tokenlock makes, so tokenlock fails here alike"};

const row* row_of(std::error_code ec) noexcept {
  if (ec.category() != std::generic_category() && ec.category() != std::system_category())
    return nullptr;
  for (const row& r : table)
    if (r.value == ec.value()) return &r;
  return nullptr;
}

void replace_all(std::string& text, const std::string& what, const std::string& with) {
  for (std::size_t at = 0; (at = text.find(what, at)) != std::string::npos; at += with.size())
    text.replace(at, what.size(), with);
}

}  // namespace

const char* errno_name(std::error_code ec) noexcept {
  const row* r = row_of(ec);
  return r ? r->name : nullptr;
}

std::string errno_cause(std::error_code ec) {
  const char* name = errno_name(ec);
  return (name ? std::string(name) : "errno " + std::to_string(ec.value())) + " (" +
         ec.message() + ")";
}

std::string errno_fix(std::error_code ec, errno_context context, const std::string& dir,
                      const std::string& uid) {
  const auto column = static_cast<std::size_t>(context);
  const row* r = row_of(ec);
  const char* fix = r && r->fix[column] ? r->fix[column] : otherwise[column];
  if (!fix) return {};
  std::string text = fix;
  replace_all(text, "{dir}", dir);
  replace_all(text, "{uid}", uid);
  return text;
}

}  // namespace tokenlock::detail
