// The fence directory of a fenced update under a lock server's grant
// (fence_directory.hpp).
#include "files/fence_directory.hpp"

#include <cerrno>
#include <cstdio>
#include <vector>

#include "lockdir/trust.hpp"

namespace tokenlock::detail {

namespace {

std::string fence_entry(std::uint64_t fence) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "f.%020llu", static_cast<unsigned long long>(fence));
  return buf;
}

// "f.<20 digits>" -> the number; false for anything else.
bool parse_fence_entry(const std::string& name, std::uint64_t& out) {
  if (name.size() != 22 || name.compare(0, 2, "f.") != 0) return false;
  std::uint64_t v = 0;
  for (std::size_t i = 2; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    const auto d = static_cast<std::uint64_t>(name[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;  // not a fence any grant has
    v = v * 10 + d;
  }
  out = v;
  return true;
}

failure newer_holder(const write_target& t, std::uint64_t theirs, std::uint64_t ours) {
  return make_failure(errc::lock_lost,
                      describe("fence", t.path,
                               "a newer holder of the lock (fence " + std::to_string(theirs) +
                                   ") has been here since our grant (fence " +
                                   std::to_string(ours) +
                                   ") was made: our lease ended; nothing was written",
                               {}));
}

// The fence entry we hold becomes the workspace once it is judged.
failure claimed(os& sys, const write_target& t, fence_fds& fds, const std::string& name,
                const std::string& entry, std::optional<unsigned> group,
                std::string& workspace) {
  close_later judged{sys};
  std::error_code ec = sys.open_directory(fds.dir, name, judged.fd);
  if (ec == std::errc::no_such_file_or_directory)
    return make_failure(errc::lock_lost,
                        describe("fence", t.path,
                                 "our fence entry " + entry +
                                     " was renamed away by a newer holder; nothing was written",
                                 {}));
  if (ec) return write_failure("fence", t, "cannot open the fence entry " + entry, ec);
  if (failure f = check_trusted_fd(sys, judged.fd, entry, "fence", "fence entry", group)) return f;
  workspace = entry;
  return {};
}

// Makes the fence directory exist with its first entry, in one rename, so
// that it never exists empty and two first holders cannot both add an
// entry. Success also when another holder's rename won.
failure create_fence(os& sys, const write_target& t, const std::string& dir,
                     const std::string& first, unsigned dir_mode) {
  const std::string init = t.dir + "/." + t.name + ".fence.init." + std::to_string(sys.random_u64());
  std::error_code ec = sys.make_directory(init, dir_mode);
  if (ec) return write_failure("fence", t, "cannot create " + init, ec);
  ec = sys.make_directory(init + "/" + first, dir_mode);
  if (!ec) ec = sys.rename(init, dir);
  if (!ec) return {};
  sys.remove_directory(init + "/" + first);
  sys.remove_directory(init);
  if (ec == std::errc::directory_not_empty || ec == std::errc::file_exists) return {};
  return write_failure("fence", t, "cannot create the fence directory " + dir, ec);
}

// The one fence entry's number, listed through the judged directory.
failure only_entry(os& sys, const write_target& t, const std::string& dir, int fd,
                   std::uint64_t& current) {
  std::vector<std::string> names;
  if (std::error_code ec = sys.list_directory_at(fd, names))
    return write_failure("fence", t, "cannot list the fence directory " + dir, ec);
  std::vector<std::uint64_t> entries;
  for (const auto& n : names) {
    std::uint64_t v;
    if (parse_fence_entry(n, v)) entries.push_back(v);
  }
  if (entries.size() != 1)
    return make_failure(errc::lock_corrupt,
                        describe("fence", t.path,
                                 "the fence directory " + dir + " holds " +
                                     std::to_string(entries.size()) +
                                     " fence entries instead of one (changed by hand?); remove "
                                     "it while no process updates the file",
                                 {}));
  current = entries[0];
  return {};
}

}  // namespace

// Makes TARGET.fence/f.<fence> the one entry of the fence directory, and
// sets `workspace` to it, with the directory open in `fds`.
failure claim_fence(os& sys, const write_target& t, std::uint64_t fence, unsigned dir_mode,
                    std::string& workspace, fence_fds& fds) {
  const std::string dir = t.path + ".fence";
  const std::string mine_name = fence_entry(fence);
  const std::string mine = dir + "/" + mine_name;
  // Another user's fence directory (or one others may write) could hold
  // an entry of theirs for our temporary file: judged before it is used.
  const sharing share{dir_mode, {}};
  std::optional<unsigned> group;
  // Each round either ends or saw the directory change under it (another
  // holder's rename): a handful suffices unless something is wrong.
  for (int round = 0; round < 16; ++round) {
    if (fds.dir >= 0) sys.close(fds.dir);
    fds.dir = -1;
    std::error_code ec = sys.open_directory(os::cwd, dir, fds.dir);
    if (ec == std::errc::no_such_file_or_directory) {
      if (failure f = create_fence(sys, t, dir, mine_name, dir_mode)) return f;
      continue;
    }
    if (ec == std::errc::too_many_symbolic_link_levels || ec == std::errc::not_a_directory)
      if (failure f = check_trusted_path(sys, dir, "fence", "fence directory", {})) return f;
    if (ec) return write_failure("fence", t, "cannot open the fence directory " + dir, ec);
    file_status st;
    if ((ec = sys.status_at(fds.dir, "", st)))
      return write_failure("fence", t, "cannot look at the fence directory " + dir, ec);
    if (failure f = chosen_group(sys, share, st, "fence", group)) return f;
    if (failure f = check_trusted(sys, st, dir, "fence", "fence directory", group)) return f;
    std::uint64_t current = 0;
    if (failure f = only_entry(sys, t, dir, fds.dir, current)) return f;
    if (current == fence) return claimed(sys, t, fds, mine_name, mine, group, workspace);
    if (current > fence) return newer_holder(t, current, fence);
    ec = sys.rename_at(fds.dir, fence_entry(current), fds.dir, mine_name);
    if (!ec) return claimed(sys, t, fds, mine_name, mine, group, workspace);
    if (ec != std::errc::no_such_file_or_directory)
      return write_failure("fence", t, "cannot rename the fence entry to " + mine, ec);
  }
  return make_failure(std::make_error_code(std::errc::resource_unavailable_try_again),
                      describe("fence", t.path,
                               "the fence directory " + dir + " kept changing while we claimed it",
                               {}));
}

failure lost_at_commit(const write_target& t, std::uint64_t fence) {
  return make_failure(errc::lock_lost,
                      describe("commit", t.path,
                               "a newer holder took the fence before our commit (our fence " +
                                   std::to_string(fence) +
                                   ": our lease ended); nothing was written and the new "
                                   "holder's data is intact",
                               {}));
}

}  // namespace tokenlock::detail
