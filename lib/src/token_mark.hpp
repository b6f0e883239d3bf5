// Owner marks: a second check of a fresh acquisition, for filesystems whose
// rename can move a directory through a name it no longer has.
//
// On GlusterFS a client renames the directory its own cache last saw under
// a name, whatever that directory is called on the server by then. Two
// acquirers can then both rename "lockfile" and both succeed: the second
// rename moves the first one's token to the second one's name
// (docs/network-filesystems.md). The names alone cannot tell the two apart,
// so there each new holder also leaves a mark inside its token directory,
//
//   D/<token>/h.<token without "lockfile.">
//
// and lists the token: a holder whose token holds a live mark of someone
// else's gives the token back to that name and keeps waiting. Both marks
// land in the one directory the renames moved, so of two such holders the
// one that marked second sees both marks and steps back; when both see
// both, both step back and the lock is free again once the last one's lease
// ends. A mark whose own token would be stale (a dead owner's, left by a
// crash) is removed. A holder removes its mark before it releases.
#pragma once

#include <string>
#include <string_view>

#include "failure.hpp"
#include "lock_directory.hpp"
#include "posix/os.hpp"

namespace tokenlock::detail {

// Whether acquisitions on this filesystem need owner marks: unknown network
// and FUSE filesystems do; local ones, and those whose servers rename by
// name (sshfs, MooseFS, NFS, CIFS, Ceph), do not.
bool needs_owner_marks(const filesystem_info& fs);

// Looks up (once per lock, then remembered in `paths`) whether the lock
// directory's filesystem needs owner marks. A filesystem that cannot be
// asked counts as one that needs them.
bool lock_needs_owner_marks(os& sys, const lock_paths& paths);

// "h.<token without lockfile.>": the mark of a token's owner, the same for
// the life of one acquisition (a refresh keeps it).
std::string owner_mark_name(std::string_view token);

enum class mark_result {
  held,      // our mark is in, and no live mark of anyone else's
  yielded,   // someone else's live mark (or our token was gone): not ours
};

// Marks a token we just renamed to (`token`, at `token_path`) and checks it.
// On `yielded`, our mark is removed again and the token was renamed to the
// name its other mark names (best effort); `holder` then describes who.
// A failure (the mark cannot be made or the token listed for another
// reason than its being gone) renames the token to "lockfile" first, so
// nothing of ours stays held.
failure mark_and_check(os& sys, const lock_paths& paths, const lock_options& options,
                       const std::string& token, const std::string& token_path,
                       mark_result& result, std::string& holder);

// Removes our mark before a release. ENOENT is success (the token is gone,
// which the release's rename reports).
std::error_code remove_owner_mark(os& sys, const std::string& token_path,
                                  const std::string& mark);

// The mark of ours in a token we did not acquire in this handle (adopt):
// empty when it has none.
std::string find_owner_mark(os& sys, const std::string& token_path, std::string_view token);

}  // namespace tokenlock::detail
