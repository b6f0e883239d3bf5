// Steps that several shared transitions take (docs/protocol.md, Shared
// locks and semaphores): the last one out, and finding one's share again.
#pragma once

#include <cstdint>
#include <string>

#include "core/failure.hpp"
#include "lockdir/lock_directory.hpp"
#include "lockdir/shared_group.hpp"

namespace tokenlock::detail {

// The later expiry a rename of a shared name gives: at least 1 µs past the
// name's own, so that no shared name is ever made twice.
inline std::int64_t later_expiry(std::int64_t seen_us, std::int64_t wanted_us) {
  return wanted_us > seen_us ? wanted_us : seen_us + 1;
}

// After an entry left a cover: while the token's name is a cover without a
// live entry, removes the stale entries and frees a group cover (renames it
// to lockfile) or hands a draining cover to its writer. Another rename in
// between makes it look again. Nothing to do when a live entry is there.
failure settle_cover(os& sys, const lock_paths& paths, const lock_options& options,
                     const char* step);

// Where a share is now: the token's name (`cover`, empty when the lock is
// free or held by somebody else), whether `entry` is in it, and the census.
struct share_place {
  observed_token token;
  shared_token shared;
  bool is_cover = false;
  bool has_entry = false;
};
failure find_share(os& sys, const lock_paths& paths, const std::string& entry, const char* step, share_place& out);

// Renames a cover for a member (a join, a refresh): kind and writer kept for
// a draining cover (only its expiry rises), ours and a fresh nonce for a
// group cover.
std::string renamed_cover(os& sys, const observed_token& cover, const shared_token& s,
                          std::int64_t expiry_us, int pid, std::uint64_t start);

// Whether the token's name in `d` is a cover (a group or a draining one)
// now: what a converter or a marking writer whose rename of a lone share
// failed asks before it keeps the entry it made for that share (the share
// may have been converted meanwhile). False when it cannot tell.
bool token_is_cover(os& sys, const lock_paths& paths, const open_dir& d, const char* step);

}  // namespace tokenlock::detail
