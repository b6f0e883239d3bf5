// How to make a network filesystem's client show other clients' renames and
// replaced contents at once: the one text that the doctor and the updater's
// stale-data error both give.
#pragma once

#include <string>

namespace tokenlock::detail {

// The mount or volume settings for the filesystem type `fs_type` ("nfs4",
// "fuse.sshfs", "fuse.glusterfs", ...), or for all three when the type is
// another or unknown. `names`: the client must also see renames at once
// (not only new contents), which GlusterFS needs mount options for.
std::string cache_fix(const std::string& fs_type, bool names);

}  // namespace tokenlock::detail
