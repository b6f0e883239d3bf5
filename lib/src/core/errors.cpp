#include "tokenlock/errors.hpp"

#include <cerrno>

#include "core/failure.hpp"
#include "tokenlock/tokenlock.h"

namespace tokenlock {
namespace {

class category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "tokenlock"; }
  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::busy: return "lock is busy";
      case errc::timed_out: return "timed out waiting for the lock";
      case errc::lock_lost: return "lock was lost (taken over by another process)";
      case errc::token_missing: return "lock directory holds no token";
      case errc::lock_corrupt: return "lock directory is corrupt";
      case errc::corrupt_data: return "data file is corrupt";
      case errc::bad_argument: return "bad argument";
      case errc::not_owner: return "handle does not own the lock";
      case errc::dir_sync_failed: return "renamed into place, but the directory sync failed";
      case errc::not_fenced: return "the commit cannot be fenced";
      case errc::stale_data: return "the filesystem served a stale version of the file";
      case errc::server_error: return "the lock server answered an error";
      case errc::not_replicated: return "too few replicas acknowledged the grant";
      case errc::untrusted: return "another user could change the lock directory";
      case errc::backend_unavailable: return "this build has no such lock backend";
      case errc::not_supported: return "not supported where the lock is";
    }
    return "unknown tokenlock error";
  }
};

thread_local std::string t_last_message;

// The one table of names (errors.hpp, Names). A tokenlock::errc row's C
// code is the errc's value (c_api/c_api.cpp asserts that they agree); the rest
// are the C interface's codes for what is not an errc.
struct named {
  const char* name;
  int c_code;
};
constexpr named names[] = {
    {"ok", TOKENLOCK_OK},
    {"busy", TOKENLOCK_EBUSY},
    {"timed_out", TOKENLOCK_ETIMEDOUT},
    {"lock_lost", TOKENLOCK_ELOCK_LOST},
    {"token_missing", TOKENLOCK_ETOKEN_MISSING},
    {"lock_corrupt", TOKENLOCK_ELOCK_CORRUPT},
    {"corrupt_data", TOKENLOCK_ECORRUPT_DATA},
    {"bad_argument", TOKENLOCK_EBAD_ARGUMENT},
    {"not_owner", TOKENLOCK_ENOT_OWNER},
    {"dir_sync_failed", TOKENLOCK_EDIR_SYNC_FAILED},
    {"not_fenced", TOKENLOCK_ENOT_FENCED},
    {"stale_data", TOKENLOCK_ESTALE_DATA},
    {"server_error", TOKENLOCK_ESERVER},
    {"not_replicated", TOKENLOCK_ENOT_REPLICATED},
    {"untrusted", TOKENLOCK_EUNTRUSTED},
    {"backend_unavailable", TOKENLOCK_EBACKEND_UNAVAILABLE},
    {"not_supported", TOKENLOCK_ENOT_SUPPORTED},
    {"aborted", TOKENLOCK_EABORTED},
    {"system", TOKENLOCK_ESYSTEM},
    {"no_memory", TOKENLOCK_ENOMEM},
};
constexpr int first_errc = static_cast<int>(errc::busy);
constexpr int last_errc = static_cast<int>(errc::not_supported);
static_assert(sizeof names / sizeof names[0] == last_errc + 4,
              "every errc has its row in the table of names");

const char* unknown_name = "unknown";

}  // namespace

const std::error_category& error_category() noexcept {
  static const category instance;
  return instance;
}

std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), error_category()}; }

const char* error_name(std::error_code ec) noexcept {
  if (!ec) return detail::c_code_name(TOKENLOCK_OK);
  if (ec.category() == error_category()) {
    if (ec.value() < first_errc || ec.value() > last_errc) return unknown_name;
    return detail::c_code_name(ec.value());
  }
  if (ec.category() == std::generic_category() || ec.category() == std::system_category())
    return detail::c_code_name(ec.value() == ENOMEM ? TOKENLOCK_ENOMEM : TOKENLOCK_ESYSTEM);
  return unknown_name;
}

std::optional<std::error_code> error_from_name(std::string_view name, int errno_value) noexcept {
  for (const named& n : names) {
    if (name != n.name) continue;
    if (n.c_code == TOKENLOCK_OK) return std::error_code();
    if (n.c_code >= first_errc && n.c_code <= last_errc) return make_error_code(static_cast<errc>(n.c_code));
    if (n.c_code == TOKENLOCK_ENOMEM) return std::make_error_code(std::errc::not_enough_memory);
    if (n.c_code == TOKENLOCK_ESYSTEM && errno_value > 0)
      return std::error_code(errno_value, std::generic_category());
    return std::nullopt;  // "system" without its errno, or the C interface's "aborted"
  }
  return std::nullopt;
}

lock_error::lock_error(std::error_code ec, const std::string& message)
    : std::system_error(ec, message), message_(message) {}

const char* lock_error::what() const noexcept { return message_.what(); }

const std::string& last_error_message() noexcept { return t_last_message; }

namespace detail {

const char* c_code_name(int code) noexcept {
  for (const named& n : names)
    if (n.c_code == code) return n.name;
  return unknown_name;
}

failure make_failure(std::error_code code, std::string message) {
  return failure{code, std::move(message)};
}

failure make_failure(errc code, std::string message) {
  return failure{make_error_code(code), std::move(message)};
}

std::string describe(const char* step, const std::string& path, const std::string& what,
                     std::error_code ec) {
  std::string s = "tokenlock: ";
  s += step;
  s += ' ';
  s += path;
  s += ": ";
  s += what;
  if (ec) {
    s += ": ";
    s += ec.message();
  }
  return s;
}

void set_last_error_message(const std::string& message) noexcept {
  try {
    t_last_message = message;
  } catch (...) {
    t_last_message.clear();
  }
}

void throw_failure(const failure& f) { throw lock_error(f.code, f.message); }

}  // namespace detail
}  // namespace tokenlock
