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
// Creates or truncates `file` with `contents` (plainly: test set-up).
void spit(const boost::filesystem::path& file, const std::string& contents);
// `s` without trailing newlines and spaces (a command's output line).
std::string strip(std::string s);
// The lines of `text`, without their newlines.
std::vector<std::string> lines_of(const std::string& text);
// Temporary files of atomic writes anywhere below `root`.
std::vector<std::string> temp_files_below(const boost::filesystem::path& root);

}  // namespace tokenlock::testing
