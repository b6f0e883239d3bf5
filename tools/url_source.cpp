#include "url_source.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.hpp"

namespace tokenlock::cli {
namespace {

constexpr std::size_t url_file_limit = 8192;

[[noreturn]] void refuse(const char* option, const std::string& what) {
  throw po::error(std::string(option) + " " + what);
}

std::string octal(unsigned mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", mode);
  return buf;
}

// Why the open file `st` may not hold a secret; empty when it may.
std::string distrust(const struct stat& st) {
  if (!S_ISREG(st.st_mode)) return "is not a regular file";
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    return "belongs to uid " + std::to_string(st.st_uid) +
           ", who could change the server it names; use a file of your own";
  if (st.st_mode & 077)
    return "may be read or written by other users (mode " + octal(st.st_mode & 07777) +
           "); run chmod 600 on it";
  if (static_cast<std::size_t>(st.st_size) > url_file_limit)
    return "is larger than " + std::to_string(url_file_limit) + " bytes; it should hold one URL";
  return {};
}

std::string first_line(int fd) {
  std::string text(url_file_limit + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, &text[got], text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  text.resize(got);
  const std::size_t end = text.find_first_of("\r\n");
  return end == std::string::npos ? text : text.substr(0, end);
}

std::string url_from_file(const std::string& path, const char* option) {
  const std::string shown = "file:" + path;
  // O_NONBLOCK: a FIFO planted there is refused by fstat, not waited on.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    refuse(option, shown + ": cannot open it: " + std::strerror(errno) +
                       (errno == ELOOP ? " (a symbolic link is not followed; name the file)" : ""));
  struct stat st {};
  std::string why = ::fstat(fd, &st) != 0 ? std::string(std::strerror(errno)) : distrust(st);
  std::string url = why.empty() ? first_line(fd) : std::string();
  ::close(fd);
  if (!why.empty()) refuse(option, shown + ": refusing it: it " + why);
  if (url.empty()) refuse(option, shown + ": its first line is empty; put the URL there");
  return url;
}

}  // namespace

std::string url_from_source(const std::string& given, const char* option) {
  if (given.rfind("env:", 0) == 0) {
    const std::string var = given.substr(4);
    const char* value = var.empty() ? nullptr : std::getenv(var.c_str());
    if (!value || !*value)
      refuse(option, given + ": the environment variable " + (var.empty() ? "(none named)" : var) +
                         " is not set or empty; export it with the URL");
    return value;
  }
  if (given.rfind("file:", 0) == 0) return url_from_file(given.substr(5), option);
  return given;
}

}  // namespace tokenlock::cli
