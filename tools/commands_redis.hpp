// The lock commands with --redis URL: the lock is a NAME in a Redis server
// (tokenlock/redis_lock.hpp). The same exit codes as with a lock
// directory. A token, as acquire prints it and release, refresh and break
// take it, is "<fence>.<owner id>": the fence first, for scripts that pass
// it on to a resource that checks it.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace tokenlock::cli {

// Whether this tokenlock was built with the Redis backend (hiredis).
bool redis_available();

int redis_acquire(const std::string& url, const std::string& name, std::chrono::milliseconds lease,
                  std::chrono::milliseconds wait, int conflict);
int redis_release(const std::string& url, const std::string& name, const std::string& token);
int redis_refresh(const std::string& url, const std::string& name, const std::string& token,
                  std::chrono::milliseconds lease);
int redis_status(const std::string& url, const std::string& name, bool json);
int redis_break(const std::string& url, const std::string& name, const std::string& token,
                bool force);
#if TOKENLOCK_HAVE_REDIS
}  // namespace tokenlock::cli
namespace tokenlock {
class redis_handle;
}
namespace tokenlock::cli {
// Warns on stderr when the server's clock was behind the lock's last fence.
void warn_if_clock_behind(const redis_handle& h, const std::string& url);
#endif

int redis_run(const std::string& url, const std::string& name,
              const std::vector<std::string>& command, std::chrono::milliseconds lease,
              std::chrono::milliseconds wait, int conflict, bool verbose);

}  // namespace tokenlock::cli
