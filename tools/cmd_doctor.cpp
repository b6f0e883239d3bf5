// doctor: whether a directory, and another mount of the same share, does
// what the rename-token lock, the atomic writes and update_file rely on.
//
// The checks are the library's (tokenlock/doctor.hpp); the command prints
// each finding as it is made, one line per property, or one JSON object at
// the end. The library removes its scratch directory also after SIGINT,
// SIGTERM or SIGHUP, which end the checks early; the signal is then raised
// again, so the exit status tells it.
#include <csignal>
#include <iostream>
#include <sstream>

#include "cli.hpp"
#include "commands.hpp"
#include "json_output.hpp"
#include "tokenlock/doctor.hpp"
#include "tokenlock/errors.hpp"

namespace tokenlock::cli {
namespace {

using std::chrono::microseconds;

volatile std::sig_atomic_t g_signal = 0;
constexpr int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};
void on_stop_signal(int sig) { g_signal = sig; }

const char* word_of(doctor_verdict v) {
  switch (v) {
    case doctor_verdict::ok: return "ok";
    case doctor_verdict::warn: return "warn";
    case doctor_verdict::fail: return "FAIL";
    case doctor_verdict::skip: return "skip";
  }
  return "FAIL";
}

// "<verdict>  <property>: <text>[; fix: <fix>]", the verdict padded to one
// column.
void print_line(const doctor_finding& f) {
  std::string line = word_of(f.verdict);
  line.resize(6, ' ');
  line += f.property + ": " + f.text;
  if (!f.fix.empty()) line += "; fix: " + f.fix;
  // Flushed at once: a user who interrupts sees what was found so far.
  std::cout << line << std::endl;
}

std::string strip_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// One object per finding: property, verdict, detail, and fix when there is one.
json finding_json(const doctor_finding& f) {
  json j;
  put_text(j, "property", f.property);
  j["verdict"] = doctor_verdict_name(f.verdict);
  put_text(j, "detail", f.text);
  if (!f.fix.empty()) put_text(j, "fix", f.fix);
  return j;
}

void print_json(const doctor_report& r, const std::string& dir, const std::string& peer) {
  json j;
  put_text(j, "dir", dir);
  if (peer.empty())
    j["peer"] = nullptr;
  else
    put_text(j, "peer", peer);
  put_text(j, "filesystem", r.filesystem);
  j["checks"] = json::array();
  for (const auto& f : r.findings) j["checks"].push_back(finding_json(f));
  j["failed"] = r.failed();
  std::cout << compact(j) << std::endl;
}

// DIR or --peer missing or not a directory: the caller's to fix
// (EX_NOINPUT); a peer that does not show DIR's scratch directory: a usage
// error.
int exit_code_of(std::error_code ec) {
  if (ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory)
    return exit_code::no_input;
  if (ec == errc::bad_argument) return exit_code::usage;
  return exit_code_for(ec);
}

// "tokenlock doctor: DIR: 2 properties failed: fsync of a file, wait board;
// ...", for --errors=json.
std::string failed_properties_line(const doctor_report& r, const std::string& dir) {
  std::string names;
  for (const auto& f : r.findings)
    if (f.verdict == doctor_verdict::fail) names += (names.empty() ? "" : ", ") + f.property;
  const int n = r.failed();
  return "tokenlock doctor: " + escaped(dir) + ": " + std::to_string(n) +
         (n == 1 ? " property" : " properties") + " failed: " + names +
         "; each finding says what went wrong and how to fix it";
}

// Ending by the signal itself tells the caller (a shell loop) what
// happened, as an exit status of our own could not.
int end_by_signal(const doctor_report& r) {
  const int sig = g_signal;
  std::cerr << "tokenlock doctor: interrupted by signal " << sig << "; removed " << r.scratch
            << "\n";
  ::signal(sig, SIG_DFL);
  ::raise(sig);
  return 128 + sig;
}

int run_doctor(const std::string& dir, const std::string& peer, microseconds peer_wait,
               bool json) {
  doctor_options o;
  o.peer = peer;
  o.peer_wait = peer_wait;
  if (!json) o.on_finding = print_line;
  o.stop = [] { return g_signal != 0; };
  // Installed before the scratch directory exists, so that no signal can
  // leave it behind; without SA_RESTART, so that a wait ends early.
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : stop_signals) ::sigaction(s, &sa, nullptr);

  std::error_code ec;
  const doctor_report r = check_directory_health(dir, o, ec);
  if (g_signal && !r.scratch.empty()) return end_by_signal(r);
  if (ec) {
    std::string m = last_error_message();
    if (m.rfind("tokenlock: ", 0) == 0) m.erase(0, 11);
    const std::string line = "tokenlock doctor: " + escaped(m);
    std::cerr << line << "\n";
    note_failure(ec, line);
    return exit_code_of(ec);
  }
  if (json) print_json(r, dir, peer);
  if (r.failed() == 0) return exit_code::ok;
  // The findings on stdout are the report, so nothing more is printed;
  // --errors=json still gets its line. A failed property has no one errno
  // (each finding names its cause): "system" with errno 0.
  note_failure("system", 0, failed_properties_line(r, dir));
  return exit_code::check_failed;
}

}  // namespace

int cmd_doctor(const args& a) {
  po::options_description d(
      "Usage: tokenlock doctor [--peer DIR2 [--peer-wait SECS]] [--json] DIR\n\n"
      "Checks that DIR's filesystem does what tokenlock relies on: renames of\n"
      "directories and files, ENOENT for a vanished name, O_EXCL, fsync of files\n"
      "and directories, token-length names, the wait board, and the clock offset\n"
      "against the file server. With --peer, DIR2 is the same directory of the share\n"
      "mounted elsewhere (another client, or a second mount here): doctor checks that\n"
      "renames and new contents made through DIR are seen through DIR2. It works in a\n"
      "scratch directory inside DIR that it removes. One line per property:\n"
      "ok|FAIL|warn|skip, the property, what was found, and for a problem the fix.\n"
      "Exits 0 when nothing failed (warnings allowed), 1 when something did.\n\nOptions");
  d.add_options()("peer", po::value<std::string>()->value_name("DIR2"),
                  "another mount of DIR's share, at the same directory")(
      "peer-wait", po::value<double>()->value_name("SECS")->default_value(30),
      "how long the peer may take to show a change")("json", "print one JSON object");
  return with_command_line("doctor", a, d, {"dir"}, [](const po::variables_map& v) {
    const auto wait = seconds_option("peer-wait", v["peer-wait"].as<double>(), true);
    if (!v.count("peer") && !v["peer-wait"].defaulted())
      throw po::error("--peer-wait needs --peer");
    const std::string peer = v.count("peer") ? strip_slashes(v["peer"].as<std::string>()) : "";
    if (v.count("peer") && peer.empty()) throw po::error("--peer takes a directory");
    const std::string dir = strip_slashes(v["dir"].as<std::string>());
    if (dir.empty()) throw po::error("DIR is empty");
    return run_doctor(dir, peer, std::chrono::duration_cast<microseconds>(wait),
                      v.count("json") > 0);
  });
}

}  // namespace tokenlock::cli
