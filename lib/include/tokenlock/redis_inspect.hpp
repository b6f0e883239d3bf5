// tokenlock/redis_inspect.hpp — what a program that shows or breaks Redis
// locks needs besides redis_lock (redis_lock.hpp).
//
// Purpose
//   redis_server_of() names the server a URL points to without its
//   credentials, for output that ends up in logs (status displays,
//   warnings). redis_holder_liveness() says whether the process that holds
//   a grant is known to be gone: a holder on this host whose process no
//   longer exists. Only such a grant may be broken before its lease ends
//   without the operator's word that its owner is gone.
//
// Calling sequence
//     tokenlock::redis_lock lock(url, "coupons");
//     if (auto h = lock.holder())
//       if (tokenlock::redis_holder_liveness(*h) == tokenlock::owner_liveness::dead)
//         lock.break_owner(h->owner);
//     std::cout << tokenlock::redis_server_of(url);  // "redis://10.0.0.5:6379/0"
//
// Errors
//   redis_server_of: errc::bad_argument for a URL redis_lock would refuse;
//   the message says which part is wrong (and never repeats a password).
//   redis_holder_liveness has none: a holder it cannot look at (another
//   host, no pid) is owner_liveness::unknown, and one whose process exists
//   or may not be signalled is alive.
//
// Thread safety
//   Safe from any thread.
#pragma once

#include <string>
#include <system_error>

#include "tokenlock/lock_options.hpp"
#include "tokenlock/redis_lock.hpp"

namespace tokenlock {

// "redis://host:port/db" or "unix:///path/to.sock?db=N".
std::string redis_server_of(const std::string& url);
std::string redis_server_of(const std::string& url, std::error_code& ec) noexcept;

owner_liveness redis_holder_liveness(const redis_holder_info& holder) noexcept;

}  // namespace tokenlock
