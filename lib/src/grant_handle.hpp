// What the lock servers' locks and handles (redis_lock and redis_handle,
// etcd_lock and etcd_handle) do alike: acquire and try_acquire around one
// attempt, the handle's destructor and move assignment, and the throwing
// form of each call that reports through std::error_code&.
#pragma once

#include <new>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "core/failure.hpp"

namespace tokenlock::detail {

// A grant the handle still owns is released, its error dropped: the
// destructor cannot report it, and an assignment over a held grant is the
// caller's choice to give it up.
template <class Handle>
void release_quietly(Handle& h) noexcept {
  if (h.owns()) {
    std::error_code ignored;
    h.release(ignored);
  }
}

// Move assignment through the destructor and the move constructor, so
// that each handle lists its members once: ours is released first (by the
// destructor, once), then `other`'s grant taken, leaving `other` owning
// nothing. The handles have no const or reference members, so ending one's
// lifetime and constructing it again in its place is well defined.
template <class Handle>
Handle& move_assign(Handle& self, Handle&& other) noexcept {
  if (&self != &other) {
    self.~Handle();
    new (&self) Handle(std::move(other));
  }
  return self;
}

// A call on a handle that holds nothing.
inline failure not_owner_failure(const char* step) {
  return make_failure(errc::not_owner,
                      "tokenlock: " + std::string(step) +
                          ": this handle does not hold a grant (released, lost, moved from, or "
                          "inherited by a forked child)");
}

// The throwing form of a call that reports through std::error_code&: the
// code and last_error_message() as lock_error.
template <class Call>
void throw_on_error(Call&& call) {
  run_throwing([&]() -> failure {
    std::error_code ec;
    call(ec);
    return ec ? make_failure(ec, last_error_message()) : failure{};
  });
}

// acquire and try_acquire, both forms each, around one attempt:
// failure attempt(bool may_wait, Handle& out, bool& busy), which sets busy
// (and fails) when the lock is held by another and it did not get it.
// try_acquire turns busy into std::nullopt.
template <class Handle, class Attempt>
struct acquisitions {
  Attempt attempt;

  Handle acquire() {
    Handle h;
    bool busy = false;
    run_throwing([&] { return attempt(true, h, busy); });
    return h;
  }

  Handle acquire(std::error_code& ec) noexcept {
    Handle h;
    bool busy = false;
    run_noexcept(ec, [&] { return attempt(true, h, busy); });
    return h;
  }

  std::optional<Handle> try_acquire() {
    Handle h;
    bool busy = false;
    run_throwing([&] { return once(h, busy); });
    if (busy) return std::nullopt;
    return std::optional<Handle>(std::move(h));
  }

  std::optional<Handle> try_acquire(std::error_code& ec) noexcept {
    Handle h;
    bool busy = false;
    run_noexcept(ec, [&] { return once(h, busy); });
    if (ec || busy) return std::nullopt;
    return std::optional<Handle>(std::move(h));
  }

 private:
  failure once(Handle& h, bool& busy) {
    failure f = attempt(false, h, busy);
    return busy ? failure{} : f;
  }
};

template <class Handle, class Attempt>
acquisitions<Handle, Attempt> make_acquisitions(Attempt attempt) {
  return {std::move(attempt)};
}

}  // namespace tokenlock::detail
