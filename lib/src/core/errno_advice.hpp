// The one table of what an errno means to a user of tokenlock: its symbol
// (what the man pages and the protocol speak of) and how to get past it,
// which depends on what was being done when the call failed. The lock, the
// atomic writes, the clock estimate and the doctor read their advice here,
// so that one errno gets one explanation per context wherever it shows.
#pragma once

#include <string>
#include <system_error>

namespace tokenlock::detail {

// What was being done: the fix for EACCES in a lock directory is a group
// and a mode, for a clock probe another directory, for the doctor another
// user.
enum class errno_context {
  write_file,      // an atomic write of a data file
  lock_directory,  // a step of the lock in its lock directory
  clock_probe,     // estimate_clock_offset's probe file
  doctor,          // a step of the doctor's checks
};

// "ENOTEMPTY", or nullptr for an errno the table does not hold (and for
// codes of other categories, whose values are no errno).
const char* errno_name(std::error_code ec) noexcept;

// "ENOTEMPTY (Directory not empty)": the symbol and the text people search
// for; "errno 123 (...)" for an errno the table does not hold.
std::string errno_cause(std::error_code ec);

// How to get past `ec` in `context`, with "{dir}" in the advice replaced by
// `dir` and "{uid}" by `uid`; empty when the table has no advice for it.
std::string errno_fix(std::error_code ec, errno_context context, const std::string& dir = {},
                      const std::string& uid = {});

}  // namespace tokenlock::detail
