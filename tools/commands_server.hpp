// The lock commands with a lock server: --redis URL (tokenlock/redis_lock.hpp)
// or --etcd URL[,URL...] (tokenlock/etcd_lock.hpp). The lock is then the
// NAME given in place of LOCKDIR (for write and incr: --lock NAME), and the
// exit codes are the same as with a lock directory. A token, as acquire
// prints it and release, refresh and break take it, is "<fence>.<owner id>":
// the fence first, for scripts that pass it on to a resource that checks it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "cli.hpp"
#include "tokenlock/update_options.hpp"

namespace tokenlock::cli {

enum class lock_server { redis, etcd };

// A lock on a server, as the command line names it.
struct server_lock {
  lock_server kind = lock_server::redis;
  std::string url;
  std::string name;
};

// --redis URL and --etcd URL[,URL...], for the lock commands.
void add_server_options(po::options_description& d);

// The lock server named on the command line (with `name`, the lock's NAME),
// or std::nullopt for a lock directory. Throws po::error (exit 64) when
// both are given, and for --dir-mode, which has no meaning on a server.
std::optional<server_lock> server_lock_of(const po::variables_map& v, const std::string& name);

// Whether this tokenlock was built with the backend (hiredis; the etcd
// client and, in a static command, OpenSSL's archives).
bool server_available(lock_server kind);
// Says that this build has no such backend (exit 70, ENOTSUP).
int server_unavailable(lock_server kind);

// --redis and --etcd: with Redis nobody can see that the script died, nor
// with etcd, so a lock acquired by a script frees only when its lease ends.
constexpr double server_default_lease_s = 300;

int server_acquire(const server_lock& s, std::chrono::milliseconds lease,
                   std::chrono::milliseconds wait, int conflict);
int server_release(const server_lock& s, const std::string& token);
// `lease_given`: --lease was on the command line. etcd cannot change a
// lease after its grant, so there it is refused rather than ignored.
int server_refresh(const server_lock& s, const std::string& token,
                   std::chrono::milliseconds lease, bool lease_given);
int server_status(const server_lock& s, bool json);
int server_break(const server_lock& s, const std::string& token, bool force);
int server_run(const server_lock& s, const std::vector<std::string>& command,
               std::chrono::milliseconds lease, std::chrono::milliseconds wait, int conflict,
               bool verbose);

// write and incr under a server lock (call them once server_available): update_file / increment_counter with
// the commit fenced through FILE.fence (docs/redis.md, docs/etcd.md).
update_result server_update_file(const server_lock& s, const std::string& file,
                                 const update_function& fn, const update_options& uo,
                                 std::chrono::milliseconds wait, std::error_code& ec);
std::uint64_t server_increment(const server_lock& s, const std::string& file, std::uint64_t by,
                               const update_options& uo, std::chrono::milliseconds wait,
                               std::error_code& ec);

}  // namespace tokenlock::cli
