// The hit counter behind counter.cgi, as a function from request to
// response, so that it can be tested without a web server.
#pragma once

#include <chrono>
#include <functional>
#include <ostream>
#include <string>

#include "cgi.hpp"
#include "tokenlock/atomic_write.hpp"
#include "tokenlock/lock.hpp"
#include "tokenlock/lock_options.hpp"

namespace counter {

// Where the data lives when TOKENLOCK_COUNTER_DIR is not set: outside any
// web root, so that counter files can never be served or overwritten
// through the web server.
inline constexpr const char* default_dir = "/var/lib/tokenlock-counter";
inline constexpr int default_wait_ms = 5000;
// A lock directory's lease is the library's default: a killed CGI's lock
// is freed at once on its own host (its process is gone), so the lease
// counts only across hosts, where a commit's flush over a network
// filesystem can take seconds. A lock server frees a killed CGI's lock
// only when the lease ends, and a CGI holds its lock for milliseconds.
inline const std::chrono::milliseconds directory_lease = tokenlock::lock_options{}.lease;
inline constexpr std::chrono::milliseconds server_lease = std::chrono::seconds(10);

struct config {
  std::string dir = default_dir;
  // Where the counters' locks are kept: TOKENLOCK_COUNTER_LOCK, a spec as
  // tokenlock::open_lock reads it (tokenlock/open_lock.hpp) but without a
  // lock's name. A Redis or etcd server's URL: counter ID's lock is the
  // name "counter:ID" there, its commit fenced by the grant's token
  // (ID.count.fence beside the file). A directory: it holds the lock
  // directory ID.count.lock. Empty: the data directory does (`dir`).
  // TOKENLOCK_COUNTER_REDIS=URL and TOKENLOCK_COUNTER_ETCD=URL, the older
  // names, are read as TOKENLOCK_COUNTER_LOCK=URL.
  std::string lock;
  // What keeps them; load_config sets it from `lock`.
  tokenlock::lock_backend backend = tokenlock::lock_backend::directory;
  // The lease of a counter's lock; load_config sets it by the backend.
  std::chrono::milliseconds lease = directory_lease;
  std::chrono::milliseconds wait{default_wait_ms};
  // TOKENLOCK_COUNTER_DIR_MODE: the mode of a lock directory the counter
  // creates (lock_options::dir_mode). With group write (0775, 0770) the
  // counter's lock is shared with the group of the data directory: the
  // web server and a maintenance script of the same group can both use it.
  unsigned dir_mode = tokenlock::lock_options{}.dir_mode;
  // TOKENLOCK_COUNTER_GROUP: the one group the counters' locks are shared
  // with (lock_options::group): lock directories of its members are
  // trusted, and those the counter creates get it. Being in a group
  // without naming it trusts nothing (docs/security.md).
  std::string group;
  tokenlock::durability sync = tokenlock::durability::file_and_dir;
};

// Reads TOKENLOCK_COUNTER_DIR, TOKENLOCK_COUNTER_WAIT_MS,
// TOKENLOCK_COUNTER_SYNC, TOKENLOCK_COUNTER_DIR_MODE, TOKENLOCK_COUNTER_GROUP
// and TOKENLOCK_COUNTER_LOCK (or TOKENLOCK_COUNTER_REDIS or _ETCD) through
// `getenv`. False, with the reason, on a value that is not valid, on two of
// the lock's variables set, and on a lock server this counter.cgi was built
// without (the server is then misconfigured: 500). The reason never shows a
// password.
bool load_config(const std::function<const char*(const char*)>& getenv, config& out,
                 std::string& error);

struct request {
  std::string method;  // REQUEST_METHOD
  std::string query;   // QUERY_STRING
};

// GET ?id=NAME[&format=text|json|svg][&peek=1]: increments counter NAME
// (unless peek=1) and returns its value. HEAD never increments. Details of
// failures go to `log` (the server's error log); responses never show a
// path.
cgi::response handle(const request& req, const config& cfg, std::ostream& log);

}  // namespace counter
