#include "inspect.hpp"

#include <algorithm>

#include <boost/filesystem.hpp>
#include <boost/filesystem/fstream.hpp>

#include "token_name.hpp"

namespace fs = boost::filesystem;

namespace tokenlock::testing {

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  boost::system::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    out.push_back(it->path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

int holder_pid(const fs::path& lock_dir) {
  for (const auto& name : entries(lock_dir)) {
    detail::held_token t;
    if (detail::classify_name(name, &t) == detail::name_kind::held) return t.pid;
  }
  return 0;
}

std::string slurp(const fs::path& file) {
  fs::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace tokenlock::testing
