// The properties the doctor reports, in its order: what the library's and
// the command's doctor tests both expect (tokenlock(1), doctor).
#pragma once

#include <string>
#include <vector>

namespace tokenlock::testing {

// Checked in DIR, without a peer.
inline const std::vector<std::string> local_properties = {
    "rename of a directory to a new name",
    "rename of a directory onto an empty directory",
    "rename of a directory onto a non-empty directory",
    "rename of a file over a file",
    "rename of a vanished name",
    "exclusive create",
    "token names",
    "fsync of a file",
    "fsync of a directory",
    "wait board",
    "owner marks",
    "clock offset",
};
// Checked through DIR2, with --peer.
inline const std::vector<std::string> peer_properties = {
    "another mount",
    "renames seen through the peer",
    "rename through the peer of a vanished name",
    "contents seen through the peer",
};

}  // namespace tokenlock::testing
