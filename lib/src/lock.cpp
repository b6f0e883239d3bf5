// tokenlock::lock's throwing forms and tokenlock::handle, over the
// backends' error_code& forms (tokenlock/lock.hpp).
#include "tokenlock/lock.hpp"

#include "core/failure.hpp"
#include "grant_handle.hpp"

namespace tokenlock {
namespace {

// The throwing form of a call that reports through std::error_code&.
template <class Call>
auto or_throw(Call&& call) {
  std::error_code ec;
  auto result = call(ec);
  if (ec) throw lock_error(ec, last_error_message());
  return result;
}

template <class Call>
void or_throw_void(Call&& call) {
  std::error_code ec;
  call(ec);
  if (ec) throw lock_error(ec, last_error_message());
}

const std::string no_id;

}  // namespace

const char* backend_name(lock_backend backend) noexcept {
  switch (backend) {
    case lock_backend::directory: return "directory";
    case lock_backend::redis: return "redis";
    case lock_backend::etcd: return "etcd";
  }
  return "unknown";
}

handle lock::acquire() {
  return or_throw([&](std::error_code& ec) { return acquire_any(ec); });
}
handle lock::acquire(std::error_code& ec) noexcept { return acquire_any(ec); }

std::optional<handle> lock::try_acquire() {
  return or_throw([&](std::error_code& ec) { return try_acquire_any(ec); });
}
std::optional<handle> lock::try_acquire(std::error_code& ec) noexcept { return try_acquire_any(ec); }

handle lock::adopt(const std::string& id) {
  return or_throw([&](std::error_code& ec) { return adopt_any(id, ec); });
}
handle lock::adopt(const std::string& id, std::error_code& ec) noexcept { return adopt_any(id, ec); }

void lock::break_owner(const std::string& id) {
  or_throw_void([&](std::error_code& ec) { break_owner_any(id, ec); });
}
void lock::break_owner(const std::string& id, std::error_code& ec) noexcept {
  break_owner_any(id, ec);
}

std::optional<lock_holder> lock::holder() {
  return or_throw([&](std::error_code& ec) { return holder_any(ec); });
}
std::optional<lock_holder> lock::holder(std::error_code& ec) noexcept { return holder_any(ec); }

std::vector<lock_holder> lock::holders() {
  return or_throw([&](std::error_code& ec) { return holders_any(ec); });
}
std::vector<lock_holder> lock::holders(std::error_code& ec) noexcept { return holders_any(ec); }

std::vector<lock_holder> lock::holders_any(std::error_code& ec) noexcept {
  std::optional<lock_holder> one = holder_any(ec);
  std::vector<lock_holder> all;
  if (ec || !one) return all;
  try {
    all.push_back(std::move(*one));
  } catch (const std::bad_alloc&) {
    ec = std::make_error_code(std::errc::not_enough_memory);
    detail::set_last_error_message("tokenlock: out of memory");
  }
  return all;
}

void handle::release() {
  or_throw_void([&](std::error_code& ec) { release(ec); });
}

void handle::release(std::error_code& ec) noexcept {
  ec.clear();
  if (grant_) grant_->release(ec);
}

void handle::refresh() {
  or_throw_void([&](std::error_code& ec) { refresh(ec); });
}
void handle::refresh(std::error_code& ec) noexcept { refresh_grant(std::nullopt, ec); }

void handle::refresh(std::chrono::milliseconds lease) {
  or_throw_void([&](std::error_code& ec) { refresh(lease, ec); });
}
void handle::refresh(std::chrono::milliseconds lease, std::error_code& ec) noexcept {
  refresh_grant(lease, ec);
}

void handle::refresh_grant(std::optional<std::chrono::milliseconds> lease,
                           std::error_code& ec) noexcept {
  ec.clear();
  if (grant_)
    grant_->refresh(lease, ec);
  else
    detail::run_noexcept(ec, [] { return detail::not_owner_failure("refresh"); });
}

std::string handle::detach() noexcept { return grant_ ? grant_->detach() : std::string(); }

std::chrono::system_clock::time_point handle::expires() const noexcept {
  return grant_ ? grant_->expires() : std::chrono::system_clock::time_point{};
}

std::chrono::milliseconds handle::lease() const noexcept {
  return grant_ ? grant_->lease() : std::chrono::milliseconds(0);
}

std::optional<std::uint64_t> handle::fence() const noexcept {
  return grant_ ? grant_->fence() : std::nullopt;
}

const std::string& handle::id() const noexcept { return grant_ ? grant_->id() : no_id; }

const std::string& handle::notice() const noexcept {
  return grant_ ? grant_->notice() : no_id;
}

lock_mode handle::mode() const noexcept {
  return grant_ ? grant_->mode() : lock_mode::exclusive;
}

}  // namespace tokenlock
