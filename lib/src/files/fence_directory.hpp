// The fence directory that fences a file update under a lock server's
// grant (redis_lock, etcd_lock, or any tokenlock::lock whose grants have a
// fence), and those locks' part of update_flow
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
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "files/atomic_write_impl.hpp"
#include "files/file_writer.hpp"
#include "lockdir/lock_directory.hpp"
#include "files/update_impl.hpp"
#include "posix/os.hpp"
#include "tokenlock/lock.hpp"

namespace tokenlock::detail {

// The fence directory, by descriptor: judged (trust.hpp) before the
// temporary file is made in our entry, and the commit renamed relative to
// it, through the entry's name. (The entry is judged through a descriptor
// of its own, closed once judged: the temporary file goes in by path.)
struct fence_fds {
  os& sys;
  int dir = -1;
  ~fence_fds() {
    if (dir >= 0) sys.close(dir);
  }
};

// Makes TARGET.fence/f.<fence> the one entry of the fence directory, and
// sets `workspace` to it once judged, with the directory open in `fds`.
failure claim_fence(os& sys, const write_target& t, std::uint64_t fence, unsigned dir_mode,
                    std::string& workspace, fence_fds& fds);

// A commit that found our entry renamed away: the lock is lost.
failure lost_at_commit(const write_target& t, std::uint64_t fence);

// Our entry of the fence directory, claimed for a grant's fence, and the
// commit through it: the fence of update_file and commit_file under a lock
// server's grant.
class fence_claim {
 public:
  fence_claim(os& sys, std::uint64_t fence) : sys_(sys), fence_(fence), fds_{sys} {}

  // claim_fence: lock_lost when a newer holder has been here.
  failure claim(const write_target& t);
  // Writes `next` inside the claimed entry and renames it over the target
  // through the entry's name: lock_lost when a newer holder renamed the
  // entry away meanwhile; nothing is then written or left behind.
  failure commit(const write_target& t, std::string_view next, const write_options& in_lock);

 private:
  bool entry_gone();

  os& sys_;
  std::uint64_t fence_;
  std::string workspace_;
  fence_fds fds_;
};

// A lock server's part of the update flow (update_flow, update_impl.hpp),
// for any tokenlock::lock whose grants have a fence (redis_lock, etcd_lock).
class fenced_lock_steps {
 public:
  fenced_lock_steps(os& sys, lock& lock) : sys_(sys), lock_(lock) {}

  failure acquire();
  // The lease the server granted, which may be longer than the one asked
  // for (etcd's minimum TTL): temporary files younger than it may be a
  // live writer's.
  std::chrono::milliseconds lease() const { return h_.lease(); }
  tokenlock::handle& handle() { return h_; }
  // The fence entry is claimed before the read: whatever a stalled holder
  // committed before that is read by us, and nothing it commits after.
  failure read(const write_target& t, std::optional<std::string>& current, int& fd,
               const read_rules& rules);
  failure commit(const write_target& t, const std::string& next, const write_options& in_lock) {
    return claim_->commit(t, next, in_lock);
  }
  void release() {
    std::error_code ec;
    h_.release(ec);
  }

 private:
  os& sys_;
  lock& lock_;
  tokenlock::handle h_;
  std::optional<fence_claim> claim_;  // made once acquired, when the fence is known
};

// update_file and increment_counter under a lock whose grants have a fence:
// the update flow with fenced_lock_steps.
failure fenced_update(os& sys, const boost::filesystem::path& target, lock& lock,
                      const compute_function& compute, const update_options& options,
                      const read_rules& rules);

// commit_file under a grant with a fence (tokenlock/update.hpp): the claim,
// then the commit through it, then the directory flush per options.sync.
failure fenced_commit_file(os& sys, const handle& h, const boost::filesystem::path& target,
                           std::string_view contents, const write_options& options);

}  // namespace tokenlock::detail
