#include "core/netfs_advice.hpp"

namespace tokenlock::detail {

// Measured with tests/netfs/rig.sh: sshfs with dir_cache=no alone still
// leaves the kernel's FUSE caches, which serve an old name and an old size
// (a new, longer file is read cut short) for 1 s, and cache_timeout=0 does
// not help; GlusterFS serves old contents until stat-prefetch and
// open-behind are off, and old names for 1 s until the client's FUSE
// timeouts are 0.
std::string cache_fix(const std::string& fs_type, bool names) {
  const std::string nfs = "NFS: mount with lookupcache=none (or actimeo=0)";
  const std::string sshfs =
      "sshfs: mount with -o dir_cache=no,entry_timeout=0,attr_timeout=0 (sshfs caches names "
      "for 20 s, the kernel names and file sizes for 1 s)";
  std::string gluster =
      "GlusterFS: gluster volume set VOL performance.stat-prefetch off and gluster volume set "
      "VOL performance.open-behind off";
  if (names) gluster += ", and mount with -o entry-timeout=0,attribute-timeout=0";
  if (fs_type.find("sshfs") != std::string::npos) return sshfs;
  if (fs_type.find("glusterfs") != std::string::npos) return gluster;
  if (fs_type.rfind("nfs", 0) == 0) return nfs;
  return nfs + "; " + sshfs + "; " + gluster;
}

}  // namespace tokenlock::detail
