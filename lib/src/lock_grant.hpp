// A backend's own handle behind tokenlock::handle (tokenlock/lock.hpp), and
// the error_code& forms of tokenlock::lock's calls in terms of a backend's.
// Each backend says what differs with a Traits class:
//   static std::optional<std::uint64_t> fence(const H&) noexcept;
//   static const std::string& id(const H&) noexcept;
//   static void refresh(H&, std::chrono::milliseconds lease, std::error_code&) noexcept;
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <typeinfo>
#include <utility>

#include "core/failure.hpp"
#include "tokenlock/clock_judgement.hpp"
#include "tokenlock/lock.hpp"

namespace tokenlock::detail {

template <class H, class Traits>
class grant_of final : public grant {
 public:
  grant_of(H&& h, std::string notice) noexcept
      : h_(std::move(h)), notice_(std::move(notice)) {}

  void release(std::error_code& ec) noexcept override { h_.release(ec); }
  void refresh(std::optional<std::chrono::milliseconds> lease,
               std::error_code& ec) noexcept override {
    if (lease)
      Traits::refresh(h_, *lease, ec);
    else
      h_.refresh(ec);
  }
  std::string detach() noexcept override { return h_.detach(); }
  bool owns() const noexcept override { return h_.owns(); }
  std::chrono::system_clock::time_point expires() const noexcept override { return h_.expires(); }
  std::chrono::milliseconds lease() const noexcept override { return h_.lease(); }
  std::optional<std::uint64_t> fence() const noexcept override { return Traits::fence(h_); }
  const std::string& id() const noexcept override { return Traits::id(h_); }
  const std::string& notice() const noexcept override { return notice_; }
  lock_mode mode() const noexcept override { return h_.mode(); }
  void* native(const std::type_info& type) noexcept override {
    return type == typeid(H) ? &h_ : nullptr;
  }

 private:
  H h_;
  std::string notice_;
};

// A backend's handle as a tokenlock::handle: an empty one after a failed
// call. Should the allocation fail, `h`'s destructor gives the grant back
// and ec says out of memory. notice(h) is what handle::notice() says
// (nothing, should it throw).
template <class Traits, class H, class Notice>
handle erase(H&& h, std::error_code& ec, const Notice& notice) noexcept {
  if (ec || !h.owns()) return {};
  // A notice that cannot be made is left out: the grant is what matters.
  std::string text;
  try {
    text = notice(static_cast<const H&>(h));
  } catch (...) {
    text.clear();
  }
  try {
    return handle(std::make_unique<grant_of<H, Traits>>(std::move(h), std::move(text)));
  } catch (const std::bad_alloc&) {
    ec = std::make_error_code(std::errc::not_enough_memory);
    set_last_error_message("tokenlock: out of memory");
    return {};
  }
}

template <class Traits, class H, class Notice>
std::optional<handle> erase(std::optional<H>&& h, std::error_code& ec,
                            const Notice& notice) noexcept {
  if (ec || !h) return std::nullopt;
  handle any = erase<Traits>(std::move(*h), ec, notice);
  if (ec) return std::nullopt;
  return std::optional<handle>(std::move(any));
}

// Without a notice: a grant with nothing to tell.
struct no_notice {
  template <class H>
  std::string operator()(const H&) const {
    return {};
  }
};

template <class Traits, class H>
handle erase(H&& h, std::error_code& ec) noexcept {
  return erase<Traits>(std::move(h), ec, no_notice{});
}

template <class Traits, class H>
std::optional<handle> erase(std::optional<H>&& h, std::error_code& ec) noexcept {
  return erase<Traits>(std::move(h), ec, no_notice{});
}

}  // namespace tokenlock::detail

namespace tokenlock::detail {

// What a Redis and an etcd grant have alike: the owner id, the fence.
template <class H>
struct server_traits {
  static std::optional<std::uint64_t> fence(const H& h) noexcept { return h.fence(); }
  static const std::string& id(const H& h) noexcept { return h.owner(); }
};

// A Redis or etcd holder as every backend reports it. The server ends an
// expired lease itself, so a grant that is still there is stale only when
// its process is known to be gone. `who` words the holder ("pid 7 on host
// h-1a2b3c4d"); the backend adds its own facts after fence, owner and
// remaining_ms.
template <class Info>
lock_holder server_holder(const Info& h, owner_liveness liveness, const std::string& who) {
  lock_holder out;
  out.id = h.owner;
  out.expires = std::chrono::system_clock::now() + h.remaining;
  out.owner = liveness;
  out.stale = liveness == owner_liveness::dead;
  out.reason = "held by " + who + " (fence " + std::to_string(h.fence) + "), " +
               seconds_text(std::chrono::duration_cast<std::chrono::microseconds>(h.remaining)) +
               " of its lease left" + (out.stale ? "; its process is gone (same host)" : "");
  out.fence = h.fence;
  out.facts = {{"fence", h.fence},
               {"owner", h.owner},
               {"remaining_ms", static_cast<std::int64_t>(h.remaining.count())}};
  return out;
}

// lock::holder's error_code& form over a backend's: `describe(info, out)`
// sets `out` from the backend's holder info.
template <class Info, class Describe>
std::optional<lock_holder> common_holder(std::optional<Info>&& h, const Describe& describe,
                                         std::error_code& ec) noexcept {
  if (ec || !h) return std::nullopt;
  std::optional<lock_holder> out;
  run_noexcept(ec, [&] {
    lock_holder described;
    describe(*h, described);
    out = std::move(described);
    return failure{};
  });
  return out;
}

}  // namespace tokenlock::detail
