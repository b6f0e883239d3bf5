// Internal failure reporting: a code plus the full message, carried up to the
// public entry points, which either throw it as lock_error or store the
// message for last_error_message() and hand out the code.
#pragma once

#include <exception>
#include <new>
#include <string>
#include <system_error>

#include "tokenlock/errors.hpp"

namespace tokenlock::detail {

struct failure {
  std::error_code code;
  std::string message;
  explicit operator bool() const noexcept { return static_cast<bool>(code); }
};

// The name (errors.hpp, Names) of a return code of the C interface
// (TOKENLOCK_OK, TOKENLOCK_E*): tokenlock_strerror. "unknown" for others.
const char* c_code_name(int code) noexcept;

failure make_failure(std::error_code code, std::string message);
failure make_failure(errc code, std::string message);

// "tokenlock: <step> <path>: <what>: <strerror(ec)>"; the caller appends a
// hint where it knows one.
std::string describe(const char* step, const std::string& path, const std::string& what,
                     std::error_code ec);

void set_last_error_message(const std::string& message) noexcept;

[[noreturn]] void throw_failure(const failure& f);

// Runs `body` (which returns a failure) for an error_code& entry point:
// never throws; bad_alloc and any other exception become error codes.
template <class Body>
void run_noexcept(std::error_code& ec, Body&& body) noexcept {
  try {
    failure f = body();
    ec = f.code;
    if (f) set_last_error_message(f.message);
  } catch (const std::bad_alloc&) {
    ec = std::make_error_code(std::errc::not_enough_memory);
    set_last_error_message("tokenlock: out of memory");
  } catch (const std::system_error& e) {
    ec = e.code();
    set_last_error_message(e.what());
  } catch (const std::exception& e) {
    ec = std::make_error_code(std::errc::io_error);
    set_last_error_message(e.what());
  } catch (...) {
    ec = std::make_error_code(std::errc::io_error);
    set_last_error_message("tokenlock: unknown exception");
  }
}

// The throwing twin of run_noexcept.
template <class Body>
void run_throwing(Body&& body) {
  failure f = body();
  if (f) throw_failure(f);
}

}  // namespace tokenlock::detail
