// What shared holders do inside a token directory (docs/protocol.md, Shared
// locks and semaphores): open it by descriptor and judge it, list its share
// entries and judge each, make and remove entries. Nothing here renames the
// token: that is the callers' compare-and-swap.
#pragma once

#include <string>
#include <vector>

#include "core/failure.hpp"
#include "lockdir/lock_directory.hpp"
#include "lockdir/shared_name.hpp"
#include "tokenlock/lock_options.hpp"

namespace tokenlock::detail {

// The holder a shared name names, as a token of the exclusive grammar with
// its real host tag and start time, for judge(): a lone share's holder, a
// draining cover's writer, a group cover's last renamer.
observed_token named_holder(const observed_token& shared);

// The share entries of one token directory, judged.
struct entry_census {
  std::vector<observed_token> live;
  std::vector<std::string> stale;      // lease ended or owner dead: removable
  std::vector<std::string> malformed;  // "s." names that break the grammar
  bool holds(const std::string& entry) const;
  // Copies of one lone share (shared_name.hpp, copy_of_lone) are one
  // holder: `live` keeps one of them.
  // Live entries other than `a` and `b`.
  std::size_t others(const std::string& a, const std::string& b = {}) const;
};

// Opens the token directory `name` in the lock directory `d` without
// following a link, and judges it as a workspace is judged. `gone` when the
// name is not there any more (it was renamed since it was listed); a file
// or a link in its place is busy_token, with `why` saying so.
enum class token_open { ok, gone, not_a_directory };
failure open_token_dir(os& sys, const lock_paths& paths, const open_dir& d,
                       const std::string& name, const char* step, scoped_fd& out,
                       token_open& how);

// Lists and judges the entries of the token open as `fd`. With
// `until_live`, stops judging at the first live entry: enough for whoever
// only asks whether anybody still holds (the last one out), and each
// judgement of a local owner reads /proc.
failure take_census(os& sys, const lock_paths& paths, int fd, const lock_options& options,
                    const char* step, entry_census& out, bool until_live = false);

// Removes the stale entries a census found, each by its exact name, never
// following anything (a link is removed; a FIFO is never opened). Best
// effort: one that cannot be removed is still stale to everybody.
void remove_stale_entries(os& sys, int fd, const entry_census& census);

// Makes the entry `name` (an empty directory, mkdirat with mode 0700; no
// one reads an entry's mode, so the umask may take bits away): made; or
// something was there already; or the token is gone (ENOENT: removed by a
// takeover since it was opened).
enum class entry_made { made, existed, gone };
failure make_entry(os& sys, const lock_paths& paths, int fd, const std::string& name,
                   const char* step, entry_made& how);

// Removes the entry `name`; ENOENT is returned as such.
std::error_code remove_entry(os& sys, int fd, const std::string& name);

}  // namespace tokenlock::detail
