#include "tokenlock/keep_alive.hpp"

#include "tokenlock/errors.hpp"
#include "tokenlock/rename_lock.hpp"

#include "core/failure.hpp"

namespace tokenlock {

std::error_code keep_alive::choose_interval(bool owns, std::chrono::milliseconds lease,
                                            const keep_alive_options& options,
                                            std::chrono::milliseconds& interval,
                                            std::string& message) {
  if (!owns) {
    message = "tokenlock: keep_alive: the handle owns no token (released, moved from, or "
              "inherited by fork); acquire the lock first";
    return make_error_code(errc::not_owner);
  }
  interval = options.interval.count() > 0 ? options.interval : lease / 3;
  if (interval.count() <= 0 || interval >= lease) {
    message = "tokenlock: keep_alive: the interval (" + std::to_string(interval.count()) +
              " ms) must be positive and shorter than the lease (" + std::to_string(lease.count()) +
              " ms), or the lease ends before the next refresh";
    return make_error_code(errc::bad_argument);
  }
  return {};
}

keep_alive::keep_alive(refresher refresh, bool owns, std::chrono::milliseconds lease,
                       keep_alive_options options, std::error_code* ec)
    : refresh_(std::move(refresh)), on_refresh_(std::move(options.on_refresh)) {
  std::string message;
  std::error_code failed = choose_interval(owns, lease, options, interval_, message);
  if (!failed) {
    try {
      thread_ = std::thread([this] { run(); });
      return;
    } catch (const std::system_error& e) {
      failed = e.code();
      message = std::string("tokenlock: keep_alive: cannot start its thread: ") + e.what();
    }
  }
  if (!ec) throw lock_error(failed, message);
  *ec = failed;
  // Inert: stop() reports why, and the error_code form's caller finds the
  // text where every other one leaves it.
  stopping_ = true;
  error_ = failed;
  message_ = message;
  detail::set_last_error_message(message);
}

keep_alive::keep_alive(lock_handle& handle, keep_alive_options options)
    : keep_alive([&handle](std::error_code& ec) { handle.refresh(ec); }, handle.owns(),
                 handle.lease(), std::move(options), nullptr) {}

keep_alive::keep_alive(lock_handle& handle, keep_alive_options options,
                       std::error_code& ec) noexcept
    : keep_alive([&handle](std::error_code& e) { handle.refresh(e); }, handle.owns(),
                 handle.lease(), std::move(options), &ec) {}

keep_alive::keep_alive(handle& h, keep_alive_options options)
    : keep_alive([&h](std::error_code& ec) { h.refresh(ec); }, h.owns(), h.lease(),
                 std::move(options), nullptr) {}

keep_alive::keep_alive(handle& h, keep_alive_options options, std::error_code& ec) noexcept
    : keep_alive([&h](std::error_code& e) { h.refresh(e); }, h.owns(), h.lease(),
                 std::move(options), &ec) {}

keep_alive::~keep_alive() { stop(); }

void keep_alive::run() noexcept {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
    // The refresh runs unlocked so that stop() and the queries never wait
    // for a rename; only this thread touches the handle meanwhile.
    lock.unlock();
    std::error_code ec;
    refresh_(ec);
    std::string message = ec ? last_error_message() : std::string();
    if (on_refresh_) {
      try {
        on_refresh_(ec);
      } catch (...) {
        // A logging callback's failure must not end the keeping (or the
        // process, from a noexcept thread function).
      }
    }
    lock.lock();
    if (!ec) {
      ++refreshes_;
      error_.clear();
      message_.clear();
      continue;
    }
    error_ = ec;
    message_ = std::move(message);
    // Anything else may be transient (EIO on a network filesystem): the
    // next interval tries again while the lease lasts.
    if (ec == errc::lock_lost || ec == errc::not_owner) {
      lost_ = true;
      break;
    }
  }
}

std::error_code keep_alive::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

bool keep_alive::lost() const noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  return lost_;
}

std::uint64_t keep_alive::refreshes() const noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  return refreshes_;
}

std::string keep_alive::last_message() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return message_;
}

}  // namespace tokenlock
