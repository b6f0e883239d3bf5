// write and incr: atomic replacement and counters from the shell.
#include <cerrno>
#include <csignal>
#include <cstring>
#include <functional>
#include <iostream>

#include <poll.h>
#include <unistd.h>

#include "cli.hpp"
#include "commands.hpp"
#include "lock_target.hpp"
#include "tokenlock/tokenlock.hpp"

namespace tokenlock::cli {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void on_interrupt(int sig) { g_interrupted = sig; }

durability parse_sync(const std::string& s) {
  if (const std::optional<durability> d = durability_from_name(s)) return *d;
  throw po::error("--sync takes none, file or file_and_dir");
}

// Replaces the file with `contents` under the lock the command line names.
using locked_write = std::function<void(const update_function&, const update_options&,
                                        std::error_code&)>;

int write_stdin(const std::string& file, const write_options& wo, const locked_write& locked,
                bool allow_empty);

void add_file_options(po::options_description& d) {
  d.add_options()("lock", po::value<std::string>()->value_name("LOCKDIR"),
                  "hold this lock while writing (with --redis or --etcd: the lock's NAME)")(
      "sync", po::value<std::string>()->value_name("LEVEL")->default_value("file_and_dir"),
      "durability: none, file or file_and_dir")(
      "wait,w", po::value<double>()->value_name("SECS"),
      "wait at most SECS seconds for the lock (default 10)")(
      "nonblock,n", "fail at once if the lock is busy");
  add_legacy_option(d);
  add_dir_mode_option(d);
  add_server_options(d);
}

// The lock of write or incr: --lock LOCKDIR, or --lock NAME with --redis or
// --etcd (`fallback`, when given, is the lock directory without --lock);
// nullptr when there is none (`code` 0) or it cannot be opened (`code` set,
// reported). -w and -n apply, with 10 s by default.
std::unique_ptr<lock> file_lock(const po::variables_map& v, const std::string& fallback,
                                int& code) {
  if (!v.count("lock") && names_server(v))
    throw po::error(std::string(v.count("redis") ? "--redis" : "--etcd") +
                    " needs --lock NAME: the name of the lock on the server");
  if (!v.count("lock") && fallback.empty()) return nullptr;
  lock_options wait;
  apply_wait_budget(v, wait, std::chrono::seconds(10));
  open_options o;
  o.wait = wait.wait;
  // Without --lock and a server no lock directory option applies, and
  // TOKENLOCK_DIR_MODE is not read.
  if (!names_server(v)) o.directory = directory_options(v, o.directory);
  const std::string spec = lock_spec_of(v, v.count("lock") ? v["lock"].as<std::string>() : fallback);
  return open_or_report(spec, o, code);
}

// --sync and --mode of write and commit.
write_options sync_and_mode(const po::variables_map& v) {
  write_options wo;
  wo.sync = parse_sync(v["sync"].as<std::string>());
  if (v.count("mode")) {
    const std::optional<unsigned> mode = parse_mode(v["mode"].as<std::string>());
    if (!mode) throw po::error("--mode takes an octal mode such as 0640");
    wo.mode = *mode;
  }
  return wo;
}

// A failed write's message, with the file size limit named when that was
// the cause (the library's own words do not say how to raise it).
int report_write(std::error_code ec, const std::string& file) {
  const std::string& message = last_error_message();
  return report(ec, message + file_too_large_hint(ec, file, message));
}


}  // namespace

int cmd_write(const args& a) {
  po::options_description d(
      "Usage: tokenlock write [--lock LOCKDIR | --redis|--etcd URL --lock NAME] [-w SECS | -n]\n"
      "                       [--sync none|file|file_and_dir] [--mode OCTAL]\n"
      "                       [--follow-symlinks] [--allow-empty] FILE\n\n"
      "Replaces FILE with standard input, atomically: FILE changes only once all input\n"
      "has been read, so an interrupted or killed writer leaves it as it was. Empty\n"
      "input is refused (exit 65), since it usually means the producer failed. With a\n"
      "lock server the commit is fenced through FILE.fence.\n\nOptions");
  add_file_options(d);
  d.add_options()("mode", po::value<std::string>()->value_name("OCTAL"),
                  "mode of FILE, also when it replaces one (default: the replaced file's,\n"
                  "without setuid or setgid, or 0644 minus the umask)")(
      "follow-symlinks", "if FILE is a symbolic link, replace the file it points to")(
      "allow-empty", "accept empty input");
  return with_command_line("write", a, d, {"file"}, [](const po::variables_map& v) {
    write_options wo = sync_and_mode(v);
    if (v.count("follow-symlinks")) wo.symlinks = symlink_policy::follow;
    if (v.count("dir-mode") && !v.count("lock"))
      throw po::error("--dir-mode is the mode of the lock directory: it needs --lock");
    if (v.count("group") && !v.count("lock"))
      throw po::error("--group is the group a lock directory is shared with: it needs --lock");
    int code = 0;
    const std::shared_ptr<lock> l = file_lock(v, "", code);
    if (code) return code;
    const std::string file = v["file"].as<std::string>();
    locked_write locked;
    if (l)
      locked = [&file, l](const update_function& fn, const update_options& uo,
                          std::error_code& ec) { update_file(file, *l, fn, uo, ec); };
    return write_stdin(file, wo, locked, v.count("allow-empty") > 0);
  });
}

namespace {

// The interrupting signals stay blocked except while waiting for input
// (ppoll unblocks them atomically), so one that arrives mid-write is seen
// at the next wait instead of being missed before a blocking read. Returns
// the mask to wait with.
sigset_t block_interrupts() {
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
  return waiting;
}

// Where standard input goes: without a lock, streamed into the temporary
// file `out`; with one, into `buffered`, so that the lock is not held while
// the producer works.
struct input_sink {
  const char* command = "write";  // for the messages
  std::optional<atomic_file> out;
  std::string buffered;
  std::size_t total = 0;
};

// A signal ends the write as a shell's would end it (128+N), with the file
// left as it was.
int say_interrupted(input_sink& in, const std::string& file) {
  if (in.out) in.out->rollback();
  const std::string line = std::string("tokenlock ") + in.command + ": interrupted by signal " +
                           std::to_string(g_interrupted) + "; " + escaped(file) +
                           " was left as it was";
  std::cerr << line << "\n";
  note_failure(std::error_code(EINTR, std::generic_category()), line);
  return 128 + g_interrupted;
}

// Reads standard input to its end into `in`. std::nullopt then; otherwise
// the exit status of a failure it has reported (the temporary file rolled
// back).
std::optional<int> read_input(const sigset_t& waiting, const std::string& file, input_sink& in) {
  char buf[64 * 1024];
  for (;;) {
    pollfd p{0, POLLIN, 0};
    ssize_t n = -1;
    errno = EINTR;
    if (!g_interrupted && ::ppoll(&p, 1, nullptr, &waiting) >= 0) n = ::read(0, buf, sizeof buf);
    if (g_interrupted) return say_interrupted(in, file);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      if (in.out) in.out->rollback();
      return report(std::error_code(e, std::generic_category()),
                    std::string("tokenlock: ") + in.command + " " + file +
                        ": cannot read standard input: " + std::strerror(e) +
                        "; the file was left as it was");
    }
    if (n == 0) return std::nullopt;
    in.total += static_cast<std::size_t>(n);
    if (!in.out) {
      in.buffered.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    std::error_code ec;
    in.out->write(std::string_view(buf, static_cast<std::size_t>(n)), ec);
    if (ec) return report_write(ec, file);
  }
}

int refuse_empty_input(input_sink& in, const std::string& file) {
  if (in.out) in.out->rollback();
  const std::string line = std::string("tokenlock ") + in.command +
                           ": standard input was empty; " + escaped(file) +
                           " was left as it was (use --allow-empty to write an empty file)";
  std::cerr << line << "\n";
  // Input that is not what it must be: a data error, exit 65.
  note_failure(make_error_code(errc::corrupt_data), line);
  return exit_code::data;
}

int write_stdin(const std::string& file, const write_options& wo, const locked_write& locked,
                bool allow_empty) {
  const sigset_t waiting = block_interrupts();
  std::error_code ec;
  input_sink in;
  if (!locked) {
    in.out.emplace(file, wo, ec);
    if (ec) return report_write(ec, file);
  }
  if (const std::optional<int> failed = read_input(waiting, file, in)) return *failed;
  if (in.total == 0 && !allow_empty) return refuse_empty_input(in, file);
  if (in.out) {
    in.out->commit(ec);
  } else {
    update_options uo;
    uo.write = wo;
    locked([&](const std::optional<std::string>&) { return in.buffered; }, uo, ec);
  }
  if (ec) return report_write(ec, file);
  return exit_code::ok;
}

// commit: standard input, then the fenced commit through the adopted token.
// The lock stays held by the script, whatever the outcome.
int commit_stdin(const std::string& file, const write_options& wo, lock& lock,
                 const std::string& token, bool allow_empty) {
  const sigset_t waiting = block_interrupts();
  input_sink in;
  in.command = "commit";
  // Read before adopting: a producer that fails leaves the lock untouched.
  if (const std::optional<int> failed = read_input(waiting, file, in)) return *failed;
  if (in.total == 0 && !allow_empty) return refuse_empty_input(in, file);
  std::error_code ec;
  handle h = lock.adopt(id_of(lock, token), ec);
  if (ec) {
    std::string why = last_error_message();
    if (why.rfind("tokenlock: ", 0) == 0) why.erase(0, 11);
    return report(ec, "tokenlock: commit " + file + ": nothing was written: " + why);
  }
  commit_file(h, file, in.buffered, wo, ec);
  h.detach();
  if (ec) return report_write(ec, file);
  return exit_code::ok;
}

}  // namespace

int cmd_commit(const args& a) {
  po::options_description d(
      "Usage: tokenlock commit [--redis|--etcd URL] [--sync none|file|file_and_dir]\n"
      "                        [--mode OCTAL] [--allow-empty] LOCKDIR TOKEN FILE\n\n"
      "Replaces FILE with standard input through the lock held with TOKEN (from\n"
      "tokenlock acquire): the new contents are written inside the token and renamed\n"
      "over FILE through the token's name, so nothing is written once the lock was\n"
      "taken over (exit 3). The lock stays held; release it afterwards. LOCKDIR and\n"
      "FILE must be on one filesystem (exit 73 otherwise, nothing written). With a\n"
      "lock server (LOCKDIR is then the lock's NAME) the commit is fenced through\n"
      "FILE.fence instead.\n\nOptions");
  d.add_options()("sync", po::value<std::string>()->value_name("LEVEL")->default_value("file_and_dir"),
                  "durability: none, file or file_and_dir")(
      "mode", po::value<std::string>()->value_name("OCTAL"),
      "mode of FILE, also when it replaces one (default: the replaced file's,\n"
      "without setuid or setgid, or 0644 minus the umask)")(
      "allow-empty", "accept empty input");
  add_dir_mode_option(d);
  add_server_options(d);
  return with_command_line("commit", a, d, {"lockdir", "token", "file"}, [](const po::variables_map& v) {
    const write_options wo = sync_and_mode(v);
    int code = 0;
    open_options o;
    if (!names_server(v)) o.directory = directory_options(v, o.directory);
    const std::unique_ptr<lock> l =
        open_or_report(lock_spec_of(v, v["lockdir"].as<std::string>()), o, code);
    if (!l) return code;
    return commit_stdin(v["file"].as<std::string>(), wo, *l, v["token"].as<std::string>(),
                        v.count("allow-empty") > 0);
  });
}

int cmd_incr(const args& a) {
  po::options_description d(
      "Usage: tokenlock incr [--lock LOCKDIR | --redis|--etcd URL --lock NAME] [-w SECS | -n]\n"
      "                      [--by N] [--sync none|file|file_and_dir] FILE\n\n"
      "Adds N (default 1) to the counter in FILE under its lock (default FILE.lock, or\n"
      "the NAME in a lock server, the commit fenced through FILE.fence) and\n"
      "prints the new value. FILE holds one unsigned decimal and a newline; a missing\n"
      "FILE counts as 0. Anything else is refused (exit 65) and left as it is.\n\nOptions");
  add_file_options(d);
  d.add_options()("by", po::value<std::string>()->value_name("N")->default_value("1"),
                  "the amount to add (0 reads the counter under the lock)");
  return with_command_line("incr", a, d, {"file"}, [](const po::variables_map& v) {
    const std::string file = v["file"].as<std::string>();
    update_options uo;
    uo.write.sync = parse_sync(v["sync"].as<std::string>());
    const std::optional<std::uint64_t> by = parse_unsigned(v["by"].as<std::string>());
    if (!by) throw po::error("--by takes an unsigned decimal number");
    int code = 0;
    const std::unique_ptr<lock> l = file_lock(v, file + ".lock", code);
    if (!l) return code;
    std::error_code ec;
    const std::uint64_t value = increment_counter(file, *l, *by, uo, ec);
    // After dir_sync_failed the count is made and must not be repeated: the
    // value is printed, and the exit status says its durability is in doubt.
    if (!ec || ec == errc::dir_sync_failed) std::cout << value << std::endl;
    if (ec) return report_write(ec, file);
    return exit_code::ok;
  });
}

}  // namespace tokenlock::cli
