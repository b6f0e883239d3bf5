// Parsing an etcd URL (tokenlock/etcd_lock.hpp, The cluster):
//   etcd://[user:password@]host[:port][,host[:port]...][?cacert=PATH]
//   etcds://...   the same over HTTPS
#pragma once

#include <string>
#include <vector>

#include "core/failure.hpp"

namespace tokenlock::detail {

struct etcd_url {
  bool tls = false;
  std::string user, password;     // decoded; user empty: no auth
  std::string cacert;             // decoded; empty: the system's CAs
  std::vector<std::string> members;  // "http://host:port" / "https://[v6]:port"
  // The URL without credentials, for messages.
  std::string display() const;
};

// bad_argument naming the part that is wrong.
failure parse_etcd_url(const std::string& url, etcd_url& out);

}  // namespace tokenlock::detail
