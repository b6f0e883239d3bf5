// Shared parts of the tokenlock command: exit codes, option parsing,
// error reporting.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <boost/program_options.hpp>

#include "tokenlock/clock.hpp"
#include "tokenlock/open_lock.hpp"
#include "tokenlock/clock_judgement.hpp"
#include "tokenlock/rename_lock.hpp"

namespace tokenlock::cli {

// Exit codes (docs/tokenlock.1.md). 0, 1 and the command's own status
// follow flock(1); the rest are sysexits.h values.
namespace exit_code {
constexpr int ok = 0;
constexpr int busy = 1;          // busy or timed out (run/acquire: -E changes it)
constexpr int check_failed = 1;  // doctor: a property failed
constexpr int lost = 3;          // the token is not held any more: taken over, or another lock's
constexpr int usage = 64;        // EX_USAGE: bad command line, any malformed argument
constexpr int data = 65;         // EX_DATAERR: corrupt counter, an overflow, empty input
constexpr int no_input = 66;     // EX_NOINPUT: a file or directory that must exist does not
constexpr int unavailable = 69;  // EX_UNAVAILABLE: the lock directory needs a human (corrupt), or
                                 // the lock server cannot be reached or refuses (--redis, --etcd)
constexpr int software = 70;     // EX_SOFTWARE: internal error
constexpr int os_error = 71;     // EX_OSERR: any other system error
constexpr int cant_create = 73;  // EX_CANTCREAT: no space, quota, read-only, not a file
constexpr int io_error = 74;     // EX_IOERR: I/O error, directory sync failed
constexpr int temp_fail = 75;    // EX_TEMPFAIL: the filesystem served a stale version; retry
constexpr int no_perm = 77;      // EX_NOPERM: permission denied
constexpr int cannot_execute = 126;
constexpr int not_found = 127;
}  // namespace exit_code

// The exit code for a failure; `busy_code` is what busy/timed_out map to.
// One rule for arguments: errc::bad_argument, which the library gives for
// an argument it cannot use (a malformed token or URL, an empty path), is
// a usage error, as is every value the command line parser refuses.
int exit_code_for(std::error_code ec, int busy_code = exit_code::busy);

// How the command reports a failure on stderr: as text only, or with a
// JSON line after it (--errors=json, TOKENLOCK_ERRORS=json), which is then
// the last line on stderr:
//   {"error": NAME, "errno": N, "message": "..."}
// NAME is tokenlock::error_name()'s, N the errno of a "system" error (else
// 0), and the message the one printed before it.
enum class error_format { text, json };
void set_error_format(error_format f);
// "json" or "text" (or "" for text); std::nullopt for anything else.
std::optional<error_format> parse_error_format(std::string_view text);

// Remembers the failure the command is about to end with, as printed
// (report and usage_error call it; so do the commands that print a
// failure of their own).
void note_failure(std::error_code ec, const std::string& printed);
// The same for a failure that has no error_code: an exception the command
// did not expect is "system" with errno 0, as in the C interface.
void note_failure(const char* name, int errno_value, const std::string& printed);
// In json mode, prints the JSON line of the failure noted last, if one was
// (main calls it once the command has ended).
void print_noted_failure();
// The JSON line itself, without its newline.
std::string error_json(const char* name, int errno_value, const std::string& message);

// `text` with every control byte and every byte from 0x7f up written as
// \xNN: names that come from a filesystem or a server may hold escape
// sequences and newlines, and a message must not pass them to a terminal
// or forge lines in a log.
std::string escaped(std::string_view text);

// Prints "tokenlock: <message>" (the library's messages already start with
// "tokenlock:") to stderr, escaped, and returns the exit code for `ec`.
int report(std::error_code ec, const std::string& message, int busy_code = exit_code::busy);

// A bad command line: prints the message and "Try 'tokenlock CMD --help'".
int usage_error(const std::string& command, const std::string& message);

namespace po = boost::program_options;

// Runs a subcommand: parses `args` (after its name) with the `visible`
// options (shown by --help, which is added) and the required positional
// arguments named in `positional`, prints the help when asked, and calls
// `body` with the parsed values. A po::error from parsing or from `body`
// (which validates values with it) is a usage error, exit status 64.
int with_command_line(const char* command, const std::vector<std::string>& args,
                      po::options_description& visible, const std::vector<std::string>& positional,
                      const std::function<int(const po::variables_map&)>& body);

// -w SECS, -n and -E CODE, for the commands that wait for a lock.
void add_wait_options(po::options_description& d);
// Applies them to `o` (wait forever when neither -w nor -n is given) and
// returns the exit status for a busy lock. Throws po::error on bad values.
int apply_wait(const po::variables_map& v, lock_options& o);
// Only -w and -n (write and incr, which have no -E): `if_not_given` when
// neither is.
void apply_wait_budget(const po::variables_map& v, lock_options& o,
                       std::chrono::milliseconds if_not_given);

// --lease SECS with `help`; `default_secs` 0: no default (the command
// chooses one later). Read it with lease_option.
void add_lease_option(po::options_description& d, const char* help, double default_secs = 0);

// The protocol's bound on a lease (docs/protocol.md): every process judges
// a token whose lease ends further ahead implausible and takes it over, so
// a longer lease would let a second holder in.
inline const std::chrono::milliseconds protocol_max_lease = lock_options{}.max_lease;
// A lease of `secs` seconds: more than zero once rounded to milliseconds,
// and at most protocol_max_lease. Throws po::error (exit 64) otherwise,
// also for NaN and infinity.
std::chrono::milliseconds lease_option(double secs);

// --dir-mode MODE, for every command that uses a lock directory.
void add_dir_mode_option(po::options_description& d);
// Why `mode` cannot be the mode of a lock directory, or "" when it can: it
// must give its owner read, write and search permission, and must not be
// writable by others or sticky (docs/security.md).
std::string dir_mode_problem(unsigned mode);
// Sets o.dir_mode from --dir-mode, else from TOKENLOCK_DIR_MODE when that
// is set and not empty; leaves it otherwise. Throws po::error for a value
// that is not an octal mode or that dir_mode_problem refuses.
void apply_dir_mode(const po::variables_map& v, lock_options& o);
// The options of a lock directory: --legacy-timeout and the directory mode
// applied (the defaults otherwise).
lock_options directory_options(const po::variables_map& v, lock_options o = {});

// -s/--shared, -x/--exclusive and --slots N (flock(1)'s habits), and how
// they set open_options::mode and slots (a usage error for -x with either).
void add_mode_options(po::options_description& d);
void apply_mode(const po::variables_map& v, open_options& o);

// What to add to a message about FILE when a write failed with EFBIG
// ("" for any other error): the process's file size limit (ulimit -f,
// RLIMIT_FSIZE) is below what the write needs. The command ignores
// SIGXFSZ (ignore_sigxfsz), so such a write fails instead of killing it.
std::string file_too_large_hint(std::error_code ec, const std::string& file,
                                const std::string& message);

// Ignores SIGXFSZ for this process, remembering the disposition it had;
// restore_sigxfsz (in run's child, before exec) gives that back to CMD.
void ignore_sigxfsz();
void restore_sigxfsz();

// --legacy-timeout SECS, for the commands that lock a directory: the age at
// which a legacy "lockfile<seconds>" token is stale (lock_options).
void add_legacy_option(po::options_description& d);
// A lock_options with it applied (the defaults otherwise).
lock_options legacy_applied(const po::variables_map& v, lock_options o = {});


// `run`'s arguments, split by hand at LOCKDIR (flock's syntax) so that the
// command's own arguments are never parsed: options (each option that takes
// a value keeps it), LOCKDIR, then the command, after one optional "--".
// `dir` is empty when the arguments end before LOCKDIR.
struct run_arguments {
  std::vector<std::string> options;
  std::string dir;
  std::vector<std::string> command;
};
// run's options table (with its usage text), here so that the split below
// and its fuzzer see the same table as the command.
po::options_description run_options();
// `d` is run's options table: it says which options take a value.
run_arguments split_run_arguments(const std::vector<std::string>& args,
                                  const po::options_description& d);

// "0640": octal digits only, at most 07777. std::nullopt otherwise.
std::optional<unsigned> parse_mode(const std::string& s);
// An unsigned decimal that fits 64 bits, digits only. std::nullopt otherwise.
std::optional<std::uint64_t> parse_unsigned(const std::string& s);

// "within", "beyond", "unclear": the clock's verdict as status --json
// names it.
const char* clock_verdict_name(clock_verdict v) noexcept;

// SECS as given to -w, --lease: a non-negative number of seconds, possibly
// fractional. Throws po::error otherwise.
std::chrono::milliseconds seconds_option(const std::string& name, double secs, bool allow_zero);

}  // namespace tokenlock::cli
