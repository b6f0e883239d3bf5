// A shared handle's release and refresh, adopting and breaking a share
// (docs/protocol.md, Shared locks and semaphores).
#include <string>

#include "lockdir/shared_lock.hpp"
#include "lockdir/shared_steps.hpp"
#include "lockdir/trust.hpp"

namespace tokenlock::detail {
namespace {

bool is_lone(const std::string& name) {
  return name.compare(0, held_prefix.size(), held_prefix) == 0;
}

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

// Our entry, whatever name the cover has now; `place` says where.
failure open_place(os& sys, const lock_paths& paths, const std::string& entry, const char* step,
                   share_place& place, scoped_fd& tok, bool& found) {
  found = false;
  for (int round = 0; round < 8; ++round) {
    if (failure f = find_share(sys, paths, entry, step, place)) return f;
    const auto d = current_dir(paths);
    if (!place.is_cover || !place.has_entry || !d) return {};
    token_open how;
    if (failure f = open_token_dir(sys, paths, *d, place.token.name, step, tok, how)) return f;
    if (how == token_open::ok) {
      found = true;
      return {};
    }
    if (how != token_open::gone) return {};
  }
  return {};
}

// A member leaves: its entry goes, and the last one out frees the cover.
failure leave(lock_handle& h, const std::string& entry) {
  os& sys = *lock_access::core(h)->sys;
  const lock_paths& paths = *lock_access::core(h)->paths;
  const lock_options options{};
  share_place place;
  scoped_fd tok{sys};
  bool found = false;
  if (failure f = open_place(sys, paths, entry, "release", place, tok, found)) return f;
  if (!found) return lost("release", paths, entry, lock_access::expiry_us(h));
  bool full = false;
  if (place.shared.limit) {
    entry_census census;
    if (!take_census(sys, paths, tok.fd, options, "release", census))
      full = census.others(entry) + 1 >= place.shared.limit;
  }
  std::error_code ec = remove_entry(sys, tok.fd, entry);
  if (ec == std::errc::no_such_file_or_directory)
    return lost("release", paths, entry, lock_access::expiry_us(h));
  if (ec) return os_step(sys, paths, "release", "cannot remove our share entry " + entry, ec);
  lock_access::forget(h);
  if (failure f = settle_cover(sys, paths, options, "release")) return f;
  // A freed slot renames the cover, so that waiters watching the lock
  // directory see a change (the entry's removal is not seen there).
  if (full) {
    const auto d = current_dir(paths);
    const std::string to = renamed_cover(sys, place.token, place.shared,
                                         later_expiry(place.token.expiry_us, 0),
                                         sys.self().pid, sys.self().start_time);
    if (d) sys.rename_at(d->fd, place.token.name, d->fd, to);
  }
  return {};
}

// A member's refresh: a new entry, the cover renamed to cover it, the old
// entry removed. A slot holder counts the others first, as a joiner does.
failure refresh_member(lock_handle& h, const std::string& entry, std::int64_t expiry,
                       std::chrono::milliseconds lease) {
  os& sys = *lock_access::core(h)->sys;
  const lock_paths& paths = *lock_access::core(h)->paths;
  const lock_options options{};
  observed_token me;
  read_entry(entry, me);
  held_token t;
  classify_name(std::string(held_prefix) + entry.substr(entry_prefix.size()), &t);
  const std::string next = make_entry_name(expiry, me.host_tag, me.pid, me.start_time, t.nonce);
  bool made = false;
  for (int round = 0; round < 64; ++round) {
    share_place place;
    scoped_fd tok{sys};
    bool found = false;
    if (failure f = open_place(sys, paths, entry, "refresh", place, tok, found)) return f;
    if (!found) break;
    if (!made) {
      bool existed = false;
      if (failure f = make_entry(sys, paths, tok.fd, next, "refresh", existed)) {
        // Gone as soon as made: a takeover cleared the token; our share ended.
        if (f.code == std::errc::no_such_file_or_directory) break;
        return f;
      }
      made = true;
    }
    if (place.shared.limit) {
      entry_census census;
      if (failure f = take_census(sys, paths, tok.fd, options, "refresh", census)) return f;
      if (census.others(entry, next) >= place.shared.limit) break;
    }
    const auto d = current_dir(paths);
    const std::string to = renamed_cover(sys, place.token, place.shared,
                                         later_expiry(place.token.expiry_us, expiry), me.pid,
                                         me.start_time);
    std::error_code ec = d ? sys.rename_at(d->fd, place.token.name, d->fd, to)
                           : std::make_error_code(std::errc::no_such_file_or_directory);
    if (ec == std::errc::no_such_file_or_directory) continue;
    if (ec) return os_step(sys, paths, "refresh", "cannot rename the cover " + place.token.name, ec);
    remove_entry(sys, tok.fd, entry);
    lock_access::move_share(h, next, expiry, lease);
    return {};
  }
  // Our share ended: neither entry stays.
  share_place place;
  scoped_fd tok{sys};
  bool found = false;
  if (made && !open_place(sys, paths, next, "refresh", place, tok, found) && found)
    remove_entry(sys, tok.fd, next);
  failure f = lost("refresh", paths, entry, lock_access::expiry_us(h));
  lock_access::forget(h);
  return f;
}

}  // namespace

failure refresh_shared(lock_handle& h, std::chrono::milliseconds lease) {
  const std::shared_ptr<const lock_core>& core = lock_access::core(h);
  const std::int64_t expiry = core->sys->wall_now_us() + lease.count() * 1000;
  const std::string name = h.token();
  if (!is_lone(name)) return refresh_member(h, name, expiry, lease);
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
  held_token t;
  classify_name(name, &t);
  const std::string entry = entry_of_lone(observed(name, t, name_kind::held));
  lock_access::move_share(h, entry, lock_access::expiry_us(h), lease);
  return refresh_member(h, entry, expiry, lease);
}

failure adopt_shared(const std::shared_ptr<const lock_core>& core, const lock_options& options,
                     const std::string& id, lock_handle& out) {
  os& sys = *core->sys;
  const lock_paths& paths = *core->paths;
  std::shared_ptr<const open_dir> d;
  if (failure f = lock_directory_fd(core->sys, paths, paths.share, "token", d)) return f;
  std::string entry = id;
  std::int64_t expiry = 0;
  if (is_lone(id)) {
    held_token t;
    classify_name(id, &t);
    const observed_token lone = observed(id, t, name_kind::held);
    shared_token s;
    file_status st;
    if (d && !sys.status_at(d->fd, id, st) && read_shared(lone, s)) {
      lock_access::fill_shared(out, core, id, t.expiry_us, options.lease, s.limit);
      return {};
    }
    entry = entry_of_lone(lone);
  }
  observed_token e;
  if (read_entry(entry, e)) expiry = e.expiry_us;
  share_place place;
  if (failure f = find_share(sys, paths, entry, "token", place)) return f;
  if (!place.has_entry)
    return make_failure(errc::lock_lost,
                        describe("token", paths.dir,
                                 "the lock holds no share " + shown_name(id) +
                                     ": it was released, refreshed or taken over",
                                 {}));
  lock_access::fill_shared(out, core, entry, expiry, options.lease, place.shared.limit);
  return {};
}

failure release_shared(lock_handle& h) {
  const std::shared_ptr<const lock_core>& core = lock_access::core(h);
  const std::string name = h.token();
  if (!is_lone(name)) return leave(h, name);
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
  // Converted into a group meanwhile: our share is its entry now.
  held_token t;
  classify_name(name, &t);
  return leave(h, entry_of_lone(observed(name, t, name_kind::held)));
}

}  // namespace tokenlock::detail
