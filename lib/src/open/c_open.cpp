// tokenlock_open (tokenlock/tokenlock.h): the C interface's lock of any
// backend, beside open_lock in tokenlock::open, so that a C program that
// never calls it links no backend; and the updates under a lock named by
// a spec.
#include "c_api/c_api_support.hpp"
#include "tokenlock/open_lock.hpp"

using namespace tokenlock::detail::c_api;

namespace {

// The lock `spec` names, with the C options (checked by the caller): the
// wait and lease apply to every backend, the rest to lock directories.
std::unique_ptr<tokenlock::lock> open_spec(const char* spec, const tokenlock_options* options,
                                           std::error_code& ec) {
  tokenlock::open_options o;
  o.directory = lock_options_of(options);
  o.lease = o.directory.lease;
  o.wait = o.directory.wait;
  return tokenlock::open_lock(spec, o, ec);
}

// Runs f(lock) on the lock `spec` names, catching everything.
template <class F>
int with_spec(const char* spec, const tokenlock_options* options, F f) {
  return guarded([&]() -> int {
    std::error_code ec;
    std::unique_ptr<tokenlock::lock> lock = open_spec(spec, options, ec);
    if (ec) return failed(ec);
    return f(lock);
  });
}

}  // namespace

extern "C" int tokenlock_open(const char* spec, const tokenlock_options* options,
                              tokenlock_lock** out) {
  if (out) *out = nullptr;
  if (!spec || !out) return bad_argument("tokenlock_open", "spec and out must not be NULL");
  if (!valid(options)) return bad_argument("tokenlock_open", "an option is out of range");
  return with_spec(spec, options, [&](std::unique_ptr<tokenlock::lock>& lock) {
    return hand_out(std::move(lock), out);
  });
}

extern "C" int tokenlock_update_file_spec(const char* path, const char* spec,
                                          const tokenlock_options* options,
                                          tokenlock_update_fn fn, void* arg) {
  if (!path || !spec || !fn)
    return bad_argument("tokenlock_update_file_spec", "path, spec and fn must not be NULL");
  if (!valid(options)) return bad_argument("tokenlock_update_file_spec", "an option is out of range");
  return with_spec(spec, options, [&](std::unique_ptr<tokenlock::lock>& lock) {
    return update_under(*lock, path, options, fn, arg);
  });
}

extern "C" int tokenlock_increment_spec(const char* path, const char* spec, uint64_t by,
                                        const tokenlock_options* options, uint64_t* value) {
  if (!path || !spec) return bad_argument("tokenlock_increment_spec", "path and spec must not be NULL");
  if (!valid(options)) return bad_argument("tokenlock_increment_spec", "an option is out of range");
  return with_spec(spec, options, [&](std::unique_ptr<tokenlock::lock>& lock) {
    return increment_under(*lock, path, by, options, value);
  });
}
