// The C interface (tokenlock/tokenlock.h) over the C++ library. Every entry
// point catches everything: a C caller, or an interpreter calling through
// an FFI, has no way to handle a C++ exception.
#include "tokenlock/tokenlock.h"

#include <cerrno>
#include <chrono>
#include <new>
#include <optional>
#include <string>

#include "c_api/c_api_support.hpp"
#include "core/failure.hpp"
#include "tokenlock/atomic_write.hpp"
#include "tokenlock/errors.hpp"
#include "tokenlock/rename_lock.hpp"
#include "tokenlock/update.hpp"
#include "tokenlock/version.hpp"

struct tokenlock_buffer {
  std::string data;
};

namespace tokenlock::detail::c_api {

thread_local std::string last_message;
thread_local int last_errno = 0;

int fail(int code, std::string message, int err) {
  last_message = std::move(message);
  last_errno = err;
  return code;
}

int bad_argument(const char* function, const char* what) {
  return fail(TOKENLOCK_EBAD_ARGUMENT, std::string("tokenlock: ") + function + ": " + what);
}

int failed(std::error_code ec, const std::string& message) {
  if (ec.category() == tokenlock::error_category())
    return fail(ec.value(), message);
  if (ec.value() == ENOMEM) return fail(TOKENLOCK_ENOMEM, message, ENOMEM);
  return fail(TOKENLOCK_ESYSTEM, message, ec.value());
}

int failed(std::error_code ec) { return failed(ec, tokenlock::last_error_message()); }

// A field of tokenlock_options is the default where it is -1 (or the
// options are absent). Other negative values are refused.
bool valid(const tokenlock_options* o) {
  if (!o) return true;
  auto ok = [](std::int64_t v) { return v >= -1; };
  return ok(o->wait_ms) && ok(o->lease_ms) && ok(o->legacy_timeout_ms) &&
         (o->dir_mode == -1 || (o->dir_mode >= 0 && o->dir_mode <= 07777)) &&
         (o->sync == -1 || (o->sync >= TOKENLOCK_SYNC_NONE && o->sync <= TOKENLOCK_SYNC_FILE_AND_DIR)) &&
         (o->mode == -1 || o->mode == TOKENLOCK_EXCLUSIVE || o->mode == TOKENLOCK_SHARED) &&
         (o->slots == -1 || (o->slots >= 1 && o->slots <= static_cast<int>(tokenlock::max_slots)));
}

tokenlock::lock_options lock_options_of(const tokenlock_options* o) {
  tokenlock::lock_options l;
  if (!o) return l;
  if (o->wait_ms >= 0) l.wait = std::chrono::milliseconds(o->wait_ms);
  if (o->lease_ms >= 0) l.lease = std::chrono::milliseconds(o->lease_ms);
  if (o->legacy_timeout_ms >= 0) l.legacy_timeout = std::chrono::milliseconds(o->legacy_timeout_ms);
  if (o->dir_mode >= 0) l.dir_mode = static_cast<unsigned>(o->dir_mode);
  if (o->group) l.group = o->group;
  if (o->mode == TOKENLOCK_SHARED) l.mode = tokenlock::lock_mode::shared;
  if (o->slots > 0) {
    l.mode = tokenlock::lock_mode::shared;
    l.slots = static_cast<std::uint32_t>(o->slots);
  }
  return l;
}

int hand_out(std::unique_ptr<tokenlock::lock> lock, tokenlock_lock** out) {
  auto l = std::make_unique<tokenlock_lock>();
  std::error_code ec;
  l->handle = lock->acquire(ec);
  if (ec) return failed(ec);
  l->lock = std::move(lock);
  *out = l.release();
  return TOKENLOCK_OK;
}

}  // namespace tokenlock::detail::c_api

using namespace tokenlock::detail::c_api;

namespace {

// The C codes are tokenlock::errc's values, so that a code passes through.
static_assert(TOKENLOCK_EBUSY == static_cast<int>(tokenlock::errc::busy));
static_assert(TOKENLOCK_ETIMEDOUT == static_cast<int>(tokenlock::errc::timed_out));
static_assert(TOKENLOCK_ELOCK_LOST == static_cast<int>(tokenlock::errc::lock_lost));
static_assert(TOKENLOCK_ETOKEN_MISSING == static_cast<int>(tokenlock::errc::token_missing));
static_assert(TOKENLOCK_ELOCK_CORRUPT == static_cast<int>(tokenlock::errc::lock_corrupt));
static_assert(TOKENLOCK_ECORRUPT_DATA == static_cast<int>(tokenlock::errc::corrupt_data));
static_assert(TOKENLOCK_EBAD_ARGUMENT == static_cast<int>(tokenlock::errc::bad_argument));
static_assert(TOKENLOCK_ENOT_OWNER == static_cast<int>(tokenlock::errc::not_owner));
static_assert(TOKENLOCK_EDIR_SYNC_FAILED == static_cast<int>(tokenlock::errc::dir_sync_failed));
static_assert(TOKENLOCK_ENOT_FENCED == static_cast<int>(tokenlock::errc::not_fenced));
static_assert(TOKENLOCK_ESTALE_DATA == static_cast<int>(tokenlock::errc::stale_data));
static_assert(TOKENLOCK_ESERVER == static_cast<int>(tokenlock::errc::server_error));
static_assert(TOKENLOCK_ENOT_REPLICATED == static_cast<int>(tokenlock::errc::not_replicated));
static_assert(TOKENLOCK_EUNTRUSTED == static_cast<int>(tokenlock::errc::untrusted));
static_assert(TOKENLOCK_EBACKEND_UNAVAILABLE ==
              static_cast<int>(tokenlock::errc::backend_unavailable));
static_assert(TOKENLOCK_ENOT_SUPPORTED == static_cast<int>(tokenlock::errc::not_supported));

tokenlock::write_options write_options_of(const tokenlock_options* o) {
  tokenlock::write_options w;
  if (o && o->sync >= 0) w.sync = static_cast<tokenlock::durability>(o->sync);
  return w;
}

tokenlock::update_options update_options_of(const tokenlock_options* o) {
  tokenlock::update_options u;
  u.write = write_options_of(o);
  return u;
}

std::string lock_dir_for(const char* path, const char* lockdir) {
  return lockdir ? std::string(lockdir) : std::string(path) + ".lock";
}

int acquire(const char* function, const char* lockdir, const tokenlock_options* options,
            bool once, tokenlock_lock** out) {
  if (out) *out = nullptr;
  if (!lockdir || !out) return bad_argument(function, "lockdir and out must not be NULL");
  if (!valid(options)) return bad_argument(function, "an option is out of range");
  return guarded([&]() -> int {
    tokenlock::lock_options lo = lock_options_of(options);
    // With no wait the lock's answer to a held lock is busy, as the header says.
    if (once) lo.wait = std::chrono::milliseconds(0);
    return hand_out(std::make_unique<tokenlock::rename_lock>(lockdir, lo), out);
  });
}

// Thrown through update_file when the C callback declines: nothing is
// written and the lock is released on the way out.
struct declined {};

}  // namespace

namespace tokenlock::detail::c_api {

int update_under(tokenlock::lock& lock, const char* path, const tokenlock_options* options,
                 tokenlock_update_fn fn, void* arg) {
  std::error_code ec;
  try {
    tokenlock::update_file(
        path, lock,
        [&](const std::optional<std::string>& current) {
          tokenlock_buffer next;
          const int rc = fn(arg, current ? current->data() : "", current ? current->size() : 0,
                            current ? 1 : 0, &next);
          if (rc != 0) throw declined{};
          return std::move(next.data);
        },
        update_options_of(options), ec);
  } catch (const declined&) {
    return fail(TOKENLOCK_EABORTED, std::string("tokenlock: update ") + path +
                                        ": the update function declined (returned non-zero); "
                                        "nothing was written");
  }
  return ec ? failed(ec) : TOKENLOCK_OK;
}

int increment_under(tokenlock::lock& lock, const char* path, std::uint64_t by,
                    const tokenlock_options* options, std::uint64_t* value) {
  std::error_code ec;
  const std::uint64_t v =
      tokenlock::increment_counter(path, lock, by, update_options_of(options), ec);
  // After dir_sync_failed the count is committed: its value is handed out.
  if (value && (!ec || ec == tokenlock::errc::dir_sync_failed)) *value = v;
  return ec ? failed(ec) : TOKENLOCK_OK;
}

}  // namespace tokenlock::detail::c_api

extern "C" {

void tokenlock_options_init(tokenlock_options* options) {
  if (!options) return;
  options->wait_ms = -1;
  options->lease_ms = -1;
  options->legacy_timeout_ms = -1;
  options->dir_mode = -1;
  options->sync = -1;
  options->group = nullptr;
  options->mode = -1;
  options->slots = -1;
}

int tokenlock_acquire(const char* lockdir, const tokenlock_options* options,
                      tokenlock_lock** out) {
  return acquire("tokenlock_acquire", lockdir, options, false, out);
}

int tokenlock_try_acquire(const char* lockdir, const tokenlock_options* options,
                          tokenlock_lock** out) {
  return acquire("tokenlock_try_acquire", lockdir, options, true, out);
}

int tokenlock_release(tokenlock_lock* lock) {
  if (!lock) return TOKENLOCK_OK;
  std::error_code ec;
  lock->handle.release(ec);
  int rc = ec ? failed(ec) : TOKENLOCK_OK;
  if (!ec && !lock->lost.empty()) rc = fail(TOKENLOCK_ELOCK_LOST, lock->lost);
  // Released or not, the caller is done with it; the handle's destructor
  // does not try again (it tries only while it still owns the token, which
  // after lock_lost it does not, and never in a forked child).
  lock->handle.detach();
  delete lock;
  return rc;
}

int tokenlock_refresh(tokenlock_lock* lock, const tokenlock_options* options) {
  if (!lock) return bad_argument("tokenlock_refresh", "lock must not be NULL");
  if (!valid(options)) return bad_argument("tokenlock_refresh", "an option is out of range");
  std::error_code ec;
  if (options && options->lease_ms >= 0)
    lock->handle.refresh(std::chrono::milliseconds(options->lease_ms), ec);
  else
    lock->handle.refresh(ec);
  if (!ec) return TOKENLOCK_OK;
  const int rc = failed(ec);
  if (rc == TOKENLOCK_ELOCK_LOST) lock->lost = last_message;
  return rc;
}

const char* tokenlock_token(const tokenlock_lock* lock) {
  return lock ? lock->handle.id().c_str() : "";
}

uint64_t tokenlock_fence(const tokenlock_lock* lock) {
  return lock ? lock->handle.fence().value_or(0) : 0;
}

int64_t tokenlock_expiry_us(const tokenlock_lock* lock) {
  if (!lock) return 0;
  return std::chrono::duration_cast<std::chrono::microseconds>(
             lock->handle.expires().time_since_epoch())
      .count();
}

int tokenlock_mode(const tokenlock_lock* lock) {
  return lock && lock->handle.mode() == tokenlock::lock_mode::shared ? TOKENLOCK_SHARED
                                                                      : TOKENLOCK_EXCLUSIVE;
}

int tokenlock_write_file(const char* path, const void* data, size_t len,
                         const tokenlock_options* options) {
  if (!path || (!data && len)) return bad_argument("tokenlock_write_file", "path and data must not be NULL");
  if (!valid(options)) return bad_argument("tokenlock_write_file", "an option is out of range");
  return guarded([&]() -> int {
    std::error_code ec;
    tokenlock::atomic_write(path,
                            std::string_view(static_cast<const char*>(data ? data : ""), len),
                            write_options_of(options), ec);
    return ec ? failed(ec) : TOKENLOCK_OK;
  });
}

int tokenlock_commit_file(tokenlock_lock* lock, const char* path, const void* data, size_t len,
                          const tokenlock_options* options) {
  if (!lock || !path || (!data && len))
    return bad_argument("tokenlock_commit_file", "lock, path and data must not be NULL");
  if (!valid(options)) return bad_argument("tokenlock_commit_file", "an option is out of range");
  return guarded([&]() -> int {
    std::error_code ec;
    tokenlock::commit_file(lock->handle, path,
                           std::string_view(static_cast<const char*>(data ? data : ""), len),
                           write_options_of(options), ec);
    if (!ec) return TOKENLOCK_OK;
    const int rc = failed(ec);
    if (rc == TOKENLOCK_ELOCK_LOST) lock->lost = last_message;
    return rc;
  });
}

int tokenlock_buffer_set(tokenlock_buffer* buffer, const void* data, size_t len) {
  if (!buffer || (!data && len)) return bad_argument("tokenlock_buffer_set", "buffer and data must not be NULL");
  return guarded([&]() -> int {
    buffer->data.assign(static_cast<const char*>(data ? data : ""), len);
    return TOKENLOCK_OK;
  });
}

int tokenlock_update_file(const char* path, const char* lockdir,
                          const tokenlock_options* options, tokenlock_update_fn fn, void* arg) {
  if (!path || !fn) return bad_argument("tokenlock_update_file", "path and fn must not be NULL");
  if (!valid(options)) return bad_argument("tokenlock_update_file", "an option is out of range");
  return guarded([&]() -> int {
    tokenlock::rename_lock lock(lock_dir_for(path, lockdir), lock_options_of(options));
    return update_under(lock, path, options, fn, arg);
  });
}

int tokenlock_increment(const char* path, const char* lockdir, uint64_t by,
                        const tokenlock_options* options, uint64_t* value) {
  if (!path) return bad_argument("tokenlock_increment", "path must not be NULL");
  if (!valid(options)) return bad_argument("tokenlock_increment", "an option is out of range");
  return guarded([&]() -> int {
    tokenlock::rename_lock lock(lock_dir_for(path, lockdir), lock_options_of(options));
    return increment_under(lock, path, by, options, value);
  });
}

const char* tokenlock_last_error(void) { return last_message.c_str(); }

int tokenlock_last_errno(void) { return last_errno; }

// The library's one table of names (errors.hpp): the names the command's
// --errors=json line and the language modules use too.
const char* tokenlock_strerror(int code) { return tokenlock::detail::c_code_name(code); }

const char* tokenlock_version(void) { return TOKENLOCK_VERSION; }

}  // extern "C"
