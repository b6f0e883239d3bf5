#include "inspect.hpp"

#include <algorithm>
#include <sstream>

#include <boost/filesystem.hpp>
#include <boost/filesystem/fstream.hpp>

#include "files/file_writer.hpp"
#include "lockdir/token_name.hpp"

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

void spit(const fs::path& file, const std::string& contents) {
  fs::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << contents;
}

std::string strip(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::vector<std::string> temp_files_below(const fs::path& root) {
  std::vector<std::string> out;
  for (fs::recursive_directory_iterator it(root), end; it != end; ++it)
    if (detail::is_temp_name(it->path().filename().string())) out.push_back(it->path().string());
  return out;
}

}  // namespace tokenlock::testing
