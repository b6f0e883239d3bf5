// The lock a command names, whatever keeps it: LOCKDIR, or a NAME with
// --redis URL or --etcd URL. The command line becomes one spec string
// (tokenlock/open_lock.hpp) and the commands work on the tokenlock::lock
// it opens: what differs between backends is asked of the lock
// (lock::features(), lock::location(), handle::notice()), never of the
// command line again.
//
// A token, as acquire prints it and release, refresh, break and commit
// take it: a lock directory's token name, or "<fence>.<owner id>" for a
// lock whose grants carry fences (the fence first, for scripts that pass
// it on to a resource that checks it).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "cli.hpp"
#include "tokenlock/lock.hpp"
#include "tokenlock/open_lock.hpp"

namespace tokenlock::cli {

// --redis URL and --etcd URL[,URL...], for the lock commands.
void add_server_options(po::options_description& d);

// The spec of the lock the command line names: `name` is LOCKDIR, or the
// lock's NAME with --redis or --etcd (whose URL may come from env:VAR or
// file:PATH). Throws po::error (exit 64) when both servers are given, and
// for the lock directory's options (--dir-mode, --group, --legacy-timeout)
// with a server.
std::string lock_spec_of(const po::variables_map& v, const std::string& name);
// Whether the command line names a lock server (--redis or --etcd).
bool names_server(const po::variables_map& v);

// --redis and --etcd: a server cannot see that a script died, so a lock it
// grants to one frees only when its lease ends: a shorter default.
constexpr double server_default_lease_s = 300;

// The lock `spec` names with `options`, or nullptr after reporting
// why not (bad_argument: exit 64; backend_unavailable: exit 69) in `code`.
std::unique_ptr<lock> open_or_report(const std::string& spec, const open_options& options,
                                     int& code);

// The backend's features, for choices made before the lock is opened with
// its final options (a default lease). Opening connects to nothing.
lock_features features_of(const std::string& spec);

// A grant's token (see above), and the id in a token for `lock`'s
// adopt() and break_owner(). id_of throws po::error for a string that is
// not a token of such a lock.
std::string token_of(const handle& h);
std::string token_of(const lock_holder& h);
std::string id_of(const lock& l, const std::string& token);

// Prints the grant's notice (handle::notice()), if any, on stderr.
void print_notice(const handle& h);

}  // namespace tokenlock::cli
