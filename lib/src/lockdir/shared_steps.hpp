// Steps that several shared transitions take (docs/protocol.md, Shared
// locks and semaphores): the last one out, and finding one's share again.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

// lock_corrupt when the census of `token` shows no live share but a
// malformed entry: nobody can tell whether its holder is gone, so neither
// a writer nor the last one out may free the token (it is never removed).
failure corrupt_entry(const lock_paths& paths, const std::string& token,
                      const entry_census& census, const char* step);

// Where a share is now: the cover that holds it (open as `tok`), and the
// names in it that are the share: its own entry ("s.<...>"), or the
// copies of a converted lone share (a "lockfile." name). `names` is empty
// when the token's name is no cover or holds none of them: the share is
// gone.
struct share_place {
  observed_token token;
  shared_token shared;
  std::vector<std::string> names;
  bool found() const { return !names.empty(); }
};
failure locate_share(os& sys, const lock_paths& paths, const std::string& share,
                     const char* step, share_place& out, scoped_fd& tok);

// Renames a cover for a member (a join, a refresh): kind and writer kept for
// a draining cover (only its expiry rises), ours and a fresh nonce for a
// group cover.
std::string renamed_cover(os& sys, const observed_token& cover, const shared_token& s,
                          std::int64_t expiry_us, int pid, std::uint64_t start);

}  // namespace tokenlock::detail
