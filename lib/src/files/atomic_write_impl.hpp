// The public atomic-write functions (tokenlock/atomic_write.hpp) over a
// given OS seam; atomic_write.cpp defines them, on file_writer.hpp's steps.
// For the updaters and the tests.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <boost/filesystem/path.hpp>

#include "core/failure.hpp"
#include "posix/os.hpp"
#include "tokenlock/atomic_write.hpp"
#include "tokenlock/update.hpp"

namespace tokenlock::detail {

// atomic_write() over a given OS (the public function uses the system's).
failure atomic_write_impl(os& sys, const boost::filesystem::path& target, std::string_view data,
                          const write_options& options);
// What a read accepts.
struct read_rules {
  // The most bytes read; a larger file fails before its first byte is read.
  std::uint64_t limit = default_read_limit;
  // Follow a symbolic link at the path, checking each hop (check_link).
  // Off, a link is refused (ELOOP): for a caller that will replace the
  // link with a file, whose contents are then not the link's destination's.
  bool follow = true;
  // Over the limit is corrupt_data (the file cannot be a counter), not EFBIG.
  bool counter = false;
  // How the limit is called in the message's fix.
  const char* limit_name = "the read limit";
};

// A counter is one decimal of at most 20 digits and a newline: anything
// much longer is refused unread.
constexpr std::uint64_t counter_read_limit = 64;

// The read of update_file and increment_counter, under the lock. The target
// was resolved first (resolve_target: links followed when the caller asked,
// and checked), so a link found at its path now is one that the commit will
// replace, or one swapped in since: its destination is not read.
inline read_rules update_read_rules(const update_options& options) {
  read_rules rules;
  rules.limit = options.read_limit;
  rules.follow = false;
  rules.limit_name = "update_options::read_limit";
  return rules;
}

// increment_counter's, under the lock: a counter's size cap, so that an
// oversized file is refused without being read while the lock is held.
inline read_rules counter_update_rules(const update_options& options) {
  read_rules rules = update_read_rules(options);
  if (rules.limit > counter_read_limit) rules.limit = counter_read_limit;
  rules.counter = true;
  return rules;
}

// read_counter's: as increment_counter reads (a link is not followed, since
// increment_counter replaces it), with a counter's size cap.
inline read_rules counter_rules() {
  read_rules rules;
  rules.limit = counter_read_limit;
  rules.follow = false;
  rules.counter = true;
  return rules;
}

// Reads the whole regular file; a missing one gives std::nullopt. A FIFO,
// device, socket or directory is refused after the open (which cannot
// block) and before any read. With `keep`, the file read stays open and its
// descriptor goes to *keep (-1 when there was none) for the caller to close.
failure read_file_impl(os& sys, const std::string& path, std::optional<std::string>& out,
                       int* keep = nullptr, const read_rules& rules = {});
// Removes temporary files in `dir` older than `older_than`; with a
// non-empty `target_name`, only that target's.
failure sweep_impl(os& sys, const std::string& dir, std::chrono::microseconds older_than,
                   std::size_t& removed, const std::string& target_name = {});

// The library's way into atomic_file, without widening its public interface.
struct file_access {
  // A started write: its temporary file is open beside `target`. Throws as
  // the public constructor does.
  static std::unique_ptr<atomic_file::impl> start(const boost::filesystem::path& target,
                                                  const write_options& options,
                                                  std::shared_ptr<os> sys);
  // An atomic_file whose system calls go through `sys` (tests: with_os.hpp).
  static atomic_file with_os(const boost::filesystem::path& target, const write_options& options,
                             std::shared_ptr<os> sys);
};

}  // namespace tokenlock::detail
