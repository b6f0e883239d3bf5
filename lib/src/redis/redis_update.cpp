// update_file and increment_counter under a Redis lock, their commit fenced
// by the grant's fencing token through a fence directory beside the target
// (docs/redis.md, The file fence):
//
//   TARGET.fence/f.<fence, 20 digits>     exactly one entry, a directory
//
// After acquiring, and before reading the target, the holder renames the
// one entry to its own fence's name, unless the entry's number is larger
// than its own (then a newer holder has been here: lock_lost, nothing
// written). Its temporary file is written inside that entry and committed
// by a rename through the entry's path: a holder whose entry was renamed
// away by a newer one (it stalled past its lease) finds the path gone and
// writes nothing. The rename happens before the newer holder reads, so
// whatever a stalled holder committed before it is read by the newer one.
#include <cerrno>
#include <cstdio>
#include <optional>
#include <vector>

#include "file_writer.hpp"
#include "atomic_write_impl.hpp"
#include "lock_directory.hpp"
#include "trust.hpp"
#include "tokenlock/keep_alive.hpp"
#include "tokenlock/redis_lock.hpp"
#include "update_impl.hpp"

namespace tokenlock {

using namespace detail;

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

// The fence directory and the entry we hold in it, by descriptor: judged
// (trust.hpp) before the temporary file is made in the entry, and the
// commit renamed relative to the directory, through the entry's name.
struct fence_fds {
  os& sys;
  int dir = -1;
  int entry = -1;
  ~fence_fds() {
    if (entry >= 0) sys.close(entry);
    if (dir >= 0) sys.close(dir);
  }
};

// The fence entry we hold becomes the workspace once it is judged.
failure claimed(os& sys, const write_target& t, fence_fds& fds, const std::string& name,
                const std::string& entry, bool group, std::string& workspace) {
  std::error_code ec = sys.open_directory(fds.dir, name, fds.entry);
  if (ec == std::errc::no_such_file_or_directory)
    return make_failure(errc::lock_lost,
                        describe("fence", t.path,
                                 "our fence entry " + entry +
                                     " was renamed away by a newer holder; nothing was written",
                                 {}));
  if (ec) return write_failure("fence", t, "cannot open the fence entry " + entry, ec);
  if (failure f = check_trusted_fd(sys, fds.entry, entry, "fence", "fence entry", group)) return f;
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

// Makes TARGET.fence/f.<fence> the one entry of the fence directory, and
// sets `workspace` to it, with the directory and the entry open in `fds`.
failure claim_fence(os& sys, const write_target& t, std::uint64_t fence, unsigned dir_mode,
                    std::string& workspace, fence_fds& fds) {
  const std::string dir = t.path + ".fence";
  const std::string mine_name = fence_entry(fence);
  const std::string mine = dir + "/" + mine_name;
  // Another user's fence directory (or one others may write) could hold
  // an entry of theirs for our temporary file: judged before it is used.
  const bool group = chooses_group_sharing(dir_mode);
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
      if (failure f = check_trusted_path(sys, dir, "fence", "fence directory", group)) return f;
    if (ec) return write_failure("fence", t, "cannot open the fence directory " + dir, ec);
    if (failure f = check_trusted_fd(sys, fds.dir, dir, "fence", "fence directory", group))
      return f;
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

// The Redis lock's part of the update flow (update_flow, update_impl.hpp).
class redis_lock_steps {
 public:
  redis_lock_steps(os& sys, redis_lock& lock) : sys_(sys), lock_(lock), fds_{sys} {}

  failure acquire() {
    std::error_code ec;
    h_ = lock_.acquire(ec);
    if (ec) return make_failure(ec, last_error_message());
    return {};
  }

  std::chrono::milliseconds lease() const { return lock_.options().lease; }
  redis_handle& handle() { return h_; }

  // The fence entry is claimed before the read: whatever a stalled holder
  // committed before that is read by us, and nothing it commits after.
  failure read(const write_target& t, std::optional<std::string>& current, int& fd,
               const read_rules& rules) {
    if (failure f = claim_fence(sys_, t, h_.fence(), 0755, workspace_, fds_)) return f;
    return read_file_impl(sys_, t.path, current, &fd, rules);
  }

  failure commit(const write_target& t, const std::string& next, const write_options& in_lock) {
    temp_file tmp;
    // By path, through the entry's name (see fenced_commit in update.cpp).
    if (failure f = write_temp(sys_, t, workspace_, next, in_lock, tmp))
      return f.code == std::errc::no_such_file_or_directory && entry_gone() ? lost_at_commit(t, h_.fence()) : f;
    // Relative to the fence directory and through our entry's name: the fence.
    const std::string in_fence = tmp.path.substr(t.path.size() + std::string(".fence/").size());
    std::error_code ec = sys_.rename_at(fds_.dir, in_fence, os::cwd, t.path);
    if (!ec) return {};
    sys_.remove_file(tmp.path);  // gone with the entry when a newer holder took it
    if (ec == std::errc::no_such_file_or_directory && entry_gone())
      return lost_at_commit(t, h_.fence());
    return write_failure("rename", t, "cannot rename " + tmp.path + " over the target", ec);
  }

  void release() {
    std::error_code ec;
    h_.release(ec);
  }

 private:
  bool entry_gone() {
    file_status st;
    return sys_.status(workspace_, st) == std::errc::no_such_file_or_directory;
  }

  os& sys_;
  redis_lock& lock_;
  redis_handle h_;
  std::string workspace_;
  fence_fds fds_;
};

failure redis_update_impl(os& sys, const boost::filesystem::path& target, redis_lock& lock,
                          const compute_function& compute, const update_options& options,
                          const read_rules& rules) {
  redis_lock_steps steps(sys, lock);
  return update_flow(sys, steps, target, compute, options, rules);
}

}  // namespace

update_result update_file(const boost::filesystem::path& target, redis_lock& lock,
                          const update_function& fn, const update_options& options) {
  failure f = with_user_function(fn, [&](const compute_function& c) {
    return redis_update_impl(*system_os(), target, lock, c, options, update_read_rules(options));
  });
  if (f) throw_failure(f);
  return update_result{};
}

update_result update_file(const boost::filesystem::path& target, redis_lock& lock,
                          const update_function& fn, const update_options& options,
                          std::error_code& ec) {
  with_user_function(fn, [&](const compute_function& c) {
    failure inner;
    run_noexcept(ec, [&] {
      inner = redis_update_impl(*system_os(), target, lock, c, options, update_read_rules(options));
      return inner;
    });
    return inner;
  });
  return update_result{};
}

std::uint64_t increment_counter(const boost::filesystem::path& file, redis_lock& lock,
                                std::uint64_t by, const update_options& options) {
  std::uint64_t value = 0;
  run_throwing([&] {
    return redis_update_impl(*system_os(), file, lock, counter_step(file.string(), by, value),
                             options, counter_update_rules(options));
  });
  return value;
}

std::uint64_t increment_counter(const boost::filesystem::path& file, redis_lock& lock,
                                std::uint64_t by, const update_options& options,
                                std::error_code& ec) noexcept {
  std::uint64_t value = 0;
  run_noexcept(ec, [&] {
    return redis_update_impl(*system_os(), file, lock, counter_step(file.string(), by, value),
                             options, counter_update_rules(options));
  });
  return !ec || ec == errc::dir_sync_failed ? value : 0;
}

}  // namespace tokenlock
