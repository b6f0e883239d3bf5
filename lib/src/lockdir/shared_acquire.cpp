// A shared holder's rounds (docs/protocol.md, Shared locks and semaphores):
// the lone share's fast path, joining a group cover, converting a lone
// share into one, taking over stale names; waiting for writers, for another
// limit, and for a full semaphore.
#include <string>

#include "lockdir/shared_lock.hpp"
#include "lockdir/shared_steps.hpp"
#include "lockdir/token_mark.hpp"
#include "lockdir/trust.hpp"
#include "lockdir/waiting.hpp"

namespace tokenlock::detail {
namespace {

std::int64_t to_us(std::chrono::milliseconds ms) { return ms.count() * 1000; }

std::string limit_text(std::uint32_t limit) {
  return limit ? "a semaphore of " + std::to_string(limit) : std::string("readers");
}

class shared_acquirer final : public lock_attempt {
 public:
  shared_acquirer(const std::shared_ptr<const lock_core>& core, const lock_options& options,
                  lock_handle& out)
      : core_(core), sys_(*core->sys), paths_(*core->paths), options_(options), out_(out),
        limit_(options.slots) {}

  failure resolve_owner() {
    const process_identity& me = sys_.self();
    pid_ = options_.owner_pid ? options_.owner_pid : me.pid;
    start_ = me.start_time;
    if (!options_.owner_pid) return {};
    process_status ps;
    if (auto ec = sys_.read_process_status(options_.owner_pid, ps))
      return make_failure(ec, describe("acquire", paths_.dir,
                                       "cannot read /proc for the owner process " +
                                           std::to_string(options_.owner_pid),
                                       ec));
    start_ = ps.start_time;
    return {};
  }

  failure attempt(outcome& result, bool look) override {
    const std::int64_t expiry = sys_.wall_now_us() + to_us(options_.lease);
    std::string lone = my_name(expiry, share_kind::lone);
    std::shared_ptr<const open_dir> d;
    if (failure f = lock_directory_fd(core_->sys, paths_, paths_.share, "acquire", d)) return f;
    if (d && !filesystem_checked_) {
      if (failure f = refuse_owner_marks()) return f;
      filesystem_checked_ = true;
    }
    if (d) {
      std::error_code ec = sys_.rename_at(d->fd, std::string(free_token), d->fd, lone);
      file_status st;
      if (!ec || (ec == std::errc::no_such_file_or_directory && !sys_.status_at(d->fd, lone, st)))
        return hold(result, std::move(lone), expiry);
      if (ec != std::errc::no_such_file_or_directory)
        return os_failure(sys_, paths_, "acquire", "cannot rename lockfile to " + lone,
                          std::string(free_token), ec);
    }
    // A share can often be joined at once: the first round always looks.
    if (!look && !first_round_) {
      result = outcome::busy;
      return {};
    }
    first_round_ = false;
    if (failure f = reopen_if_replaced(core_->sys, paths_, paths_.share, "acquire", d)) return f;
    observation obs;
    if (failure f = observe(sys_, paths_, d.get(), "acquire", obs)) return f;
    switch (obs.kind) {
      case observation::missing:
      case observation::empty:
        if (failure f = create_lock_directory(sys_, paths_, options_)) return f;
        result = outcome::again;
        return {};
      case observation::free: result = outcome::again; return {};
      case observation::held: break;
    }
    return meet(result, *d, obs.token);
  }

  // Shared names on a filesystem whose renames need owner marks are
  // refused (docs/protocol.md, Shared locks: refused filesystems). Asked
  // once the lock directory exists, of its own filesystem.
  failure refuse_owner_marks() {
    // Known for this lock already (its lock directory's own filesystem
    // needs none): the fast path stays two renames.
    if (paths_.owner_marks.load(std::memory_order_relaxed) == 0) return {};
    std::error_code ec;
    if (!path_needs_owner_marks(sys_, paths_.dir, ec)) {
      paths_.owner_marks.store(0, std::memory_order_relaxed);
      return {};
    }
    return make_failure(errc::not_supported,
                        describe("acquire", paths_.dir,
                                 ec ? "cannot tell what filesystem the lock directory is on (" +
                                          ec.message() + "), and shared locks need to know"
                                    : "shared locks and semaphores are not supported on a "
                                      "filesystem where holders leave owner marks (GlusterFS, "
                                      "an unknown FUSE filesystem: docs/network-filesystems.md)",
                                 {}) +
                            "; take the lock exclusively there, or keep the lock directory "
                            "on a local disk or NFS");
  }

  // A join may become possible at any rename of the token (a cover freed,
  // renamed by a leaving slot holder, unmarked), not only at lockfile.
  std::string_view wake_name() const override { return any_token; }
  bool may_join_holders() const override { return true; }

  std::string busy_reason() const override {
    return reason_.empty() ? "changing hands too fast to see who holds it" : reason_;
  }

 private:
  std::string my_name(std::int64_t expiry, share_kind kind) {
    return make_shared_name(expiry, sys_.self().host_tag, pid_, kind, limit_, start_,
                            sys_.random_u64());
  }

  failure hold(outcome& result, std::string name, std::int64_t expiry) {
    lock_access::fill_shared(out_, core_, std::move(name), expiry, options_.lease, limit_);
    result = outcome::acquired;
    return {};
  }

  failure wait(outcome& result, std::string why) {
    reason_ = std::move(why);
    result = outcome::busy;
    return {};
  }

  // What the listing showed decides the move.
  failure meet(outcome& result, const open_dir& d, const observed_token& seen) {
    shared_token s;
    if (!read_shared(seen, s) || s.kind == share_kind::reserved) {
      judgement j = judge(sys_, options_, seen);
      if (j.stale) return take_over(result, d, seen);
      return wait(result, std::move(j.reason));
    }
    if (s.kind == share_kind::draining) return meet_draining(result, d, seen, s);
    if (s.kind == share_kind::lone) {
      judgement j = judge(sys_, options_, named_holder(seen));
      if (j.stale) return take_over(result, d, seen);
      if (s.limit != limit_ || limit_ == 1)
        return wait(result, "held by a shared holder of " + limit_text(s.limit) +
                                (s.limit == limit_ ? " (full)" : " (this one is " +
                                                                     limit_text(limit_) + ")") +
                                ": " + j.reason);
      return join(result, d, seen, s, true);
    }
    if (s.limit != limit_) return meet_other_limit(result, d, seen, s);
    return join(result, d, seen, s, false);
  }

  // A group of another limit: wait for it as for a writer, unless no share
  // in it is live (its members died or their leases ended): then it is a
  // stale name like any other, taken over by its exact name.
  failure meet_other_limit(outcome& result, const open_dir& d, const observed_token& seen,
                           const shared_token& s) {
    scoped_fd tok{sys_};
    token_open how;
    if (failure f = open_token_dir(sys_, paths_, d, seen.name, "acquire", tok, how)) return f;
    if (how == token_open::gone) {
      result = outcome::again;
      return {};
    }
    entry_census census;
    if (how == token_open::ok)
      if (failure f = take_census(sys_, paths_, tok.fd, options_, "acquire", census)) return f;
    if (how == token_open::ok && census.live.empty()) {
      if (failure f = corrupt_entry(paths_, seen.name, census, "acquire")) return f;
      return take_over(result, d, seen);
    }
    return wait(result, "held by shared holders of " + limit_text(s.limit) + " (this one is " +
                            limit_text(limit_) + ")");
  }

  // A stale name (a writer's, a lone share's, a legacy script's) becomes a
  // lone share of ours, by a rename of exactly that name. It is taken as a
  // writer's token of ours first, and cleared under that name: a lone
  // share can be joined the moment it appears, and a clearing after that
  // would remove the joiner's entries (its copy of our share among them).
  failure take_over(outcome& result, const open_dir& d, const observed_token& seen) {
    const std::int64_t expiry = sys_.wall_now_us() + to_us(options_.lease);
    const std::string ours = make_token(expiry, sys_.self().host_tag, pid_, start_, sys_.random_u64());
    std::error_code ec = sys_.rename_at(d.fd, seen.name, d.fd, ours);
    if (ec == std::errc::no_such_file_or_directory) {
      result = outcome::again;
      return {};
    }
    if (ec)
      return os_failure(sys_, paths_, "take over",
                        "cannot rename stale token " + shown_name(seen.name), seen.name, ec);
    clear_workspace(sys_, d.fd, ours, false);
    sweep_creation_leftovers(sys_, paths_, options_);
    std::string lone = my_name(expiry, share_kind::lone);
    // Nobody renames a live writer's token of ours: only a takeover after
    // its lease, which is not yet.
    if ((ec = sys_.rename_at(d.fd, ours, d.fd, lone))) {
      sys_.rename_at(d.fd, ours, d.fd, std::string(free_token));  // not left held
      return os_failure(sys_, paths_, "take over", "cannot rename our token " + shown_name(ours) +
                        " to our lone share", ours, ec);
    }
    return hold(result, std::move(lone), expiry);
  }

  // A writer waits for the holders in it: wait too, unless that writer is
  // provably dead on this host, whose mark is then taken back.
  failure meet_draining(outcome& result, const open_dir& d, const observed_token& seen,
                        const shared_token& s) {
    // The mark's lease is the cover's, never earlier than any member's: a
    // stale one holds nobody's share, like a dead writer's.
    judgement j = judge(sys_, options_, named_holder(seen));
    if (j.owner != owner_liveness::dead && !j.stale)
      return wait(result, "a writer waits for the shared holders to leave (pid " +
                              std::to_string(seen.pid) + "); no new one joins meanwhile");
    const std::string cover =
        make_shared_name(later_expiry(seen.expiry_us, seen.expiry_us), sys_.self().host_tag, pid_,
                         share_kind::group, s.limit, start_, sys_.random_u64());
    std::error_code ec = sys_.rename_at(d.fd, seen.name, d.fd, cover);
    if (ec && ec != std::errc::no_such_file_or_directory)
      return os_failure(sys_, paths_, "acquire", "cannot take back a dead writer's mark " +
                        shown_name(seen.name), seen.name, ec);
    // Empty, it is free to take on the next round.
    if (!ec) settle_cover(sys_, paths_, options_, "acquire");
    result = outcome::again;
    return {};
  }

  failure join(outcome& result, const open_dir& d, const observed_token& seen,
               const shared_token& s, bool converting);
  failure joined_or_not(outcome& result, const open_dir& d, int tok, const observed_token& seen,
                        const std::string& mine, const std::string& theirs,
                        std::int64_t expiry, std::error_code ec);

  const std::shared_ptr<const lock_core>& core_;
  os& sys_;
  const lock_paths& paths_;
  const lock_options& options_;
  lock_handle& out_;
  std::uint32_t limit_;
  int pid_ = 0;
  std::uint64_t start_ = 0;
  bool first_round_ = true;
  bool filesystem_checked_ = false;
  std::string reason_;
};

// Joins the cover `seen` (or converts the lone share `seen` into one): our
// entry, then a rename of exactly that name.
failure shared_acquirer::join(outcome& result, const open_dir& d, const observed_token& seen,
                              const shared_token& s, bool converting) {
  scoped_fd tok{sys_};
  token_open how;
  if (failure f = open_token_dir(sys_, paths_, d, seen.name, "acquire", tok, how)) return f;
  if (how == token_open::gone) {
    result = outcome::again;
    return {};
  }
  if (how == token_open::not_a_directory)
    return wait(result, "held by a shared holder whose token is not a directory (" +
                            shown_name(seen.name) + "): no other can join it");
  const std::int64_t expiry = sys_.wall_now_us() + to_us(options_.lease);
  const std::string mine = make_entry_name(expiry, sys_.self().host_tag, pid_, start_,
                                           sys_.random_u64());
  // Only a slot holder counts before it joins; a reader's join is an entry
  // and a rename (stale entries go with the last one out, or a writer).
  if (limit_) {
    entry_census census;
    if (failure f = take_census(sys_, paths_, tok.fd, options_, "acquire", census)) return f;
    const std::size_t holders = census.live.size() + (converting ? 1 : 0);
    if (holders >= limit_)
      return wait(result, "the semaphore of " + std::to_string(limit_) + " is full (" +
                              std::to_string(holders) + " holders)");
    remove_stale_entries(sys_, tok.fd, census);
  }
  std::string theirs;
  entry_made entry = entry_made::made;
  if (converting) {
    theirs = copy_of_lone(seen, sys_.random_u64());
    if (failure f = make_entry(sys_, paths_, tok.fd, theirs, "acquire", entry)) return f;
    // Another maker's copy of the same name (odds of 2^-32) is not ours to
    // remove; a copy removed at once was removed by the lone holder leaving
    // (our conversion would fail): look again.
    if (entry != entry_made::made) {
      result = outcome::again;
      return {};
    }
  }
  if (failure f = make_entry(sys_, paths_, tok.fd, mine, "acquire", entry)) return f;
  if (entry != entry_made::made && !theirs.empty()) remove_entry(sys_, tok.fd, theirs);
  if (entry == entry_made::gone) {
    result = outcome::again;
    return {};
  }
  if (entry == entry_made::existed)
    return make_failure(errc::lock_corrupt,
                        describe("acquire", paths_.dir,
                                 "something was planted at our own share entry's name " +
                                     shown_name(mine) + " before we made it; nothing was removed",
                                 {}));
  const std::string cover = make_shared_name(later_expiry(seen.expiry_us, expiry),
                                             sys_.self().host_tag, pid_, share_kind::group,
                                             limit_, start_, sys_.random_u64());
  std::error_code ec = sys_.rename_at(d.fd, seen.name, d.fd, cover);
  (void)s;
  return joined_or_not(result, d, tok.fd, seen, mine, theirs, expiry, ec);
}

failure shared_acquirer::joined_or_not(outcome& result, const open_dir& d, int tok,
                                       const observed_token& seen, const std::string& mine,
                                       const std::string& theirs, std::int64_t expiry,
                                       std::error_code ec) {
  if (!ec) return hold(result, mine, expiry);
  if (ec != std::errc::no_such_file_or_directory)
    return os_failure(sys_, paths_, "acquire", "cannot rename " + shown_name(seen.name) +
                      " to join its shared holders", seen.name, ec);
  // Somebody renamed it first: neither our entry nor our copy of the lone
  // holder's share is a share (a winner relies on its own copy only).
  remove_entry(sys_, tok, mine);
  if (!theirs.empty()) remove_entry(sys_, tok, theirs);
  observation obs;
  shared_token now;
  bool cover = !observe(sys_, paths_, &d, "acquire", obs) && obs.kind == observation::held &&
               read_shared(obs.token, now) &&
               (now.kind == share_kind::group || now.kind == share_kind::draining);
  // A leaver that saw only our entry left the cover to us.
  if (cover) {
    if (failure f = settle_cover(sys_, paths_, options_, "acquire")) return f;
  }
  result = outcome::again;
  return {};
}

}  // namespace

failure acquire_shared(const std::shared_ptr<const lock_core>& core, const lock_options& options,
                       bool may_wait, lock_handle& out, bool& busy) {
  busy = false;
  os& sys = *core->sys;
  const lock_paths& paths = *core->paths;
  shared_acquirer a(core, options, out);
  if (failure f = a.resolve_owner()) return f;
  return wait_for_lock(sys, paths, options, *core->waits, may_wait, a, busy);
}

}  // namespace tokenlock::detail
