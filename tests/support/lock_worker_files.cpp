// The worker's modes on files: rewrite, update, append, incr and
// stall-update (their manual is at the top of lock_worker.cpp).
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

#include <unistd.h>

#include "files/update_impl.hpp"
#include "lock_worker.hpp"
#include "tokenlock/tokenlock.hpp"
#include "versioned_content.hpp"

using namespace std::chrono_literals;

namespace tokenlock::testing::worker {
namespace {

tokenlock::durability parse_sync(const std::string& s) {
  if (s == "none") return tokenlock::durability::none;
  if (s == "file") return tokenlock::durability::file;
  if (s == "file_and_dir") return tokenlock::durability::file_and_dir;
  die("SYNC must be none, file or file_and_dir, not " + s);
}

// A lease of its own, no skew allowance (a lock directory's takeover comes
// when the lease ends), and a wait of 30 s.
tokenlock::open_options lease_settings(const std::string& lease_ms) {
  return lock_settings(30s, millis(lease_ms), 0ms);
}

// Prints `word` (and the library's message on stderr) and exits with
// `status`: how incr reports a refusal that wrote nothing.
[[noreturn]] void refused(const char* word, int status, bool explain) {
  if (explain) std::cerr << "lock_worker: " << tokenlock::last_error_message() << std::endl;
  std::cout << word << std::endl;
  std::exit(status);
}

}  // namespace

int rewrite(const mode_args& m) {
  const std::size_t size = std::strtoull(m.a[1].c_str(), nullptr, 10);
  tokenlock::write_options o;
  o.sync = parse_sync(m.a[2]);
  const std::uint64_t base = static_cast<std::uint64_t>(::getpid()) << 24;
  for (std::uint64_t i = 0;; ++i) {
    tokenlock::atomic_write(m.a[0], versioned_content(base + i, size), o);
    if (i == 0) std::cout << "R" << std::endl;
  }
}

int stall_update(const mode_args& m) {
  std::shared_ptr<fake_os> sys = recording_os();
  const std::string temp_marker =
      "/." + boost::filesystem::path(m.a[0]).filename().string() + ".tmp.";
  sys->when(op::rename, temp_marker, [] {
    std::cout << "T" << std::endl;
    std::raise(SIGSTOP);
  });
  std::unique_ptr<tokenlock::lock> lock = open_through(m.spec, lease_settings(m.a[1]), sys);
  const auto* dir = dynamic_cast<const tokenlock::rename_lock*>(lock.get());
  if (!dir) die("stall-update: " + lock->spec() + " is no lock directory, whose seam it stops in");
  const std::string value = m.a[2] + "\n";
  tokenlock::update_result r;
  const tokenlock::detail::failure f = tokenlock::detail::update_impl(
      *sys, m.a[0], *dir,
      [&](const std::optional<std::string>&, std::string& out) -> tokenlock::detail::failure {
        out = value;
        return {};
      },
      {}, r);
  if (f) tokenlock::detail::set_last_error_message(f.message);
  report("committed", f.code);
  return 0;
}

int update(const mode_args& m) {
  std::unique_ptr<tokenlock::lock> lock =
      tokenlock::open_lock(m.spec, lock_settings(30s, 60s, 0ms));
  const std::string value = m.a[1] + "\n";
  const auto set = [&](const std::optional<std::string>&) { return value; };
  tokenlock::update_file(m.a[0], *lock, set);
  std::cout << "committed" << std::endl;
  return 0;
}

int append(const mode_args& m) {
  std::unique_ptr<tokenlock::lock> lock = tokenlock::open_lock(m.spec, lease_settings(m.a[1]));
  tokenlock::update_options uo;
  // The fsync of the temporary file widens the window between reading and
  // committing, where a stop makes a stale commit possible.
  uo.write.sync = tokenlock::durability::file;
  const int count = std::atoi(m.a[3].c_str());
  const std::string stop_file = m.a[0] + ".stop";
  int lost = 0;
  for (int i = 0; i < count && ::access(stop_file.c_str(), F_OK) != 0; ++i) {
    const std::string line = m.a[2] + "." + std::to_string(i);
    const auto add = [&](const std::optional<std::string>& cur) {
      return cur.value_or("") + line + "\n";
    };
    std::error_code ec;
    tokenlock::update_file(m.a[0], *lock, add, uo, ec);
    if (!ec)
      append_line(m.a[4], line);
    else if (ec == tokenlock::errc::lock_lost)
      ++lost;
    else
      die(tokenlock::last_error_message());
  }
  std::cout << "lost " << lost << std::endl;
  return 0;
}

int incr(const mode_args& m) {
  std::unique_ptr<tokenlock::lock> lock = tokenlock::open_lock(m.spec, lock_settings(120s));
  const int count = std::atoi(m.a[1].c_str());
  wait_for_start();
  for (int i = 0; i < count; ++i) {
    std::error_code ec;
    const std::uint64_t v = tokenlock::increment_counter(m.a[0], *lock, 1, {}, ec);
    if (ec == tokenlock::errc::corrupt_data) refused("corrupt", 4, false);
    if (ec == tokenlock::errc::stale_data) refused("stale", 5, true);
    if (ec == tokenlock::errc::lock_lost) refused("lost", 6, true);
    if (ec) die(tokenlock::last_error_message());
    if (m.a.size() > 2)
      append_line(m.a[2], std::to_string(v));
    else
      std::cout << v << "\n";
  }
  std::cout << "done" << std::endl;
  return 0;
}

}  // namespace tokenlock::testing::worker
