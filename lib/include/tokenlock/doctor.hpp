// tokenlock/doctor.hpp — whether a directory's filesystem, and another
// mount of the same share, does what the lock and the atomic writes rely on.
//
// Purpose
//   The rename-token lock rests on a few properties of the filesystem that
//   holds the lock directory: a directory renamed to a new name moves with
//   its contents, a rename onto a non-empty directory is refused, a name
//   renamed away cannot be renamed again (ENOENT), O_EXCL creates are
//   exclusive, token-long names are kept as given, and fsync works. Two
//   mounts of one network share must also see each other's renames and
//   replaced files promptly. check_directory_health() tries each property
//   in a scratch directory inside `dir`, with the library's own system
//   calls, so what it finds is what the lock will meet there, and returns
//   one finding per property: its verdict, what was found, and the fix.
//   `tokenlock doctor` prints these findings; docs/network-filesystems.md
//   says what each filesystem needs.
//
// Calling sequence
//     tokenlock::doctor_options o;
//     o.peer = "/mnt/b/locks";   // optional: the same directory, mounted elsewhere
//     o.on_finding = [](const tokenlock::doctor_finding& f) { show(f); };
//     tokenlock::doctor_report r = tokenlock::check_directory_health("/mnt/a/locks", o);
//     if (r.failed() > 0) ...
//   The findings come in a fixed order: the twelve local properties
//   ("rename of a directory to a new name" ... "clock offset"), then
//   "another mount" (skip without a peer; ok when the peer shows the
//   scratch directory, followed by the three peer properties), then
//   "cleanup" only when the scratch directory could not be removed.
//   Verdicts: ok, warn (works, at a cost the text names), fail (the text
//   says what goes wrong and the fix how to avoid it), skip (not checked).
//   The scratch directory ".tokenlock-doctor.<16 hex digits>" is removed
//   before the call returns, after failed checks and after a stop too.
//   The peer checks poll the peer's view every 10 ms for up to peer_wait.
//
// Errors
//   Throwing and error_code& forms as everywhere in tokenlock (errors.hpp);
//   every message names the directory, the step, the cause and the fix.
//   - std::errc::no_such_file_or_directory, not_a_directory: `dir` (named
//     DIR in the message) or the peer (--peer) does not exist or is not a
//     directory. Nothing was made.
//   - another errno: `dir` could not be looked at, or the scratch directory
//     not created in it (EACCES: no write permission). Nothing was made.
//   - errc::bad_argument: the peer did not show the scratch directory
//     within peer_wait: it is not the same directory of the share, or its
//     mount caches names longer than that (the message gives the cache
//     settings). In the error_code form the report still holds the local
//     findings, and the scratch directory was removed.
//   A property that fails is a finding, not an error: the call succeeds.
//
// Thread safety
//   Safe to call from any thread, on different directories or the same one
//   (each call works in its own scratch directory). The callbacks run on
//   the calling thread, between checks.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

namespace tokenlock {

enum class doctor_verdict { ok, warn, fail, skip };

// "ok", "warn", "fail", "skip".
const char* doctor_verdict_name(doctor_verdict v) noexcept;

struct doctor_finding {
  doctor_verdict verdict = doctor_verdict::ok;
  std::string property;  // "rename of a vanished name", "wait board", ...
  std::string text;      // what was found: one sentence, no final period
  std::string fix;       // how to make a failure or warning go away; may be empty
};

struct doctor_options {
  // The same directory of the share as `dir`, mounted elsewhere (another
  // client, or a second mount on this host); empty: no peer checks.
  std::string peer;
  // How long the peer may take to show a change made through `dir`.
  std::chrono::microseconds peer_wait = std::chrono::seconds(30);
  // Called with each finding as soon as it is made: the peer checks may
  // take their time, and a caller can show what was found so far.
  std::function<void(const doctor_finding&)> on_finding;
  // Asked between checks and while waiting for the peer: true ends the
  // checks early (the scratch directory is still removed, and no error is
  // reported for the checks not run). For a signal handler's flag.
  std::function<bool()> stop;
};

struct doctor_report {
  std::string scratch;     // the scratch directory's path (removed again)
  std::string filesystem;  // dir's filesystem type ("ext4", "fuse.sshfs"); empty when unknown
  std::vector<doctor_finding> findings;
  // The findings with verdict fail.
  int failed() const noexcept;
};

// Checks `dir` (and options.peer) as described above. Trailing slashes are
// the caller's to strip: `dir` is used as given in paths and messages.
doctor_report check_directory_health(const std::string& dir, const doctor_options& options = {});
doctor_report check_directory_health(const std::string& dir, const doctor_options& options,
                                     std::error_code& ec) noexcept;

}  // namespace tokenlock
