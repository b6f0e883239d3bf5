// tokenlock/clock.hpp — how far this host's clock is from the file server's.
//
// Purpose
//   A lease is an absolute CLOCK_REALTIME time: the holder's host writes it
//   into the token name, and every other host judges it by its own clock (a
//   lease has ended when now > expiry + lock_options::skew_allowance). Hosts
//   that share a lock over a network filesystem therefore rest on
//   synchronised clocks. A host whose clock runs ahead by more than the
//   allowance takes over holders whose lease is still running; a host that
//   runs behind waits too long for dead ones. estimate_clock_offset()
//   measures this host's clock against the clock that stamps the files of a
//   directory. On a network filesystem that is normally the file server's,
//   the one clock that every client sees, so a host that is off can say so
//   (`tokenlock status` and `tokenlock doctor` do).
//
// How it works
//   It creates a file named ".tokenlock-clock.<16 hex digits>" in `dir`
//   (O_CREAT|O_EXCL, mode 0600), then, `samples` times: reads this host's
//   clock, writes one byte, reads the file's modification time back with
//   fstat(2), and reads the clock again. The server stamps the write with
//   its own time somewhere between the two readings (a Linux NFS client
//   sends the write before fstat returns). The sample with the shortest
//   round trip, timed on the monotonic clock, bounds the stamp best:
//     offset      = stamp - midpoint of the round trip + granule / 2
//     uncertainty = round trip / 2 + granule / 2
//   where the granule is the timestamp granularity: Linux stamps files with
//   the time of the last timer tick, up to one tick (1 to 10 ms, 4 ms with
//   the usual CONFIG_HZ=250) before the write; 10 ms is assumed. When every
//   stamp is a whole second, the filesystem keeps seconds only (sshfs:
//   SFTP carries seconds; ext3, HFS+), and the granule is 1 s, or 2 s when
//   the stamps differ and all are even (FAT; samples within one second
//   cannot tell, and FAT is then taken for 1 s). The true offset lies within
//   offset ± uncertainty as long as the granule is not coarser than that.
//   The file is removed before the call returns, whatever happened; it
//   costs a create, `samples` writes and stats, and an unlink (about 50 µs
//   on a local disk, a few network round trips on a network filesystem).
//
// Limits
//   - It measures whoever stamps the modification time:
//     NFS: the server, with its own clock (what the lease check needs).
//     sshfs: the SFTP server's filesystem, in whole seconds (± 0.5 s at
//       best).
//     GlusterFS with its ctime feature on (`gluster volume get VOL
//       features.ctime`): the client sends its own time, so the offset comes
//       out near zero whatever the clocks say, and tells nothing. With it
//       off, the bricks stamp files with their own clocks.
//     A local filesystem: this host's own clock (the result shows the
//       resolution of the measurement).
//   - It compares this host with the server, not with the other clients.
//     Two hosts on opposite sides of the server, each within the allowance,
//     can be up to twice the allowance apart.
//   - A client that caches attributes and does not send the write before
//     fstat returns would report a stale stamp; the modification time of a
//     file this host has just written is normally fetched fresh.
//   - A clock that is stepped during the call spoils one sample at most.
//
// Errors
//   Throwing and error_code& forms as everywhere in tokenlock (errors.hpp).
//   OS failures keep their errno (EACCES: no write permission on `dir`,
//   EROFS, ENOENT: no such directory, ENOSPC, EIO, ...), with a message that
//   names the directory, the step and the cause. std::errc::not_supported:
//   the filesystem reports no modification times. errc::bad_argument: an
//   empty path or fewer than 1 (more than 100) samples. The probe file is
//   removed on every failure; if even that fails, the message names it.
//
// Thread safety
//   Safe to call from any thread: each call uses its own file.
#pragma once

#include <chrono>
#include <system_error>

#include <boost/filesystem/path.hpp>

namespace tokenlock {

struct clock_offset {
  // The file server's clock minus this host's CLOCK_REALTIME: positive when
  // the server is ahead of this host.
  std::chrono::microseconds offset{0};
  // The true offset lies within offset ± uncertainty.
  std::chrono::microseconds uncertainty{0};
  // The round trip of the sample used, and the timestamp granularity
  // assumed (see How it works).
  std::chrono::microseconds round_trip{0};
  std::chrono::microseconds granularity{0};

  // Certainly further apart than `allowance`: |offset| - uncertainty >
  // allowance. Leases written by other hosts cannot be judged safely then.
  bool exceeds(std::chrono::microseconds allowance) const noexcept {
    const auto a = offset < offset.zero() ? -offset : offset;
    return a - uncertainty > allowance;
  }
  // Certainly within `allowance`: |offset| + uncertainty <= allowance.
  // Neither this nor exceeds() holds when the measurement is too coarse to
  // tell.
  bool within(std::chrono::microseconds allowance) const noexcept {
    const auto a = offset < offset.zero() ? -offset : offset;
    return a + uncertainty <= allowance;
  }
};

struct clock_offset_options {
  // Measurements made; the one with the shortest round trip is kept.
  int samples = 3;
};

// Estimates the offset of the clock that stamps files in `dir` from this
// host's clock. `dir` must be a directory the caller may create files in.
clock_offset estimate_clock_offset(const boost::filesystem::path& dir,
                                   clock_offset_options options = {});
clock_offset estimate_clock_offset(const boost::filesystem::path& dir,
                                   std::error_code& ec) noexcept;
clock_offset estimate_clock_offset(const boost::filesystem::path& dir,
                                   clock_offset_options options, std::error_code& ec) noexcept;

}  // namespace tokenlock
