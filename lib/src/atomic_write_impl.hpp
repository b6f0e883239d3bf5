// The public atomic-write functions (tokenlock/atomic_write.hpp) over a
// given OS seam; atomic_write.cpp defines them, on file_writer.hpp's steps.
// For the updaters and the tests.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <boost/filesystem/path.hpp>

#include "failure.hpp"
#include "posix/os.hpp"
#include "tokenlock/atomic_write.hpp"

namespace tokenlock::detail {

// atomic_write() over a given OS (the public function uses the system's).
failure atomic_write_impl(os& sys, const boost::filesystem::path& target, std::string_view data,
                          const write_options& options);
// Reads the whole file; a missing one gives std::nullopt. With `keep`,
// the file read stays open and its descriptor goes to *keep (-1 when there
// was none) for the caller to close.
failure read_file_impl(os& sys, const std::string& path, std::optional<std::string>& out,
                       int* keep = nullptr);
// Removes temporary files in `dir` older than `older_than`; with a
// non-empty `target_name`, only that target's.
failure sweep_impl(os& sys, const std::string& dir, std::chrono::microseconds older_than,
                   std::size_t& removed, const std::string& target_name = {});

}  // namespace tokenlock::detail
