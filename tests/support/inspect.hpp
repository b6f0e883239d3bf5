// Looking at lock directories and files from the outside, for tests.
#pragma once

#include <string>
#include <vector>

#include <boost/filesystem/path.hpp>

namespace tokenlock::testing {

// Names in `dir`, sorted.
std::vector<std::string> entries(const boost::filesystem::path& dir);
// The pid in the lock's held token, or 0 when it is free (or between names).
int holder_pid(const boost::filesystem::path& lock_dir);
// The whole file ("" when missing).
std::string slurp(const boost::filesystem::path& file);

}  // namespace tokenlock::testing
