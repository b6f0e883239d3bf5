// acquire, release, refresh, status, break: the lock from shell scripts,
// on a lock directory, Redis or etcd alike (lock_target.hpp).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <variant>
#include <vector>

#include <unistd.h>

#include <boost/filesystem/operations.hpp>

#include "cli.hpp"
#include "commands.hpp"
#include "json_output.hpp"
#include "lock_target.hpp"
#include "tokenlock/clock_judgement.hpp"
#include "tokenlock/tokenlock.hpp"

namespace tokenlock::cli {
namespace {

// Default lease for `acquire` on a lock that frees itself when its owner is
// found dead on this host (a lock directory): the lease only matters across
// hosts and for scripts that are stopped.
constexpr double acquire_default_lease_s = 3600;

// Where status measures the clock: in the lock directory, whose file
// server stamps the tokens; before its first use, in its parent, where it
// will be created (the same filesystem unless a mount point is in between).
std::string clock_directory(std::string lockdir) {
  boost::system::error_code e;
  if (boost::filesystem::is_directory(lockdir, e)) return lockdir;
  while (lockdir.size() > 1 && lockdir.back() == '/') lockdir.pop_back();
  const auto slash = lockdir.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : lockdir.substr(0, slash);
}

// The library's messages start with "tokenlock: "; inside a line of our
// own that would say it twice.
std::string without_prefix(const std::string& message) {
  const std::string prefix = "tokenlock: ";
  return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
}

// The lock the command line names, with `o` and the lock directory's own
// options (which only a lock directory reads: TOKENLOCK_DIR_MODE is not
// checked for a server), or nullptr after reporting why not.
std::unique_ptr<lock> open_named(const po::variables_map& v, const std::string& spec,
                                 open_options o, int& code) {
  if (!names_server(v)) o.directory = directory_options(v, o.directory);
  return open_or_report(spec, o, code);
}

// The grant named by the command line's TOKEN, adopted, given to `body`;
// or the failure's exit status.
int with_adopted(const po::variables_map& v, const std::function<int(lock&, handle&)>& body) {
  int code = 0;
  const std::unique_ptr<lock> l =
      open_named(v, lock_spec_of(v, v["lockdir"].as<std::string>()), open_options{}, code);
  if (!l) return code;
  std::error_code ec;
  handle h = l->adopt(id_of(*l, v["token"].as<std::string>()), ec);
  if (ec) return report(ec, last_error_message());
  // The grant stays the script's whatever `body` does, a usage error it
  // throws included: only an explicit release gives it back.
  struct let_go {
    handle& h;
    ~let_go() { h.detach(); }
  } guard{h};
  return body(*l, h);
}

// What status found: the lock, its holder, and the clock measured beside
// it where leases are judged by this host's clock.
struct status_seen {
  std::vector<lock_fact> location;
  std::optional<lock_holder> holder;   // the first holder (the only one when exclusive)
  std::vector<lock_holder> holders;    // all, with a waiting writer
  bool local_clock = false;
  bool frees_dead_owners = false;
  std::string clock_dir;
  clock_offset clock;
  std::string clock_error;  // empty when the clock was measured
  std::chrono::microseconds allowance = lock_options{}.skew_allowance;
  clock_judgement judged;
};

// "stale" when the next acquire takes the lock over. A server's grant
// whose process is gone (lock_holder::stale) keeps the lock until its
// lease ends: held, though break takes it without --force.
bool taken_over_next(const status_seen& s) {
  return s.holder && s.holder->stale && s.frees_dead_owners;
}

const char* state_of(const status_seen& s) {
  return !s.holder ? "free" : taken_over_next(s) ? "stale" : "held";
}

void put_fact(json& j, const lock_fact& f) {
  std::visit(
      [&](const auto& value) {
        if constexpr (std::is_same_v<std::decay_t<decltype(value)>, std::string>)
          put_text(j, f.name, value);
        else
          j[f.name] = value;
      },
      f.value);
}

// The clock object of status --json.
json clock_json(const status_seen& s) {
  json c;
  put_text(c, "measured_in", s.clock_dir);
  if (!s.clock_error.empty()) {
    put_text(c, "error", s.clock_error);
    return c;
  }
  c["offset_us"] = s.clock.offset.count();
  c["uncertainty_us"] = s.clock.uncertainty.count();
  c["skew_allowance_us"] = s.allowance.count();
  c["verdict"] = clock_verdict_name(s.judged.verdict);
  return c;
}

// How a holder holds, in status's words: "exclusive", "shared", "slot of
// 3", "writer waiting".
std::string how_held(const lock_holder& h) {
  if (h.waiting_writer) return "writer waiting";
  if (h.mode == lock_mode::exclusive) return "exclusive";
  return h.slots ? "slot of " + std::to_string(h.slots) : std::string("shared");
}

bool any_shared(const status_seen& s) {
  for (const auto& h : s.holders)
    if (h.mode == lock_mode::shared || h.waiting_writer) return true;
  return false;
}

json holder_json(const lock_holder& h) {
  json o;
  put_text(o, "token", token_of(h));
  o["mode"] = h.mode == lock_mode::shared ? "shared" : "exclusive";
  if (h.slots) o["slots"] = h.slots;
  o["waiting_writer"] = h.waiting_writer;
  for (const lock_fact& f : h.facts) put_fact(o, f);
  return o;
}

// status --json: one object, and its newline. Its fields are the lock's
// location, the state, and the holder's token and facts (tokenlock(1)).
std::string status_json(const status_seen& s) {
  json j;
  for (const lock_fact& f : s.location) put_fact(j, f);
  j["state"] = state_of(s);
  if (s.holder) {
    put_text(j, "token", token_of(*s.holder));
    for (const lock_fact& f : s.holder->facts) put_fact(j, f);
    j["mode"] = s.holder->mode == lock_mode::shared ? "shared" : "exclusive";
    if (s.holder->slots) j["slots"] = s.holder->slots;
    json all = json::array();
    for (const lock_holder& h : s.holders) all.push_back(holder_json(h));
    j["holders"] = std::move(all);
  }
  if (s.local_clock) j["clock"] = clock_json(s);
  return compact(j) + "\n";
}

// status: who holds the lock, then the clock's line. Names come from a
// filesystem or a server: escaped.
std::string status_text(const status_seen& s) {
  const auto& h = s.holder;
  std::string t = !h ? "free\n"
                     : (taken_over_next(s) ? "stale: " : "") +
                           escaped(h->reason) + "\n  token " +
                           escaped(token_of(*h)) + "\n";
  if (any_shared(s)) {
    t = std::to_string(s.holders.size()) + (s.holders.size() == 1 ? " holder:\n" : " holders:\n");
    for (const lock_holder& one : s.holders)
      t += "  " + how_held(one) + ": " + (one.stale ? "stale: " : "") + escaped(one.reason) +
           "\n    token " + escaped(token_of(one)) + "\n";
  }
  if (!s.local_clock) return t;
  if (!s.clock_error.empty()) return t + "clock: not measured: " + s.clock_error + "\n";
  return t + "clock: " + s.judged.text + (s.judged.fix.empty() ? "" : "; fix: " + s.judged.fix) +
         "\n";
}

// The clock beside the lock, for status.
void measure_clock(const lock& l, status_seen& s) {
  std::error_code ec;
  s.clock_dir = clock_directory(l.spec());
  s.clock = estimate_clock_offset(s.clock_dir, ec);
  if (ec) s.clock_error = without_prefix(last_error_message());
  s.judged = judge_clock_offset(s.clock, s.allowance);
}

}  // namespace

namespace {

// acquire's lock options: the lease (its default depends on whether the
// lock sees its owner die) and, for a lock that names its owner, the owner.
open_options acquire_options(const po::variables_map& v, const lock_features& f,
                             std::chrono::milliseconds wait) {
  if (v.count("pid") && !f.frees_dead_owners)
    throw po::error("--pid has no meaning with a lock server: it frees a grant when its lease "
                    "ends, whoever owned it");
  open_options o;
  o.wait = wait;
  o.lease = lease_option(v.count("lease")          ? v["lease"].as<double>()
                         : f.frees_dead_owners ? acquire_default_lease_s
                                               : server_default_lease_s);
  o.directory.owner_pid = v.count("pid") ? v["pid"].as<int>() : static_cast<int>(::getppid());
  if (o.directory.owner_pid <= 0) throw po::error("--pid takes a process id");
  apply_mode(v, o);
  return o;
}

}  // namespace

int cmd_acquire(const args& a) {
  po::options_description d(
      "Usage: tokenlock acquire [-s | -x | --slots N] [-w SECS | -n] [--lease SECS] [--pid PID] LOCKDIR\n\n"
      "Acquires the lock and prints its token. The lock stays held after this command\n"
      "ends: it belongs to the calling process (the shell), or to PID, and is released\n"
      "with 'tokenlock release LOCKDIR TOKEN', when its lease ends, or as soon as its\n"
      "owner is found dead.\n\nOptions");
  add_wait_options(d);
  add_legacy_option(d);
  add_lease_option(d,
                   "how long the lock stays valid without a refresh (default 3600; with --redis "
                   "or --etcd 300: the server cannot see that the owner died)");
  d.add_options()(
      "pid", po::value<int>()->value_name("PID"), "the owner process (default: the parent)");
  add_mode_options(d);
  add_dir_mode_option(d);
  add_server_options(d);
  return with_command_line("acquire", a, d, {"lockdir"}, [](const po::variables_map& v) {
    lock_options wait;
    const int conflict = apply_wait(v, wait);
    const std::string spec = lock_spec_of(v, v["lockdir"].as<std::string>());
    int code = 0;
    const auto l = open_named(v, spec, acquire_options(v, features_of(spec), wait.wait), code);
    if (!l) return code;
    std::error_code ec;
    handle h = l->acquire(ec);
    if (ec) return report(ec, last_error_message(), conflict);
    print_notice(h);
    std::cout << token_of(h) << std::endl;
    h.detach();
    return exit_code::ok;
  });
}

int cmd_release(const args& a) {
  po::options_description d(
      "Usage: tokenlock release LOCKDIR TOKEN\n\n"
      "Releases the lock held with TOKEN (as printed by acquire or refresh). Exits 3\n"
      "when the lock does not hold TOKEN any more: it was taken over, or TOKEN belongs\n"
      "to another lock.\n\nOptions");
  add_dir_mode_option(d);
  add_server_options(d);
  return with_command_line("release", a, d, {"lockdir", "token"}, [](const po::variables_map& v) {
    return with_adopted(v, [](lock&, handle& h) {
      std::error_code ec;
      h.release(ec);
      return ec ? report(ec, last_error_message()) : exit_code::ok;
    });
  });
}

int cmd_refresh(const args& a) {
  po::options_description d(
      "Usage: tokenlock refresh [--lease SECS] LOCKDIR TOKEN\n\n"
      "Extends the lease of the lock held with TOKEN and prints its token, which\n"
      "changes for a lock directory (the token's name carries its expiry). Exits 3\n"
      "when the lock does not hold TOKEN any more.\n\nOptions");
  add_lease_option(d, "the new lease, from now", acquire_default_lease_s);
  add_dir_mode_option(d);
  add_server_options(d);
  return with_command_line("refresh", a, d, {"lockdir", "token"}, [](const po::variables_map& v) {
    const auto lease = lease_option(v["lease"].as<double>());
    return with_adopted(v, [&](lock& l, handle& h) {
      std::error_code ec;
      if (l.features().lease_adjustable) {
        h.refresh(lease, ec);
      } else if (!v["lease"].defaulted()) {
        throw po::error("--lease has no meaning in refresh of " + escaped(l.spec()) +
                        ": its lease keeps the TTL it was granted with (etcd); acquire with the "
                        "lease you need");
      } else {
        h.refresh(ec);
      }
      if (ec) return report(ec, last_error_message());
      std::cout << token_of(h) << std::endl;
      h.detach();
      return exit_code::ok;
    });
  });
}

int cmd_status(const args& a) {
  po::options_description d(
      "Usage: tokenlock status [--json] LOCKDIR\n\n"
      "Says who holds the lock: free, held by pid P on host H until T, or stale (and\n"
      "why); then, for a lock directory, on a line of its own, how this host's clock\n"
      "compares with the file server's, and whether that is inside the skew allowance\n"
      "(1 s) that leases from other hosts rest on. --json prints one object; its\n"
      "fields are listed in tokenlock(1).\n\nOptions");
  d.add_options()("json", "print a JSON object");
  add_legacy_option(d);
  add_dir_mode_option(d);
  add_server_options(d);
  return with_command_line("status", a, d, {"lockdir"}, [](const po::variables_map& v) {
    int code = 0;
    const auto l =
        open_named(v, lock_spec_of(v, v["lockdir"].as<std::string>()), open_options{}, code);
    if (!l) return code;
    std::error_code ec;
    status_seen s;
    s.holders = l->holders(ec);
    if (ec) return report(ec, last_error_message());
    if (!s.holders.empty()) s.holder = s.holders.front();
    s.location = l->location();
    s.local_clock = l->features().local_clock;
    s.frees_dead_owners = l->features().frees_dead_owners;
    if (s.local_clock) measure_clock(*l, s);
    std::cout << (v.count("json") ? status_json(s) : status_text(s)) << std::flush;
    return exit_code::ok;
  });
}

namespace {

// Frees `l` from the grant `token` names: only that grant, and without
// --force only when it is stale (its lease ended, or its process is gone).
int break_token(lock& l, const std::string& token, bool force) {
  const std::string id = id_of(l, token);
  std::error_code ec;
  // Any of the holders: a shared holder is broken alone, by its id.
  const std::vector<lock_holder> all = l.holders(ec);
  if (ec) return report(ec, last_error_message());
  std::optional<lock_holder> h;
  for (const lock_holder& one : all)
    if (one.id == id && !one.waiting_writer) h = one;
  if (!h && !all.empty()) h = all.front();
  if (!h || h->id != id) {
    // A token that cannot be one is a usage error, as the library judges
    // it: adopting checks the id and changes nothing (the grant, were it
    // held after all, is let go of at once, not released).
    l.adopt(id, ec).detach();
    if (ec == errc::bad_argument) return report(ec, last_error_message());
    return report(make_error_code(errc::lock_lost),
                  "tokenlock: break " + l.spec() + ": the lock is not held by " + token +
                      (h ? " (" + token_of(*h) + " holds it)" : " (it is free)"));
  }
  if (!force && !h->stale)
    return report(make_error_code(errc::busy),
                  "tokenlock: break " + l.spec() + ": refusing to break " + token +
                      ": it is not stale (" + h->reason +
                      "); force it only if you know its owner is gone");
  // By exact id: a grant that changed meanwhile (a refresh renames a
  // token) is not touched, and this reports lock_lost.
  l.break_owner(id, ec);
  if (ec) return report(ec, last_error_message());
  std::cout << "broke " << token << "; the lock is free" << std::endl;
  return exit_code::ok;
}

}  // namespace

int cmd_break(const args& a) {
  po::options_description d(
      "Usage: tokenlock break [--force] LOCKDIR TOKEN\n\n"
      "Frees the lock from exactly TOKEN if it is stale. A token that is not stale is\n"
      "refused (exit 1) unless --force is given; any other token is never touched.\n"
      "Exits 3 when the lock does not hold TOKEN any more.\n\nOptions");
  d.add_options()("force", "take it over even if its owner looks alive and its lease runs");
  add_legacy_option(d);
  add_dir_mode_option(d);
  add_server_options(d);
  return with_command_line("break", a, d, {"lockdir", "token"}, [](const po::variables_map& v) {
    int code = 0;
    const auto l =
        open_named(v, lock_spec_of(v, v["lockdir"].as<std::string>()), open_options{}, code);
    if (!l) return code;
    return break_token(*l, v["token"].as<std::string>(), v.count("force") > 0);
  });
}

}  // namespace tokenlock::cli
