// The fence directory of a fenced update under a lock server's grant
// (fence_directory.hpp).
#include "files/fence_directory.hpp"

#include <cerrno>
#include <cstdio>
#include <vector>

#include "files/update_impl.hpp"
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

failure fence_claim::claim(const write_target& t) {
  return claim_fence(sys_, t, fence_, 0755, workspace_, fds_);
}

failure fence_claim::commit(const write_target& t, std::string_view next,
                            const write_options& in_lock) {
  temp_file tmp;
  // By path, through the entry's name (see fenced_commit in update.cpp).
  if (failure f = write_temp(sys_, t, workspace_, next, in_lock, tmp))
    return f.code == std::errc::no_such_file_or_directory && entry_gone() ? lost_at_commit(t, fence_) : f;
  // Relative to the fence directory and through our entry's name: the fence.
  const std::string in_fence = tmp.path.substr(t.path.size() + std::string(".fence/").size());
  std::error_code ec = sys_.rename_at(fds_.dir, in_fence, os::cwd, t.path);
  if (!ec) return {};
  sys_.remove_file(tmp.path);  // gone with the entry when a newer holder took it
  if (ec == std::errc::no_such_file_or_directory && entry_gone()) return lost_at_commit(t, fence_);
  return write_failure("rename", t, "cannot rename " + tmp.path + " over the target", ec);
}

bool fence_claim::entry_gone() {
  file_status st;
  return sys_.status(workspace_, st) == std::errc::no_such_file_or_directory;
}

namespace {

// A grant without a fence, of a lock that is no lock directory: nothing
// orders its commits against a stalled holder's.
failure no_fence(const std::string& target, const std::string& spec) {
  return make_failure(errc::not_fenced,
                      describe("commit", target,
                               "the lock " + spec +
                                   " gives grants without a fencing token and is no lock "
                                   "directory, so the commit cannot be fenced; nothing was "
                                   "written",
                               {}));
}

}  // namespace

failure fenced_lock_steps::acquire() {
  std::error_code ec;
  h_ = lock_.acquire(ec);
  if (ec) return make_failure(ec, last_error_message());
  if (h_.mode() == lock_mode::shared) {
    h_.release(ec);
    return refuse_shared("update", lock_.spec());
  }
  if (h_.fence()) claim_.emplace(sys_, *h_.fence());
  return {};
}

failure fenced_lock_steps::read(const write_target& t, std::optional<std::string>& current,
                                int& fd, const read_rules& rules) {
  if (!claim_) return no_fence(t.path, lock_.spec());
  if (failure f = claim_->claim(t)) return f;
  return read_file_impl(sys_, t.path, current, &fd, rules);
}

failure fenced_update(os& sys, const boost::filesystem::path& target, lock& lock,
                      const compute_function& compute, const update_options& options,
                      const read_rules& rules) {
  fenced_lock_steps steps(sys, lock);
  return update_flow(sys, steps, target, compute, options, rules);
}

namespace {

// Why `h` cannot commit, if it cannot: it holds no grant, or one with no
// fence.
failure unusable_grant(const handle& h, const std::string& target) {
  if (h.owns() && h.mode() == lock_mode::shared) return refuse_shared("commit", target);
  if (h.owns()) return h.fence() ? failure{} : no_fence(target, "behind this handle");
  if (!h.fence())
    return make_failure(errc::bad_argument,
                        "tokenlock: commit " + target +
                            ": the handle holds no lock (acquire it first); nothing was written");
  if (!h.id().empty())
    return make_failure(errc::not_owner,
                        describe("commit", target,
                                 "the lock is held by the process that acquired it, not by "
                                 "this forked child; nothing was written",
                                 {}));
  return make_failure(errc::lock_lost,
                      describe("commit", target,
                               "the handle no longer holds the lock (it was released, or a "
                               "refresh found it lost); nothing was written",
                               {}));
}

}  // namespace

failure fenced_commit_file(os& sys, const handle& h, const boost::filesystem::path& target,
                           std::string_view contents, const write_options& options) {
  if (failure f = unusable_grant(h, target.string())) return f;
  write_target t;
  if (failure f = resolve_target(sys, target, options, t)) return f;
  fence_claim claim(sys, *h.fence());
  if (failure f = claim.claim(t)) return f;
  if (failure f = claim.commit(t, contents, in_lock_options(options))) return f;
  // Worded as the updater's, as the lock directory's commit_file is.
  return sync_target_directory(sys, t, options.sync, "the update is committed",
                               "; do not repeat the update");
}

}  // namespace tokenlock::detail
