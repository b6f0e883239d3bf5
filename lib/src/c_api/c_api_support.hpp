// What the C interface's entry points share (c_api.cpp, and tokenlock_open
// in open/c_open.cpp, which lives with open_lock in tokenlock::open): the
// held lock behind a tokenlock_lock, and the way failures become codes.
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <system_error>

#include "tokenlock/errors.hpp"
#include "tokenlock/lock.hpp"
#include "tokenlock/lock_options.hpp"
#include "tokenlock/tokenlock.h"

// A held lock of any backend.
struct tokenlock_lock {
  std::unique_ptr<tokenlock::lock> lock;
  tokenlock::handle handle;
  // A refresh found the token taken over: the release reports it again,
  // so that a caller who checks only the release still hears of it.
  std::string lost;
};

namespace tokenlock::detail::c_api {

// Sets the calling thread's message (and errno) and returns `code`.
int fail(int code, std::string message, int err = 0);
int bad_argument(const char* function, const char* what);

// The return code for a failed call of the C++ library, whose message is
// in tokenlock::last_error_message() when it came through an error_code&
// form.
int failed(std::error_code ec, const std::string& message);
int failed(std::error_code ec);

// For the throwing paths that remain (constructors, a callback's failure).
template <class F>
int guarded(F f) noexcept {
  try {
    return f();
  } catch (const tokenlock::lock_error& e) {
    return failed(e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return fail(TOKENLOCK_ENOMEM, "tokenlock: out of memory", ENOMEM);
  } catch (const std::exception& e) {
    return fail(TOKENLOCK_ESYSTEM, std::string("tokenlock: ") + e.what(), 0);
  } catch (...) {
    return fail(TOKENLOCK_ESYSTEM, "tokenlock: unknown failure", 0);
  }
}

// Whether every field of `o` is -1 (the default) or in range.
bool valid(const tokenlock_options* o);
tokenlock::lock_options lock_options_of(const tokenlock_options* o);

// Acquires `lock` (waiting as its options say) and hands it out as *out.
int hand_out(std::unique_ptr<tokenlock::lock> lock, tokenlock_lock** out);

// The update of tokenlock_update_file and tokenlock_update_file_spec under
// `lock`, whatever its backend: `fn` computes, TOKENLOCK_EABORTED when it
// declines. Arguments checked by the caller.
int update_under(tokenlock::lock& lock, const char* path, const tokenlock_options* options,
                 tokenlock_update_fn fn, void* arg);
// The same for tokenlock_increment and tokenlock_increment_spec.
int increment_under(tokenlock::lock& lock, const char* path, std::uint64_t by,
                    const tokenlock_options* options, std::uint64_t* value);

}  // namespace tokenlock::detail::c_api
