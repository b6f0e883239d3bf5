// A shared handle's release and refresh, and adopting a share
// (docs/protocol.md, Shared locks and semaphores). A handle's share is its
// lone share's token name until the share is converted; then the copies of
// that name in the cover are its share, until a refresh gives it an entry
// of its own ("s.<...>").
#include <string>

#include "lockdir/shared_lock.hpp"
#include "lockdir/shared_steps.hpp"
#include "lockdir/trust.hpp"

namespace tokenlock::detail {
namespace {

failure lost(const char* step, const lock_paths& paths, const std::string& name,
             std::int64_t expiry_us) {
  return make_failure(errc::lock_lost,
                      describe(step, paths.dir,
                               "our share " + shown_name(name) +
                                   " is gone: it was taken over (our lease ended at " +
                                   format_utc(expiry_us) +
                                   ", or our process was judged dead); nothing of the other "
                                   "holders was changed",
                               {}));
}

failure os_step(os& sys, const lock_paths& paths, const char* step, const std::string& what,
                std::error_code ec) {
  return os_failure(sys, paths, step, what, "", ec);
}

// Whether a share with this expiry may be judged ended by somebody now.
bool may_have_ended(os& sys, std::int64_t expiry_us, const lock_options& options) {
  const std::int64_t skew = options.skew_allowance.count() * 1000;
  return sys.wall_now_us() > expiry_us - skew;
}

// A freed slot renames the cover, so that waiters watching the lock
// directory see a change (an entry's removal is not seen there).
void wake_slot_waiters(os& sys, const lock_paths& paths, const share_place& place) {
  const auto d = current_dir(paths);
  const std::string to = renamed_cover(sys, place.token, place.shared,
                                       later_expiry(place.token.expiry_us, 0), sys.self().pid,
                                       sys.self().start_time);
  if (d) sys.rename_at(d->fd, place.token.name, d->fd, to);
}

// A member leaves: its entries go (its own, or its lone share's copies),
// and the last one out frees the cover.
failure leave(lock_handle& h, const std::string& share) {
  os& sys = *lock_access::core(h)->sys;
  const lock_paths& paths = *lock_access::core(h)->paths;
  const lock_options options{};
  share_place place;
  scoped_fd tok{sys};
  if (failure f = locate_share(sys, paths, share, "release", place, tok)) return f;
  if (!place.found()) return lost("release", paths, share, lock_access::expiry_us(h));
  bool full = false;
  if (place.shared.limit) {
    entry_census census;
    if (!take_census(sys, paths, tok.fd, options, "release", census))
      full = census.live.size() >= place.shared.limit;
  }
  bool removed = false;
  for (const std::string& name : place.names) {
    std::error_code ec = remove_entry(sys, tok.fd, name);
    if (ec && ec != std::errc::no_such_file_or_directory)
      return os_step(sys, paths, "release", "cannot remove our share entry " + name, ec);
    removed = removed || !ec;
  }
  if (!removed) return lost("release", paths, share, lock_access::expiry_us(h));
  lock_access::forget(h);
  // Another live entry in the token we left: its holder (or a joiner whose
  // rename fails, docs/protocol.md) is the last one out, not us; asked
  // through the descriptor we removed ours by, before looking at D again.
  entry_census after;
  if (!take_census(sys, paths, tok.fd, options, "release", after, true) && !after.live.empty()) {
    if (full) wake_slot_waiters(sys, paths, place);
    return {};
  }
  if (failure f = settle_cover(sys, paths, options, "release")) return f;
  if (full) wake_slot_waiters(sys, paths, place);
  return {};
}

// A member's refresh: an entry of its own with the new lease, the cover
// renamed to cover it, the old entries removed. A slot holder counts the
// others first, as a joiner does.
failure refresh_member(lock_handle& h, const std::string& share, std::int64_t expiry,
                       std::chrono::milliseconds lease);

}  // namespace

failure release_shared(lock_handle& h) {
  const std::shared_ptr<const lock_core>& core = lock_access::core(h);
  const std::string name = h.token();
  if (!is_lone_name(name)) return leave(h, name);
  const auto d = current_dir(*core->paths);
  std::error_code ec = d ? core->sys->rename_at(d->fd, name, d->fd, std::string(free_token))
                         : std::make_error_code(std::errc::no_such_file_or_directory);
  if (!ec) {
    lock_access::forget(h);
    return {};
  }
  if (ec != std::errc::no_such_file_or_directory)
    return os_failure(*core->sys, *core->paths, "release",
                      "cannot rename " + name + " to lockfile", name, ec);
  // Converted into a group meanwhile: our share is its copies now.
  return leave(h, name);
}

failure refresh_shared(lock_handle& h, std::chrono::milliseconds lease) {
  const std::shared_ptr<const lock_core>& core = lock_access::core(h);
  const std::int64_t expiry = core->sys->wall_now_us() + lease.count() * 1000;
  const std::string name = h.token();
  if (!is_lone_name(name)) return refresh_member(h, name, expiry, lease);
  const std::string next = with_expiry(owner_part(name), expiry);
  const auto d = current_dir(*core->paths);
  std::error_code ec = d ? core->sys->rename_at(d->fd, name, d->fd, next)
                         : std::make_error_code(std::errc::no_such_file_or_directory);
  file_status st;
  if (!ec || (ec == std::errc::no_such_file_or_directory && d &&
              !core->sys->status_at(d->fd, next, st))) {
    lock_access::move_share(h, next, expiry, lease);
    return {};
  }
  if (ec != std::errc::no_such_file_or_directory)
    return os_failure(*core->sys, *core->paths, "refresh", "cannot rename " + name + " to " + next,
                      name, ec);
  return refresh_member(h, name, expiry, lease);
}

namespace {

// Our next entry: our identity (from our entry, or from our lone share's
// name), the new expiry, and a fresh nonce, which makes the name ours
// alone: something found there already was planted, never made by us.
std::string next_entry(os& sys, const std::string& share, std::int64_t expiry) {
  observed_token me;
  if (is_lone_name(share)) {
    held_token t;
    classify_name(share, &t);
    me = named_holder(observed(share, t, name_kind::held));
  } else {
    read_entry(share, me);
  }
  return make_entry_name(expiry, me.host_tag, me.pid, me.start_time, sys.random_u64());
}

failure planted(const lock_paths& paths, const std::string& entry) {
  return make_failure(errc::lock_corrupt,
                      describe("refresh", paths.dir,
                               "something was planted at our own share entry's name " +
                                   shown_name(entry) +
                                   " before we made it; nothing was removed, and our share is "
                                   "held as before, with its old lease",
                               {}));
}

enum class round_end { renewed, again, ended };

// Whether our slot was taken: a slot holder's refresh counts the others in
// the token open as `tok`, as a joiner does. Only a share whose lease may
// have ended can have been counted out by a joiner; counting a live one
// would count joiners whose rename is still to come, and end a share for
// nothing.
failure slot_taken(lock_handle& h, const share_place& place, int tok, const std::string& next,
                   bool& taken) {
  os& sys = *lock_access::core(h)->sys;
  const lock_options options{};
  taken = false;
  if (!place.shared.limit || !may_have_ended(sys, lock_access::expiry_us(h), options)) return {};
  entry_census census;
  if (failure f = take_census(sys, *lock_access::core(h)->paths, tok, options, "refresh", census))
    return f;
  std::size_t others = census.others(next);
  for (const auto& n : place.names) others -= census.holds(n) ? 1 : 0;
  taken = others >= place.shared.limit;
  return {};
}

// One round of a member's refresh: our next entry made (once, in the
// token kept open as `made_in`), the others counted where they must be,
// the cover renamed.
failure refresh_round(lock_handle& h, const std::string& share, const std::string& next,
                      std::int64_t expiry, scoped_fd& made_in, round_end& end) {
  os& sys = *lock_access::core(h)->sys;
  const lock_paths& paths = *lock_access::core(h)->paths;
  const lock_options options{};
  end = round_end::ended;
  share_place place;
  scoped_fd tok{sys};
  if (failure f = locate_share(sys, paths, share, "refresh", place, tok)) return f;
  if (!place.found()) return {};
  end = round_end::again;
  if (made_in.fd < 0) {
    entry_made how;
    if (failure f = make_entry(sys, paths, tok.fd, next, "refresh", how)) return f;
    if (how == entry_made::gone) return {};  // the token taken over and cleared
    if (how == entry_made::existed) return planted(paths, next);
    // The token is one directory whatever its name: ours is removed from
    // it should the refresh fail, whatever the name is by then.
    if (std::error_code ec = sys.open_directory(tok.fd, ".", made_in.fd))
      return os_step(sys, paths, "refresh", "cannot keep the token open", ec);
  }
  bool taken = false;
  if (failure f = slot_taken(h, place, tok.fd, next, taken)) return f;
  if (taken) {
    // Our share has ended: its old names go too, as the new one will.
    for (const auto& n : place.names)
      if (n != next) remove_entry(sys, tok.fd, n);
    end = round_end::ended;
    return {};
  }
  observed_token mine;
  read_entry(next, mine);
  const auto d = current_dir(paths);
  const std::string to = renamed_cover(sys, place.token, place.shared,
                                       later_expiry(place.token.expiry_us, expiry), mine.pid,
                                       mine.start_time);
  std::error_code ec = d ? sys.rename_at(d->fd, place.token.name, d->fd, to)
                         : std::make_error_code(std::errc::no_such_file_or_directory);
  if (ec == std::errc::no_such_file_or_directory) return {};
  if (ec) return os_step(sys, paths, "refresh", "cannot rename the cover " + place.token.name, ec);
  for (const auto& n : place.names)
    if (n != next) remove_entry(sys, tok.fd, n);
  end = round_end::renewed;
  return {};
}

failure refresh_member(lock_handle& h, const std::string& share, std::int64_t expiry,
                       std::chrono::milliseconds lease) {
  os& sys = *lock_access::core(h)->sys;
  const lock_paths& paths = *lock_access::core(h)->paths;
  const std::string next = next_entry(sys, share, expiry);
  scoped_fd made_in{sys};
  round_end end = round_end::again;
  for (int round = 0; round < 64 && end == round_end::again; ++round)
    if (failure f = refresh_round(h, share, next, expiry, made_in, end)) {
      if (made_in.fd >= 0) remove_entry(sys, made_in.fd, next);
      return f;
    }
  if (end == round_end::renewed) {
    lock_access::move_share(h, next, expiry, lease);
    return {};
  }
  // Not renewed: our new entry is nobody's share, wherever the token is.
  if (made_in.fd >= 0) remove_entry(sys, made_in.fd, next);
  if (end == round_end::again)  // the cover renamed round after round: still ours
    return make_failure(errc::busy,
                        describe("refresh", paths.dir,
                                 "the shared holders' token changed name at every look; our "
                                 "share is held as before: refresh again",
                                 {}));
  failure f = lost("refresh", paths, share, lock_access::expiry_us(h));
  lock_access::forget(h);
  return f;
}

}  // namespace

failure adopt_shared(const std::shared_ptr<const lock_core>& core, const lock_options& options,
                     const std::string& id, lock_handle& out) {
  os& sys = *core->sys;
  const lock_paths& paths = *core->paths;
  std::shared_ptr<const open_dir> d;
  if (failure f = lock_directory_fd(core->sys, paths, paths.share, "token", d)) return f;
  observed_token t;
  held_token held;
  if (is_lone_name(id)) {
    classify_name(id, &held);
    t = observed(id, held, name_kind::held);
  } else {
    read_entry(id, t);
  }
  shared_token s;
  file_status st;
  if (is_lone_name(id) && d && !sys.status_at(d->fd, id, st) && read_shared(t, s)) {
    lock_access::fill_shared(out, core, id, t.expiry_us, options.lease, s.limit);
    return {};
  }
  share_place place;
  scoped_fd tok{sys};
  if (d)
    if (failure f = locate_share(sys, paths, id, "token", place, tok)) return f;
  if (!place.found())
    return make_failure(errc::lock_lost,
                        describe("token", paths.dir,
                                 "the lock holds no share " + shown_name(id) +
                                     ": it was released, refreshed or taken over",
                                 {}));
  lock_access::fill_shared(out, core, id, t.expiry_us, options.lease, place.shared.limit);
  return {};
}

}  // namespace tokenlock::detail
