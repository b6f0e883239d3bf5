#include "visit_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace tokenlock::testing {
namespace {

struct stay {
  char kind;
  std::string turn;  // "PID I"
};

class judge {
 public:
  judge(visit_report& r, unsigned slots) : r_(r), slots_(slots) {}

  void enter(char kind, const std::string& pid, const std::string& turn, long line) {
    int w = 0, rd = 0, s = 0;
    for (const auto& [p, st] : inside_) (st.kind == 'W' ? w : st.kind == 'R' ? rd : s)++;
    const std::string at = "line " + std::to_string(line) + ": " + kind + " " + turn;
    if (kind == 'W' && !inside_.empty())
      fail(at + " entered beside " + who());
    if (kind == 'R' && w + s > 0) fail(at + " entered beside " + who());
    if (kind == 'S' && w + rd > 0) fail(at + " entered beside " + who());
    if (kind == 'S' && static_cast<unsigned>(s + 1) > slots_)
      fail(at + " entered as slot holder " + std::to_string(s + 1) + " of " +
           std::to_string(slots_) + ": " + who());
    inside_[pid] = stay{kind, turn};
    (kind == 'W' ? r_.writes : kind == 'R' ? r_.reads : r_.slot_turns)++;
    int& most = kind == 'W' ? r_.most_writers : kind == 'R' ? r_.most_readers : r_.most_slots;
    most = std::max(most, (kind == 'W' ? w : kind == 'R' ? rd : s) + 1);
  }
  void leave(const std::string& pid) { inside_.erase(pid); }

 private:
  std::string who() const {
    std::string s;
    for (const auto& [p, st] : inside_) s += std::string(s.empty() ? "" : ", ") + st.kind + " " + st.turn;
    return s;
  }
  void fail(const std::string& what) {
    if (r_.violations.size() < 20) r_.violations.push_back(what);
  }
  visit_report& r_;
  unsigned slots_;
  std::map<std::string, stay> inside_;  // by pid
};

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read the visit log " + path);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  return all;
}

}  // namespace

visit_report check_visit_log(const std::string& path, unsigned slots) {
  const std::vector<std::string> lines = lines_of(path);
  visit_report r;
  std::set<std::string> lost;  // "PID I" of the turns that found the lock lost
  for (const std::string& line : lines)
    if (line.rfind("X ", 0) == 0) lost.insert(line.substr(2));
  r.lost = static_cast<long>(lost.size());
  judge j(r, slots);
  for (std::size_t n = 0; n < lines.size(); ++n) {
    std::istringstream in(lines[n]);
    std::string what, a, pid, i;
    in >> what >> a;
    if (what == "E" || what == "L") {
      in >> pid >> i;
      const std::string turn = pid + " " + i;
      if (what == "L" || lost.count(turn)) j.leave(pid);
      if (what == "E" && !lost.count(turn)) j.enter(a.empty() ? '?' : a[0], pid, turn, n + 1);
    } else if (what == "D" || what == "S") {
      j.leave(a);
    } else if (what == "C") {
      r.committed.push_back(std::stoull(a));
    } else if (what != "X") {
      r.violations.push_back("line " + std::to_string(n + 1) + " unreadable: " + lines[n]);
    }
  }
  return r;
}

void note_in_visit_log(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const std::string s = line + "\n";
  const bool ok = fd >= 0 && ::write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size());
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!ok) throw std::runtime_error("cannot append to " + path + ": " + std::strerror(err));
}

}  // namespace tokenlock::testing
