// The tokenlock command: the lock and the atomic updater for scripts, cron
// jobs and CGI programs in any language. docs/tokenlock.1.md is its manual.
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "tokenlock/errors.hpp"
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
    {"commit", tokenlock::cli::cmd_commit, "replace a file with standard input through a held token"},
    {"incr", tokenlock::cli::cmd_incr, "increment a counter file under its lock"},
    {"doctor", tokenlock::cli::cmd_doctor, "check a directory for what tokenlock relies on"},
};

void usage(std::ostream& out) {
  out << "Usage: tokenlock [--errors=text|json] COMMAND [OPTIONS] ...\n\n"
         "File locking and atomic updates that work where flock(2) does not.\n\nCommands:\n";
  for (const auto& c : commands) out << "  " << c.name << std::string(10 - std::strlen(c.name), ' ') << c.summary << "\n";
  out << "\n'tokenlock COMMAND --help' describes each command; tokenlock(1) has the exit codes.\n"
         "--errors=json (or TOKENLOCK_ERRORS=json) ends a failure's report on stderr with one\n"
         "JSON line: {\"error\": NAME, \"errno\": N, \"message\": TEXT}.\n";
}

// A bad command line before the subcommand: said, noted (for
// --errors=json) and exit 64.
int global_usage_error(const std::string& message) {
  const std::string line = "tokenlock: " + tokenlock::cli::escaped(message);
  std::cerr << line << "\n";
  usage(std::cerr);
  tokenlock::cli::note_failure(tokenlock::make_error_code(tokenlock::errc::bad_argument), line);
  return tokenlock::cli::exit_code::usage;
}

// The error format from TOKENLOCK_ERRORS, then from --errors=FORMAT or
// --errors FORMAT at argv[i] (which it steps past). False when a value is
// neither text nor json.
bool take_error_format(int argc, char** argv, int& i, std::string& problem) {
  using tokenlock::cli::parse_error_format;
  const char* env = std::getenv("TOKENLOCK_ERRORS");
  const auto from_env = parse_error_format(env ? env : "");
  // Set before anything can fail, so that the failure itself is in JSON.
  tokenlock::cli::set_error_format(from_env.value_or(tokenlock::cli::error_format::text));
  if (!from_env) problem = std::string("TOKENLOCK_ERRORS takes text or json, not \"") + env + "\"";
  for (; i < argc; ++i) {
    std::string a = argv[i];
    std::string value;
    if (a.rfind("--errors=", 0) == 0) {
      value = a.substr(9);
    } else if (a == "--errors") {
      if (i + 1 >= argc) {
        problem = "--errors takes text or json";
        return false;
      }
      value = argv[++i];
    } else {
      break;
    }
    const auto f = parse_error_format(value);
    if (!f || value.empty()) {
      problem = "--errors takes text or json, not \"" + value + "\"";
      return false;
    }
    tokenlock::cli::set_error_format(*f);
    problem.clear();  // the option wins over a bad TOKENLOCK_ERRORS
  }
  return problem.empty();
}

int run_command(int argc, char** argv) {
  int i = 1;
  std::string problem;
  if (!take_error_format(argc, argv, i, problem)) return global_usage_error(problem);
  if (i >= argc) {
    usage(std::cerr);
    tokenlock::cli::note_failure(tokenlock::make_error_code(tokenlock::errc::bad_argument),
                                 "tokenlock: no command given");
    return tokenlock::cli::exit_code::usage;
  }
  const std::string first = argv[i];
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
      return c.run(tokenlock::cli::args(argv + i + 1, argv + argc));
    } catch (const std::exception& e) {
      const std::string line = std::string("tokenlock ") + c.name + ": " + tokenlock::cli::escaped(e.what());
      std::cerr << line << "\n";
      // As the C interface reports an exception it did not expect.
      tokenlock::cli::note_failure("system", 0, line);
      return tokenlock::cli::exit_code::software;
    }
  }
  return global_usage_error("unknown command '" + first + "'");
}

}  // namespace

int main(int argc, char** argv) {
  // A write past the file size limit (ulimit -f) then fails with EFBIG, and
  // is reported, its temporary file removed and its lock released, instead
  // of killing the process with a file left behind and the lock held.
  tokenlock::cli::ignore_sigxfsz();
  const int code = run_command(argc, argv);
  // Last, so that it is the last line on stderr (run's CMD has ended).
  if (code != 0) tokenlock::cli::print_noted_failure();
  return code;
}
