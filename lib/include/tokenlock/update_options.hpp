// tokenlock/update_options.hpp — the settings and result of an update.
//
// Purpose
//   The types that update_file and increment_counter take and return, for
//   every kind of lock: tokenlock/update.hpp declares the functions for a
//   lock directory, tokenlock/update_any.hpp those for any tokenlock::lock
//   (a Redis or etcd lock among them). Kept apart so that no kind of lock
//   needs another's header.
//
// Thread safety
//   Plain values: copy them freely; one object may be read by any number
//   of threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "tokenlock/atomic_write.hpp"

namespace tokenlock {

struct update_options {
  write_options write;
  // Fail with errc::not_fenced rather than commit without the fence when
  // the lock directory and the target are on different filesystems.
  bool require_fence = false;
  // About one update in this many (at random) also removes this target's
  // temporary files older than the lease (left by crashed writers). Listing
  // the directory on every update would make each update cost in proportion
  // to the files beside the target. 1: every update; 0: never.
  unsigned sweep_every = 32;
  // Refresh the lease from a background thread while the update function
  // runs (tokenlock/keep_alive.hpp), for functions that may outlast the
  // lease; under every backend. If the lock is taken over meanwhile, nothing is committed and the
  // update fails with lock_lost, as it would without this.
  bool keep_alive = false;
  // The largest file update_file reads, in bytes. A larger one fails with
  // EFBIG ("too large") before a byte of it is read; the lock is released
  // and nothing is written. Bounds the memory and the time the lock is held
  // when the file is not what the caller expects (a log that grew without
  // end, or a file another user made huge). Only a regular file is read at
  // all: a FIFO, device or socket at the target is refused (EINVAL) without
  // blocking, and so is a symbolic link there unless write.symlinks is
  // follow (ELOOP: the link would be replaced, so what it points to is not
  // the target's contents).
  std::uint64_t read_limit = default_read_limit;
};

struct update_result {
  // True when the commit was fenced: by the token's path, or under a Redis
  // or etcd lock by the fence directory (always). False when a lock
  // directory and the target are on different filesystems: ownership was then checked by a
  // refresh rename just before the commit, which leaves a window between
  // the check and the commit.
  bool fenced = true;
};

// Receives the current contents (std::nullopt when the file does not exist)
// and returns the new contents.
using update_function = std::function<std::string(const std::optional<std::string>& current)>;

}  // namespace tokenlock
