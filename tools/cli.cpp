#include "cli.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include <sys/resource.h>

#include "lock_target.hpp"
#include "json_output.hpp"
#include "tokenlock/errors.hpp"

namespace tokenlock::cli {

int exit_code_for(std::error_code ec, int busy_code) {
  if (ec.category() == tokenlock::error_category()) {
    switch (static_cast<errc>(ec.value())) {
      case errc::busy:
      case errc::timed_out: return busy_code;
      case errc::lock_lost: return exit_code::lost;
      case errc::token_missing:
      case errc::lock_corrupt: return exit_code::unavailable;
      case errc::corrupt_data: return exit_code::data;
      case errc::bad_argument: return exit_code::usage;
      case errc::not_owner: return exit_code::software;
      case errc::dir_sync_failed: return exit_code::io_error;
      case errc::not_fenced: return exit_code::cant_create;  // commit: nothing was written
      case errc::stale_data: return exit_code::temp_fail;
      case errc::server_error: return exit_code::unavailable;
      case errc::not_replicated: return exit_code::temp_fail;
      case errc::untrusted: return exit_code::no_perm;
      case errc::backend_unavailable:
      case errc::not_supported: return exit_code::unavailable;
    }
    return exit_code::software;
  }
  switch (ec.value()) {
    case EACCES:
    case EPERM: return exit_code::no_perm;
    case ENOENT: return exit_code::no_input;
    case ENOSPC:
    case EDQUOT:
    case EROFS:
    case EFBIG:
    case EISDIR:
    case ENOTDIR:
    case ENAMETOOLONG: return exit_code::cant_create;
    case EIO: return exit_code::io_error;
    // A lock server (--redis, --etcd) that cannot be reached or does not answer.
    case ECONNREFUSED:
    case ECONNRESET:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ETIMEDOUT:
    case EPROTO: return exit_code::unavailable;
    case EOVERFLOW:
    case ELOOP:   // a symbolic link where the updater refuses one
    case EINVAL: return exit_code::data;
    default: return exit_code::os_error;
  }
}

std::string escaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

namespace {

struct noted {
  std::string name;
  int errno_value = 0;
  std::string printed;
};
error_format g_error_format = error_format::text;
std::optional<noted> g_noted;

int errno_of(std::error_code ec) {
  const bool os = ec.category() == std::generic_category() || ec.category() == std::system_category();
  return os ? ec.value() : 0;
}

}  // namespace

void set_error_format(error_format f) { g_error_format = f; }

std::optional<error_format> parse_error_format(std::string_view text) {
  if (text.empty() || text == "text") return error_format::text;
  if (text == "json") return error_format::json;
  return std::nullopt;
}

void note_failure(std::error_code ec, const std::string& printed) {
  note_failure(error_name(ec), errno_of(ec), printed);
}

void note_failure(const char* name, int errno_value, const std::string& printed) {
  g_noted = noted{name, errno_value, printed};
}

void print_noted_failure() {
  if (g_error_format != error_format::json || !g_noted) return;
  std::cerr << error_json(g_noted->name.c_str(), g_noted->errno_value, g_noted->printed) << "\n";
}

std::string error_json(const char* name, int errno_value, const std::string& message) {
  json line;
  put_text(line, "error", name);
  line["errno"] = errno_value;
  put_text(line, "message", message);
  return spaced_line(line);
}

int report(std::error_code ec, const std::string& message, int busy_code) {
  const std::string line = message.rfind("tokenlock:", 0) == 0
                               ? escaped(message)
                               : "tokenlock: " + escaped(message.empty() ? ec.message() : message);
  std::cerr << line << "\n";
  note_failure(ec, line);
  return exit_code_for(ec, busy_code);
}

int usage_error(const std::string& command, const std::string& message) {
  const std::string line = "tokenlock " + command + ": " + escaped(message);
  std::cerr << line << "\n"
            << "Try 'tokenlock " << command << " --help'.\n";
  note_failure(make_error_code(errc::bad_argument), line);
  return exit_code::usage;
}

int with_command_line(const char* command, const std::vector<std::string>& args,
                      po::options_description& visible, const std::vector<std::string>& positional,
                      const std::function<int(const po::variables_map&)>& body) {
  visible.add_options()("help,h", "show this help and exit");
  po::options_description all;
  all.add(visible);
  po::positional_options_description pos;
  for (const auto& name : positional) {
    all.add_options()(name.c_str(), po::value<std::string>()->required(), "");
    pos.add(name.c_str(), 1);
  }
  try {
    po::variables_map vars;
    po::store(po::command_line_parser(args)
                  .options(all)
                  .positional(pos)
                  .style(po::command_line_style::unix_style)
                  .run(),
              vars);
    if (vars.count("help")) {
      std::cout << visible << "\n";
      return exit_code::ok;
    }
    po::notify(vars);
    return body(vars);
  } catch (const po::error& e) {
    return usage_error(command, e.what());
  }
}

namespace {

// Whether option `s` ("-w", "--lease") takes its value from the next
// argument, as the options table says ("--lease=5" carries its own).
bool takes_value(const po::options_description& d, const std::string& s) {
  if (s.find('=') != std::string::npos) return false;
  // Boost keeps a short name with its dash ("-w"), a long one without.
  const bool is_short = s.size() == 2 && s[0] == '-' && s[1] != '-';
  const po::option_description* o = d.find_nothrow(is_short ? s : s.substr(2), false);
  return o && o->semantic()->max_tokens() > 0;
}

}  // namespace

po::options_description run_options() {
  po::options_description d(
      "Usage: tokenlock run [-w SECS | -n] [--lease SECS] [-E CODE] LOCKDIR [--] CMD [ARGS...]\n"
      "       tokenlock run [OPTIONS] LOCKDIR -c COMMAND\n\n"
      "Runs CMD with its arguments untouched while holding the lock, refreshes the lease\n"
      "every third of it while CMD runs, passes SIGTERM, SIGINT and SIGHUP on to CMD, and\n"
      "releases the lock when CMD ends. Exits with CMD's status (128+N when a signal N\n"
      "killed it), or with CODE (default 1) when the lock stays busy. If the lock is\n"
      "lost while CMD runs, that is said on stderr and the exit status is CMD's when\n"
      "non-zero, 3 otherwise; a release that fails otherwise is said too, and never\n"
      "exits 0. CMD starts only once the lock is held, and is killed if tokenlock is.\n\nOptions");
  add_wait_options(d);
  add_mode_options(d);
  add_legacy_option(d);
  add_lease_option(d, "the lease, kept alive while CMD runs", 60);
  add_dir_mode_option(d);
  d.add_options()("verbose,v", "say why when the lock is busy")(
      "command,c", po::value<std::string>()->value_name("COMMAND"),
      "run COMMAND with /bin/sh -c, as flock(1) -c does (also after LOCKDIR)")(
      "close,o",
      "accepted for flock(1)'s scripts: CMD inherits nothing of the lock, which is no "
      "descriptor")(
      "unlock,u", "not available: a rename lock is released by its token (tokenlock release)");
  add_server_options(d);
  return d;
}

run_arguments split_run_arguments(const std::vector<std::string>& a,
                                  const po::options_description& d) {
  std::size_t i = 0;
  for (; i < a.size(); ++i) {
    if (a[i] == "--") {
      ++i;
      break;
    }
    if (a[i].size() > 1 && a[i][0] == '-') {
      if (takes_value(d, a[i])) ++i;
      continue;
    }
    break;
  }
  run_arguments r;
  r.options.assign(a.begin(), a.begin() + static_cast<long>(std::min(i, a.size())));
  if (i < a.size()) {
    r.dir = a[i];
    std::size_t c = i + 1;
    if (c < a.size() && a[c] == "--") ++c;
    r.command.assign(a.begin() + static_cast<long>(c), a.end());
  }
  return r;
}

std::optional<unsigned> parse_mode(const std::string& s) {
  if (s.empty()) return std::nullopt;
  unsigned mode = 0;
  for (char ch : s) {
    if (ch < '0' || ch > '7') return std::nullopt;
    mode = mode * 8 + static_cast<unsigned>(ch - '0');
    if (mode > 07777) return std::nullopt;  // also before it could wrap
  }
  return mode;
}

std::optional<std::uint64_t> parse_unsigned(const std::string& s) {
  // Digits only: from_chars alone would take "+1" as no and "1x" as 1.
  // Leading zeros are fine (a person may write --by 007).
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;  // past 2^64-1
  return v;
}

const char* clock_verdict_name(clock_verdict v) noexcept {
  switch (v) {
    case clock_verdict::within: return "within";
    case clock_verdict::beyond: return "beyond";
    case clock_verdict::unclear: return "unclear";
  }
  return "unclear";
}

std::chrono::milliseconds seconds_option(const std::string& name, double secs, bool allow_zero) {
  if (!std::isfinite(secs) || secs < 0 || (!allow_zero && secs == 0) || secs > 365.0 * 24 * 3600)
    throw po::error("--" + name + " takes a number of seconds" +
                    (allow_zero ? " (0 or more)" : " greater than 0") + ", at most a year");
  return std::chrono::milliseconds(static_cast<long long>(std::llround(secs * 1000)));
}

std::chrono::milliseconds lease_option(double secs) {
  const double max_secs = static_cast<double>(protocol_max_lease.count()) / 1000;
  // Compared before rounding: a huge value must not overflow the cast.
  if (std::isfinite(secs) && secs > 0 && secs <= max_secs) {
    const auto ms = std::chrono::milliseconds(static_cast<long long>(std::llround(secs * 1000)));
    if (ms.count() > 0 && ms <= protocol_max_lease) return ms;
  }
  char given[64];
  std::snprintf(given, sizeof given, "%g", secs);
  throw po::error("--lease takes a number of seconds from 0.001 to " +
                  std::to_string(static_cast<long long>(max_secs)) +
                  " (24 hours, the protocol's bound: every process judges a longer lease "
                  "implausible and would take the lock over), not " + given);
}

void add_dir_mode_option(po::options_description& d) {
  d.add_options()("dir-mode", po::value<std::string>()->value_name("MODE"),
                  "mode of a lock directory this command creates, in octal (default 0755, or "
                  "TOKENLOCK_DIR_MODE); with group write (0775, 0770) a lock directory of "
                  "this user's is shared with its own group")(
      "group", po::value<std::string>()->value_name("GROUP"),
      "share the lock with this one group, by name or gid (default TOKENLOCK_GROUP): lock "
      "directories, tokens and workspaces of its members are trusted, and a lock directory "
      "created gets it; you must be a member");
}

std::string dir_mode_problem(unsigned mode) {
  if ((mode & 0700) != 0700)
    return "the owner needs read, write and search permission (0700) on a lock directory";
  if (mode & 0002)
    return "a lock directory writable by others is refused by every process that uses it "
           "(docs/security.md): share it with a group instead, with 0775 or 0770 and a "
           "common group";
  if (mode & 01000)
    return "in a sticky lock directory only a token's owner may rename it, so users lock "
           "each other out";
  return {};
}

namespace {

unsigned dir_mode_from(const std::string& text, const std::string& source) {
  const std::optional<unsigned> mode = parse_mode(text);
  if (!mode)
    throw po::error(source + " takes an octal mode such as 0775, not \"" + text + "\"");
  const std::string problem = dir_mode_problem(*mode);
  if (!problem.empty()) throw po::error(source + " " + text + ": " + problem);
  return *mode;
}

}  // namespace

void apply_dir_mode(const po::variables_map& v, lock_options& o) {
  if (v.count("dir-mode")) {
    o.dir_mode = dir_mode_from(v["dir-mode"].as<std::string>(), "--dir-mode");
  } else if (const char* env = std::getenv("TOKENLOCK_DIR_MODE"); env && *env) {
    o.dir_mode = dir_mode_from(env, "TOKENLOCK_DIR_MODE");
  }
  if (v.count("group")) {
    o.group = v["group"].as<std::string>();
    if (o.group.empty()) throw po::error("--group takes a group name or gid");
  } else if (const char* env = std::getenv("TOKENLOCK_GROUP"); env && *env) {
    o.group = env;
  }
}

void add_mode_options(po::options_description& d) {
  d.add_options()("shared,s",
                  "a shared lock: held together with other shared holders, never beside an "
                  "exclusive one")("exclusive,x", "an exclusive lock (the default)")(
      "slots", po::value<std::uint32_t>()->value_name("N"),
      "one of N slots of a semaphore (1 to 999999): at most N holders at once; every user of "
      "the lock must give the same N");
}

void apply_mode(const po::variables_map& v, open_options& o) {
  if (v.count("exclusive") && (v.count("shared") || v.count("slots")))
    throw po::error("-x (exclusive) and -s or --slots (shared) exclude each other");
  if (v.count("slots")) {
    const std::uint32_t n = v["slots"].as<std::uint32_t>();
    if (n == 0 || n > max_slots) throw po::error("--slots takes a count from 1 to 999999");
    o.slots = n;
  }
  if (v.count("shared") || v.count("slots")) o.mode = lock_mode::shared;
}

lock_options directory_options(const po::variables_map& v, lock_options o) {
  o = legacy_applied(v, o);
  apply_dir_mode(v, o);
  return o;
}

std::string file_too_large_hint(std::error_code ec, const std::string& file,
                                const std::string& message) {
  if (ec != std::errc::file_too_large || message.find("ulimit -f") != std::string::npos) return {};
  rlimit limit{};
  std::string size = "lower";
  if (::getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    size = std::to_string(static_cast<unsigned long long>(limit.rlim_cur)) + " bytes";
  return "; " + file + ": file too large: this process's file size limit (ulimit -f, "
         "RLIMIT_FSIZE: " + size + ") is below what the write needs; raise it (ulimit -f "
         "unlimited) and try again";
}

namespace {
struct sigaction sigxfsz_before {};
bool sigxfsz_saved = false;
}  // namespace

void ignore_sigxfsz() {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigxfsz_saved = ::sigaction(SIGXFSZ, &ignore, &sigxfsz_before) == 0;
}

void restore_sigxfsz() {
  if (sigxfsz_saved) ::sigaction(SIGXFSZ, &sigxfsz_before, nullptr);
}

void add_wait_options(po::options_description& d) {
  d.add_options()("wait,w", po::value<double>()->value_name("SECS"),
                  "wait at most SECS seconds for the lock (default: as long as it takes)")(
      "timeout", po::value<double>()->value_name("SECS"), "the same as -w (flock(1)'s name)")(
      "nonblock,n", "fail at once if the lock is busy")(
      "conflict-exit-code,E", po::value<int>()->value_name("CODE")->default_value(exit_code::busy),
      "exit status when the lock is busy or the wait times out");
}

void add_lease_option(po::options_description& d, const char* help, double default_secs) {
  auto* value = po::value<double>()->value_name("SECS");
  if (default_secs > 0) value->default_value(default_secs);
  d.add_options()("lease", value, help);
}

void add_legacy_option(po::options_description& d) {
  d.add_options()("legacy-timeout", po::value<double>()->value_name("SECS"),
                  "a legacy token (lockfile<seconds>, left by a script using the older rename "
                  "lock) is stale at this age (default 60)");
}

lock_options legacy_applied(const po::variables_map& v, lock_options o) {
  if (v.count("legacy-timeout"))
    o.legacy_timeout = seconds_option("legacy-timeout", v["legacy-timeout"].as<double>(), false);
  return o;
}

void apply_wait_budget(const po::variables_map& v, lock_options& o,
                       std::chrono::milliseconds if_not_given) {
  if (v.count("wait") && v.count("timeout"))
    throw po::error("-w and --timeout are one option: give it once");
  const char* wait = v.count("timeout") ? "timeout" : "wait";
  if (v.count(wait) && v.count("nonblock")) throw po::error("-w and -n exclude each other");
  if (v.count("nonblock"))
    o.wait = std::chrono::milliseconds(0);
  else if (v.count(wait))
    o.wait = seconds_option(wait, v[wait].as<double>(), true);
  else
    o.wait = if_not_given;
}

int apply_wait(const po::variables_map& v, lock_options& o) {
  apply_wait_budget(v, o, std::chrono::hours(24 * 365));
  const int code = v["conflict-exit-code"].as<int>();
  if (code < 0 || code > 255) throw po::error("-E takes an exit status from 0 to 255");
  return code;
}

}  // namespace tokenlock::cli
