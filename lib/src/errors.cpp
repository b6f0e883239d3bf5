#include "tokenlock/errors.hpp"

#include "failure.hpp"

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
    }
    return "unknown tokenlock error";
  }
};

thread_local std::string t_last_message;

}  // namespace

const std::error_category& error_category() noexcept {
  static const category instance;
  return instance;
}

std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), error_category()}; }

lock_error::lock_error(std::error_code ec, const std::string& message)
    : std::system_error(ec, message), message_(message) {}

const char* lock_error::what() const noexcept { return message_.what(); }

const std::string& last_error_message() noexcept { return t_last_message; }

namespace detail {

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
