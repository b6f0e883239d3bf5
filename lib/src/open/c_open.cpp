// tokenlock_open (tokenlock/tokenlock.h): the C interface's lock of any
// backend, beside open_lock in tokenlock::open, so that a C program that
// never calls it links no backend; and the updates under a lock named by
// a spec.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

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
  o.mode = o.directory.mode;
  o.slots = o.directory.slots;
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

void fill_holder(const tokenlock::lock_holder& h, tokenlock_holder& out) {
  out = tokenlock_holder{};
  const std::size_t n = std::min(h.id.size(), sizeof out.id - 1);
  std::memcpy(out.id, h.id.data(), n);
  out.id[n] = '\0';
  out.mode = h.mode == tokenlock::lock_mode::shared ? TOKENLOCK_SHARED : TOKENLOCK_EXCLUSIVE;
  out.slots = static_cast<int>(h.slots);
  out.waiting_writer = h.waiting_writer ? 1 : 0;
  out.stale = h.stale ? 1 : 0;
  out.expiry_us =
      std::chrono::duration_cast<std::chrono::microseconds>(h.expires.time_since_epoch()).count();
}

}  // namespace

extern "C" int tokenlock_holders(const char* spec, const tokenlock_options* options,
                                 tokenlock_holder* out, size_t capacity, size_t* count) {
  if (count) *count = 0;
  if (!spec || !count || (!out && capacity))
    return bad_argument("tokenlock_holders", "spec and count must not be NULL, nor out with a capacity");
  if (!valid(options)) return bad_argument("tokenlock_holders", "an option is out of range");
  return with_spec(spec, options, [&](std::unique_ptr<tokenlock::lock>& lock) -> int {
    std::error_code ec;
    const std::vector<tokenlock::lock_holder> all = lock->holders(ec);
    if (ec) return failed(ec);
    for (std::size_t i = 0; i < all.size() && i < capacity; ++i) fill_holder(all[i], out[i]);
    *count = all.size();
    return TOKENLOCK_OK;
  });
}

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
