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
// renamed along with the token on every refresh, and lists the token: a
// holder whose token holds a live mark of someone else's gives the token
// back to that name and keeps waiting. Both marks land in the one directory
// the renames moved, so of two such holders the one that marked second sees
// both marks and steps back. A process keeps its mark inside while it hands
// the directory back, so that whoever takes the directory meanwhile (its
// name may be stale too) steps back as well. Marks of dead or expired
// owners are removed. docs/protocol.md, Owner marks, has the whole rule.
#pragma once

#include <string>
#include <string_view>

#include "core/failure.hpp"
#include "lockdir/lock_directory.hpp"
#include "posix/os.hpp"

namespace tokenlock::detail {

// Whether acquisitions on this filesystem need owner marks: unknown network
// and FUSE filesystems do; local ones, and those whose servers rename by
// name (sshfs, MooseFS, NFS, CIFS, Ceph), do not.
bool needs_owner_marks(const filesystem_info& fs);

// Looks up (once per lock, then remembered in `paths`) whether the lock
// directory's filesystem needs owner marks. A filesystem that cannot be
// asked counts as one that needs them. Called before the first rename, so
// that no token of ours waits unmarked while the mount table is read.
bool lock_needs_owner_marks(os& sys, const lock_paths& paths);

// Whether the filesystem of `path` (which exists) needs owner marks; true
// when it cannot be asked, with `ec` saying why.
bool path_needs_owner_marks(os& sys, const std::string& path, std::error_code& ec);

enum class mark_result {
  held,       // our mark is in, and no live mark of anyone else's
  yielded,    // someone else's live mark: the token went to that name
  abandoned,  // the token was gone (or persistently ESTALE): nothing renamed
};

// Marks a token we just renamed to (`token`, at `token_path`) and checks it.
// `taken_from`: the held token we took over to get it (its owner's marks
// are removed), or empty. On `yielded` and `abandoned`, no mark of ours is
// left (best effort) and `holder` says who holds the lock, when known.
// A failure (the mark cannot be made, or the token listed, for another
// reason than its being gone) says in its message whether the token went
// back to "lockfile" or stays until its lease ends.
failure mark_and_check(os& sys, const lock_paths& paths, const lock_options& options,
                       const char* step, const std::string& token,
                       const std::string& token_path, std::string_view taken_from,
                       mark_result& result, std::string& holder);

// Removes our mark before a release. ENOENT is success (the token is gone,
// which the release's rename reports, or it was never marked); a mark under
// an older name (a refresh that could not rename it) is found by listing.
std::error_code remove_owner_mark(os& sys, const std::string& token_path,
                                  std::string_view token);

// Puts our mark back (a release whose rename failed keeps the lock).
std::error_code restore_owner_mark(os& sys, const std::string& token_path,
                                   std::string_view token);

// After a refresh renamed the token from `old_token` to `token`: renames
// the mark to match, or makes it when there was none.
std::error_code rename_owner_mark(os& sys, const std::string& token_path,
                                  std::string_view old_token, std::string_view token);

}  // namespace tokenlock::detail
