#include "temp_dir.hpp"

#include <algorithm>
#include <cstdio>

namespace fs = boost::filesystem;

namespace tokenlock::testing {

temp_dir::temp_dir() {
  path_ = fs::temp_directory_path() / fs::unique_path("tokenlock-test-%%%%-%%%%-%%%%");
  fs::create_directories(path_);
}

temp_dir::~temp_dir() {
  boost::system::error_code ec;
  // Tests may leave read-only or sticky directories behind on failure.
  for (fs::recursive_directory_iterator it(path_, ec), end; !ec && it != end; it.increment(ec))
    fs::permissions(it->path(), fs::owner_all | fs::add_perms, ec);
  fs::remove_all(path_, ec);
}

std::vector<std::string> snapshot(const fs::path& root) {
  std::vector<std::string> out;
  boost::system::error_code ec;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    auto st = it->symlink_status();
    char mode[8];
    std::snprintf(mode, sizeof mode, " %04o", static_cast<unsigned>(st.permissions()) & 07777);
    out.push_back(fs::relative(it->path(), root).string() +
                  (st.type() == fs::directory_file ? "/" : "") + mode);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace tokenlock::testing
