// An owner id as the Redis and etcd locks write it: the owner part of a
// held token ("<host>-<hash8>.<pid>.<start>.<nonce>", token_name.hpp), and
// whether the process it names is known to be gone.
#pragma once

#include <string>
#include <string_view>

#include "tokenlock/lock_options.hpp"

namespace tokenlock::detail {

// The host tag and pid an owner id names; false (both left empty) when
// `owner` is not one a tokenlock wrote.
bool parse_owner_id(std::string_view owner, std::string& host_tag, int& pid);

// dead when `host_tag` is this host's and no process `pid` exists;
// unknown for another host (or no pid); alive otherwise, including a
// process we may not signal. Never throws.
owner_liveness process_liveness(std::string_view host_tag, int pid) noexcept;

// The same from the owner id itself: unknown when it does not parse.
owner_liveness owner_id_liveness(std::string_view owner) noexcept;

}  // namespace tokenlock::detail
