// How open_lock (tokenlock/open_lock.hpp) reads a spec (a server lock
// writes its own with net/server_url.hpp's server_spec_text):
//   a path                      a lock directory
//   redis://..., unix://...,    a Redis server, then #NAME: the lock's name
//   rediss://...
//   etcd://..., etcds://...     an etcd cluster, then #NAME
// The server URL before the '#' is exactly what redis_lock and etcd_lock
// take; the name after it is percent-decoded.
#pragma once

#include <string>
#include <string_view>

#include "core/failure.hpp"
#include "tokenlock/lock.hpp"

namespace tokenlock::detail {

struct lock_spec {
  lock_backend backend = lock_backend::directory;
  std::string location;  // the lock directory, or the server URL without #NAME
  std::string name;      // the lock's name on the server (decoded); empty for a directory
};

// bad_argument, with a message that never shows a password, for a spec
// that is empty, has a scheme of no backend, or names a server and no lock.
failure parse_lock_spec(std::string_view spec, lock_spec& out);

// The spec as a message may show it: a path as it is, a URL masked.
std::string masked_spec(std::string_view spec);

}  // namespace tokenlock::detail
