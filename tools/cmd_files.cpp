// write and incr: atomic replacement and counters from the shell.
#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>

#include <poll.h>
#include <unistd.h>

#include "cli.hpp"
#include "commands.hpp"
#include "tokenlock/tokenlock.hpp"

namespace tokenlock::cli {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void on_interrupt(int sig) { g_interrupted = sig; }

durability parse_sync(const std::string& s) {
  if (s == "none") return durability::none;
  if (s == "file") return durability::file;
  if (s == "file_and_dir") return durability::file_and_dir;
  throw po::error("--sync takes none, file or file_and_dir");
}

void add_file_options(po::options_description& d) {
  d.add_options()("lock", po::value<std::string>()->value_name("LOCKDIR"),
                  "hold this lock while writing")(
      "sync", po::value<std::string>()->value_name("LEVEL")->default_value("file_and_dir"),
      "durability: none, file or file_and_dir");
}

po::options_description file_argument() {
  po::options_description hidden;
  hidden.add_options()("file", po::value<std::string>()->required(), "");
  return hidden;
}

}  // namespace

int cmd_write(const args& a) {
  po::options_description d(
      "Usage: tokenlock write [--lock LOCKDIR] [--sync none|file|file_and_dir] [--mode OCTAL]\n"
      "                       [--follow-symlinks] [--allow-empty] FILE\n\n"
      "Replaces FILE with standard input, atomically: FILE changes only once all input\n"
      "has been read, so an interrupted or killed writer leaves it as it was. Empty\n"
      "input is refused (exit 65), since it usually means the producer failed.\n\nOptions");
  add_file_options(d);
  d.add_options()("mode", po::value<std::string>()->value_name("OCTAL"),
                  "mode of a new FILE (default 0644 minus the umask)")(
      "follow-symlinks", "if FILE is a symbolic link, replace the file it points to")(
      "allow-empty", "accept empty input");
  po::positional_options_description pos;
  pos.add("file", 1);
  write_options wo;
  std::string file, lock_dir;
  bool allow_empty = false;
  try {
    parsed p = parse(a, d, file_argument(), pos);
    if (p.help) {
      std::cout << d << "\n";
      return exit_code::ok;
    }
    file = p.vars["file"].as<std::string>();
    wo.sync = parse_sync(p.vars["sync"].as<std::string>());
    if (p.vars.count("mode")) {
      const std::string m = p.vars["mode"].as<std::string>();
      char* end = nullptr;
      unsigned long v = std::strtoul(m.c_str(), &end, 8);
      if (m.empty() || *end != '\0' || v > 07777) throw po::error("--mode takes an octal mode such as 0640");
      wo.mode = static_cast<unsigned>(v);
    }
    if (p.vars.count("follow-symlinks")) wo.symlinks = symlink_policy::follow;
    allow_empty = p.vars.count("allow-empty") > 0;
    if (p.vars.count("lock")) lock_dir = p.vars["lock"].as<std::string>();
  } catch (const po::error& e) {
    return usage_error("write", e.what());
  }

  // The interrupting signals stay blocked except while waiting for input
  // (ppoll unblocks them atomically), so one that arrives mid-write is seen
  // at the next wait instead of being missed before a blocking read.
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigset_t blocked, waiting;
  sigemptyset(&blocked);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) {
    ::sigaction(s, &sa, nullptr);
    sigaddset(&blocked, s);
  }
  ::sigprocmask(SIG_BLOCK, &blocked, &waiting);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigdelset(&waiting, s);

  std::error_code ec;
  // Without a lock, stream into the temporary file; with one, read
  // everything first so that the lock is not held while the producer works.
  std::optional<atomic_file> out;
  if (lock_dir.empty()) {
    out.emplace(file, wo, ec);
    if (ec) return report(ec, last_error_message());
  }
  std::string buffered;
  std::size_t total = 0;
  char buf[64 * 1024];
  for (;;) {
    pollfd in{0, POLLIN, 0};
    ssize_t n = -1;
    errno = EINTR;
    if (!g_interrupted && ::ppoll(&in, 1, nullptr, &waiting) >= 0) n = ::read(0, buf, sizeof buf);
    if (g_interrupted) {
      if (out) out->rollback();
      std::cerr << "tokenlock write: interrupted by signal " << g_interrupted << "; " << file
                << " was left as it was\n";
      return 128 + g_interrupted;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      if (out) out->rollback();
      return report(std::error_code(e, std::generic_category()),
                    "tokenlock: write " + file + ": cannot read standard input: " + std::strerror(e) +
                        "; the file was left as it was");
    }
    if (n == 0) break;
    total += static_cast<std::size_t>(n);
    if (out) {
      out->write(std::string_view(buf, static_cast<std::size_t>(n)), ec);
      if (ec) return report(ec, last_error_message());
    } else {
      buffered.append(buf, static_cast<std::size_t>(n));
    }
  }
  if (total == 0 && !allow_empty) {
    if (out) out->rollback();
    std::cerr << "tokenlock write: standard input was empty; " << file
              << " was left as it was (use --allow-empty to write an empty file)\n";
    return exit_code::data;
  }
  if (out) {
    out->commit(ec);
  } else {
    update_options uo;
    uo.write = wo;
    update_file(file, rename_lock(lock_dir), [&](const std::optional<std::string>&) { return buffered; },
                uo, ec);
  }
  if (ec) return report(ec, last_error_message());
  return exit_code::ok;
}

int cmd_incr(const args& a) {
  po::options_description d(
      "Usage: tokenlock incr [--lock LOCKDIR] [--by N] [--sync none|file|file_and_dir] FILE\n\n"
      "Adds N (default 1) to the counter in FILE under its lock (default FILE.lock) and\n"
      "prints the new value. FILE holds one unsigned decimal and a newline; a missing\n"
      "FILE counts as 0. Anything else is refused (exit 65) and left as it is.\n\nOptions");
  add_file_options(d);
  d.add_options()("by", po::value<std::string>()->value_name("N")->default_value("1"),
                  "the amount to add (0 reads the counter under the lock)");
  po::positional_options_description pos;
  pos.add("file", 1);
  update_options uo;
  std::string file, lock_dir;
  std::uint64_t by = 1;
  try {
    parsed p = parse(a, d, file_argument(), pos);
    if (p.help) {
      std::cout << d << "\n";
      return exit_code::ok;
    }
    file = p.vars["file"].as<std::string>();
    uo.write.sync = parse_sync(p.vars["sync"].as<std::string>());
    lock_dir = p.vars.count("lock") ? p.vars["lock"].as<std::string>() : file + ".lock";
    const std::string n = p.vars["by"].as<std::string>();
    char* end = nullptr;
    errno = 0;
    by = std::strtoull(n.c_str(), &end, 10);
    if (n.empty() || n[0] == '-' || *end != '\0' || errno == ERANGE)
      throw po::error("--by takes an unsigned decimal number");
  } catch (const po::error& e) {
    return usage_error("incr", e.what());
  }
  std::error_code ec;
  const std::uint64_t value = increment_counter(file, rename_lock(lock_dir), by, uo, ec);
  if (ec) return report(ec, last_error_message());
  std::cout << value << std::endl;
  return exit_code::ok;
}

}  // namespace tokenlock::cli
