// A fresh directory per test, removed afterwards, and a snapshot of a tree
// so that failure-path tests can show that nothing changed.
#pragma once

#include <string>
#include <vector>

#include <boost/filesystem.hpp>

namespace tokenlock::testing {

class temp_dir {
 public:
  temp_dir();
  ~temp_dir();
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const boost::filesystem::path& path() const { return path_; }
  boost::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  boost::filesystem::path path_;
};

// Every entry below `root`, relative, with a type mark ("/" for directories)
// and the mode, sorted: equal snapshots mean an unchanged tree.
std::vector<std::string> snapshot(const boost::filesystem::path& root);

}  // namespace tokenlock::testing
