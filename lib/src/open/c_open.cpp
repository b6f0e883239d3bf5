// tokenlock_open (tokenlock/tokenlock.h): the C interface's lock of any
// backend, beside open_lock in tokenlock::open, so that a C program that
// never calls it links no backend.
#include "c_api/c_api_support.hpp"
#include "tokenlock/open_lock.hpp"

using namespace tokenlock::detail::c_api;

extern "C" int tokenlock_open(const char* spec, const tokenlock_options* options,
                              tokenlock_lock** out) {
  if (out) *out = nullptr;
  if (!spec || !out) return bad_argument("tokenlock_open", "spec and out must not be NULL");
  if (!valid(options)) return bad_argument("tokenlock_open", "an option is out of range");
  return guarded([&]() -> int {
    tokenlock::open_options o;
    o.directory = lock_options_of(options);
    o.lease = o.directory.lease;
    o.wait = o.directory.wait;
    std::error_code ec;
    std::unique_ptr<tokenlock::lock> lock = tokenlock::open_lock(spec, o, ec);
    if (ec) return failed(ec);
    return hand_out(std::move(lock), out);
  });
}
