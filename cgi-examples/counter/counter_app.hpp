// The hit counter behind counter.cgi, as a function from request to
// response, so that it can be tested without a web server.
#pragma once

#include <chrono>
#include <functional>
#include <ostream>
#include <string>

#include "cgi.hpp"
#include "tokenlock/atomic_write.hpp"
#include "tokenlock/lock_options.hpp"

namespace counter {

// Where the data lives when TOKENLOCK_COUNTER_DIR is not set: outside any
// web root, so that counter files can never be served or overwritten
// through the web server.
inline constexpr const char* default_dir = "/var/lib/tokenlock-counter";
inline constexpr int default_wait_ms = 5000;

struct config {
  std::string dir = default_dir;
  // TOKENLOCK_COUNTER_REDIS: a Redis server URL. Set, each counter's lock is
  // the name "counter:<id>" there (tokenlock/redis_lock.hpp) instead of a
  // lock directory beside the file; the commit is fenced by the grant's
  // token (<id>.count.fence beside the file).
  std::string redis;
  // TOKENLOCK_COUNTER_ETCD: an etcd cluster's URL (etcd://host:port,...).
  // Set, each counter's lock is the name "counter:<id>" in that cluster
  // (tokenlock/etcd_lock.hpp), its commit fenced as with Redis. At most one
  // of the two is set.
  std::string etcd;
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
// TOKENLOCK_COUNTER_SYNC, TOKENLOCK_COUNTER_DIR_MODE, TOKENLOCK_COUNTER_REDIS
// and TOKENLOCK_COUNTER_ETCD through `getenv`. False, with the reason, on a
// value that is not valid (the server is then misconfigured: 500).
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
