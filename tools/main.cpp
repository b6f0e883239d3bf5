// The tokenlock command: the lock and the atomic updater for scripts, cron
// jobs and CGI programs in any language. docs/tokenlock.1.md is its manual.
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "tokenlock/version.hpp"

namespace {

struct command {
  const char* name;
  int (*run)(const tokenlock::cli::args&);
  const char* summary;
};

const command commands[] = {
    {"run", tokenlock::cli::cmd_run, "run a command while holding the lock"},
    {"acquire", tokenlock::cli::cmd_acquire, "acquire the lock for the calling script; print the token"},
    {"release", tokenlock::cli::cmd_release, "release the lock held with a token"},
    {"refresh", tokenlock::cli::cmd_refresh, "extend the lease of a token; print the new token"},
    {"status", tokenlock::cli::cmd_status, "say who holds the lock"},
    {"break", tokenlock::cli::cmd_break, "take over a stale token and free the lock"},
    {"write", tokenlock::cli::cmd_write, "replace a file with standard input, atomically"},
    {"incr", tokenlock::cli::cmd_incr, "increment a counter file under its lock"},
    {"doctor", tokenlock::cli::cmd_doctor, "check a directory for what tokenlock relies on"},
};

void usage(std::ostream& out) {
  out << "Usage: tokenlock COMMAND [OPTIONS] ...\n\n"
         "File locking and atomic updates that work where flock(2) does not.\n\nCommands:\n";
  for (const auto& c : commands) out << "  " << c.name << std::string(10 - std::strlen(c.name), ' ') << c.summary << "\n";
  out << "\n'tokenlock COMMAND --help' describes each command; tokenlock(1) has the exit codes.\n";
}

}  // namespace

int main(int argc, char** argv) {
  // A write past the file size limit (ulimit -f) then fails with EFBIG, and
  // is reported, its temporary file removed and its lock released, instead
  // of killing the process with a file left behind and the lock held.
  tokenlock::cli::ignore_sigxfsz();
  if (argc < 2) {
    usage(std::cerr);
    return tokenlock::cli::exit_code::usage;
  }
  const std::string first = argv[1];
  if (first == "--help" || first == "-h" || first == "help") {
    usage(std::cout);
    return 0;
  }
  if (first == "--version" || first == "-V") {
    std::cout << "tokenlock " << TOKENLOCK_VERSION << "\n";
    return 0;
  }
  for (const auto& c : commands) {
    if (first != c.name) continue;
    try {
      return c.run(tokenlock::cli::args(argv + 2, argv + argc));
    } catch (const std::exception& e) {
      std::cerr << "tokenlock " << c.name << ": " << tokenlock::cli::escaped(e.what()) << "\n";
      return tokenlock::cli::exit_code::software;
    }
  }
  std::cerr << "tokenlock: unknown command '" << tokenlock::cli::escaped(first) << "'\n";
  usage(std::cerr);
  return tokenlock::cli::exit_code::usage;
}
