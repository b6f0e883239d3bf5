#include "tokenlock/rename_lock.hpp"

#include <cerrno>
#include <optional>
#include <vector>

#include "cleanup_registry.hpp"
#include "core/failure.hpp"
#include "lockdir/lock_core.hpp"
#include "lockdir/lock_directory.hpp"
#include "lockdir/shared_lock.hpp"
#include "lockdir/token_mark.hpp"
#include "lockdir/token_name.hpp"
#include "lockdir/trust.hpp"
#include "lockdir/waiting.hpp"

namespace tokenlock {

namespace detail {

void lock_access::fill(lock_handle& h, std::shared_ptr<const lock_core> core, std::string token,
                       std::string token_path, std::int64_t expiry_us,
                       std::chrono::milliseconds lease) {
  h.core_ = std::move(core);
  h.token_ = std::move(token);
  h.token_path_ = std::move(token_path);
  h.expiry_us_ = expiry_us;
  h.lease_ = lease;
  h.fork_generation_ = h.core_->sys->fork_generation();
  h.cleanup_slot_ = cleanup_track_token(h.token_path_, h.core_->paths->free_path, mark_of(h));
}

void lock_access::fill_shared(lock_handle& h, std::shared_ptr<const lock_core> core,
                              std::string name, std::int64_t expiry_us,
                              std::chrono::milliseconds lease, std::uint32_t slots) {
  h.core_ = std::move(core);
  h.mode_ = lock_mode::shared;
  h.slots_ = slots;
  h.fork_generation_ = h.core_->sys->fork_generation();
  move_share(h, std::move(name), expiry_us, lease);
}

void lock_access::move_share(lock_handle& h, std::string name, std::int64_t expiry_us,
                             std::chrono::milliseconds lease) {
  h.token_ = std::move(name);
  h.token_path_ = h.core_->paths->dir_slash + h.token_;
  h.expiry_us_ = expiry_us;
  h.lease_ = lease;
  cleanup_untrack(h.cleanup_slot_);
  h.cleanup_slot_ = -1;
  // A lone share is released as a token is; a member's entry is left to
  // its lease (or to the judgement that its owner died).
  if (h.token_.compare(0, held_prefix.size(), held_prefix) == 0)
    h.cleanup_slot_ = cleanup_track_token(h.token_path_, h.core_->paths->free_path, {});
}

bool lock_access::forked(const lock_handle& h) {
  return !h.core_ || h.core_->sys->fork_generation() != h.fork_generation_;
}

std::string lock_access::mark_of(const lock_handle& h) {
  return marked(h) ? owner_mark_name(h.token_) : std::string();
}

bool lock_access::marked(const lock_handle& h) {
  return h.core_ && h.core_->paths->owner_marks.load(std::memory_order_relaxed) == 1;
}

std::shared_ptr<const open_dir> handle_directory(const lock_handle& h) {
  const lock_core* c = lock_access::core_of(h);
  return c ? current_dir(*c->paths) : nullptr;
}

os& handle_os(const lock_handle& h) { return *lock_access::core_of(h)->sys; }

unsigned handle_dir_mode(const lock_handle& h) {
  const lock_core* c = lock_access::core_of(h);
  return c ? c->paths->dir_mode : 0755;
}

}  // namespace detail

using namespace detail;

namespace {

std::int64_t to_us(std::chrono::milliseconds ms) { return ms.count() * 1000; }

failure validate(const lock_options& o) {
  auto bad = [](const std::string& what) {
    return make_failure(errc::bad_argument, "tokenlock: bad lock_options: " + what);
  };
  if (o.lease.count() <= 0) return bad("lease must be positive");
  if (o.wait.count() < 0) return bad("wait must not be negative");
  if (o.skew_allowance.count() < 0) return bad("skew_allowance must not be negative");
  if (o.max_lease > protocol_max_lease)
    return bad("max_lease must not exceed 24 hours (protocol_max_lease): every process judges a "
               "longer lease implausible and takes the lock over");
  if (o.max_lease < o.lease)
    return bad("lease must not exceed max_lease (at most 24 hours, the bound every process judges "
               "tokens by)");
  if (o.dir_mode > 07777) return bad("dir_mode must be a permission mode (at most 07777)");
  if (o.backoff_min.count() <= 0 || o.backoff_max < o.backoff_min)
    return bad("backoff_min must be positive and at most backoff_max");
  if (o.owner_pid < 0) return bad("owner_pid must be a process id (or 0 for this process)");
  if (o.slots > max_slots) return bad("slots must be at most 999999 (max_slots)");
  return {};
}


class acquirer final : public lock_attempt {
 public:
  acquirer(const std::shared_ptr<const lock_core>& core, const lock_options& options,
           lock_handle& out)
      : core_(core), sys_ptr_(core->sys), sys_(*core->sys), paths_(*core->paths),
        options_(options), out_(out), writer_(*core->sys, *core->paths, options) {}

  // One round of the protocol: the fast-path rename, then (on ENOENT and
  // when `look` is set) the NFS retransmit check, a look at the directory,
  // and a takeover or creation when that is what the directory needs.
  failure attempt(outcome& result, bool look) override {
    lock_handle& out = out_;
    const process_identity& me = sys_.self();
    const int owner = options_.owner_pid ? options_.owner_pid : me.pid;
    const std::uint64_t owner_start = options_.owner_pid ? owner_start_ : me.start_time;
    const std::uint64_t nonce = sys_.random_u64();
    const std::int64_t expiry = sys_.wall_now_us() + to_us(options_.lease);
    std::string token = make_token(expiry, me.host_tag, owner, owner_start, nonce);
    std::string mine = paths_.dir_slash + token;
    std::shared_ptr<const open_dir> d;
    if (failure f = lock_directory_fd(sys_ptr_, paths_, paths_.share, "acquire", d)) return f;

    // After the first round a waiter checks that the token is free with a
    // lookup, which takes no lock, before a rename, which locks the
    // directory exclusively and so would stall the holder's own renames.
    file_status st;
    bool try_rename = d != nullptr;
    if (!first_round_ && d) try_rename = !sys_.status_at(d->fd, std::string(free_token), st);
    if (!try_rename && !look) {
      result = outcome::busy;
      return {};
    }
    first_round_ = false;
    if (try_rename) {
      std::error_code ec = sys_.rename_at(d->fd, std::string(free_token), d->fd, token);
      if (!ec) return finish(out, result, *d, std::move(token), std::move(mine), expiry, {});
      if (ec != std::errc::no_such_file_or_directory)
        return os_failure(sys_, paths_, "acquire", "cannot rename lockfile to " + token,
                          std::string(free_token), ec);
      // An NFS client may retransmit a rename whose first reply was lost;
      // the retransmission then fails with ENOENT although the rename
      // happened.
      if (!sys_.status_at(d->fd, token, st))
        return finish(out, result, *d, std::move(token), std::move(mine), expiry, {});
      if (!look) {
        result = outcome::busy;
        return {};
      }
    }
    return look_and_act(result, d, owner, owner_start, nonce);
  }

  // The slow path: looks at the directory that is there now (somebody may
  // have removed the one we opened and a creator made another) and does
  // what it needs: our own token confirmed, the lock created, another
  // round, or a stale holder taken over.
  failure look_and_act(outcome& result, std::shared_ptr<const open_dir>& d, int owner,
                       std::uint64_t owner_start, std::uint64_t nonce) {
    if (failure f = reopen_if_replaced(sys_ptr_, paths_, paths_.share, "acquire", d)) return f;
    observation obs;
    if (failure f = observe(sys_, paths_, d.get(), "acquire", obs)) return f;
    if (obs.kind == observation::held && writer_.handed_over(obs.token.name))
      return take_hand_over(result, *d, obs.token);
    if (obs.kind == observation::held && given_up(obs.token.name)) {
      // A token of ours we could not confirm, or handed to a holder who
      // has handed it back: confirming it again makes it ours.
      std::string name = obs.token.name;
      return finish(out_, result, *d, name, paths_.dir_slash + name, obs.token.expiry_us, {});
    }
    switch (obs.kind) {
      case observation::missing:
      case observation::empty:
        if (failure f = create_lock_directory(sys_, paths_, options_)) return f;
        result = outcome::again;
        return {};
      case observation::free:
        result = outcome::again;
        return {};
      case observation::held: break;
    }
    return take_over_if_stale(result, *d, obs.token, owner, owner_start, nonce);
  }

  // Takes over `stale` if it is: exactly the name we judged, so that if its
  // owner refreshed or released it, or another taker was first, this name
  // is gone and the rename fails without touching anyone's token.
  failure take_over_if_stale(outcome& result, const open_dir& d, const observed_token& seen,
                             int owner, std::uint64_t owner_start, std::uint64_t nonce) {
    const process_identity& me = sys_.self();
    shared_token s;
    if (read_shared(seen, s)) return meet_shared(result, d, seen, s, owner, owner_start, nonce);
    judgement j = judge(sys_, options_, seen);
    if (!j.stale) {
      busy_reason_ = std::move(j.reason);
      result = outcome::busy;
      return {};
    }
    const std::int64_t expiry = sys_.wall_now_us() + to_us(options_.lease);
    std::string token = make_token(expiry, me.host_tag, owner, owner_start, nonce);
    std::string mine = paths_.dir_slash + token;
    std::error_code ec = sys_.rename_at(d.fd, seen.name, d.fd, token);
    if (ec == std::errc::no_such_file_or_directory) {
      result = outcome::again;
      return {};
    }
    if (ec)
      return os_failure(sys_, paths_, "take over",
                        "cannot rename stale token " + shown_name(seen.name) + " (" + j.reason + ")",
                        seen.name, ec);
    return finish(out_, result, d, std::move(token), std::move(mine), expiry, seen.name);
  }

  // For lock_options::owner_pid: that process's start time, read once.
  failure resolve_owner() {
    if (!options_.owner_pid) return {};
    process_status ps;
    if (auto ec = sys_.read_process_status(options_.owner_pid, ps))
      return make_failure(ec, describe("acquire", paths_.dir,
                                       "cannot read /proc for the owner process " +
                                           std::to_string(options_.owner_pid) +
                                           " (the owner must be a live process on this host)",
                                       ec));
    owner_start_ = ps.start_time;
    return {};
  }

  // The writer's side of shared holders (writer_marks): the mark, the
  // hand-over, the empty cover taken; and when the wait ends, the mark
  // taken back unless the lock was handed over meanwhile.
  failure meet_shared(outcome& result, const open_dir& d, const observed_token& seen,
                      const shared_token& s, int owner, std::uint64_t owner_start,
                      std::uint64_t nonce) {
    writer_.owner(owner, owner_start);
    const std::int64_t expiry = sys_.wall_now_us() + to_us(options_.lease);
    std::string token = make_token(expiry, sys_.self().host_tag, owner, owner_start, nonce);
    writer_marks::step step;
    if (failure f = writer_.meet(d, seen, s, token, step)) return f;
    if (step.what == writer_marks::step::again) {
      result = outcome::again;
      return {};
    }
    if (step.what == writer_marks::step::wait) {
      busy_reason_ = std::move(step.reason);
      result = outcome::busy;
      return {};
    }
    std::error_code ec = sys_.rename_at(d.fd, step.taken_from, d.fd, token);
    if (ec == std::errc::no_such_file_or_directory) {
      result = outcome::again;
      return {};
    }
    if (ec)
      return os_failure(sys_, paths_, "acquire", "cannot take " + shown_name(step.taken_from),
                        step.taken_from, ec);
    return finish(out_, result, d, token, paths_.dir_slash + token, expiry, step.taken_from);
  }

  // The last shared holder out renamed our mark to our token: it is ours,
  // renewed to our lease if that is later.
  failure take_hand_over(outcome& result, const open_dir& d, const observed_token& t) {
    std::string name = t.name;
    std::int64_t expiry = t.expiry_us;
    const std::int64_t wanted = sys_.wall_now_us() + to_us(options_.lease);
    if (wanted > expiry) {
      std::string renewed = with_expiry(owner_part(name), wanted);
      std::error_code ec = sys_.rename_at(d.fd, name, d.fd, renewed);
      file_status st;
      // ENOENT with the renewed name there: an NFS retransmit of our rename.
      if (ec == std::errc::no_such_file_or_directory && !sys_.status_at(d.fd, renewed, st))
        ec.clear();
      if (ec == std::errc::no_such_file_or_directory) {
        // Taken over while we stalled past its lease: not ours any more.
        result = outcome::again;
        return {};
      }
      if (ec)
        return os_failure(sys_, paths_, "acquire", "cannot renew the lock handed over as " +
                          shown_name(name), name, ec);
      name = std::move(renewed);
      expiry = wanted;
    }
    return finish(out_, result, d, name, paths_.dir_slash + name, expiry, name);
  }

  void may_mark(bool yes) noexcept { writer_.may_mark(yes); }

  // After a wait that failed: whether our mark was handed over at the end.
  failure give_up(bool& held) {
    held = false;
    if (!writer_.marking()) return {};
    std::string name;
    if (failure f = writer_.give_up(name)) return f;
    const auto d = current_dir(paths_);
    if (name.empty() || !d) return {};
    held_token t;
    classify_name(name, &t);
    outcome result = outcome::busy;
    if (failure f = take_hand_over(result, *d, observed(name, t, name_kind::held))) return f;
    held = result == outcome::acquired;
    return {};
  }

  std::string busy_reason() const override {
    return busy_reason_.empty() ? "changing hands too fast to see who holds it" : busy_reason_;
  }

  // With a mark out, the hand-over (a rename to our token) admits us.
  std::string_view wake_name() const override {
    return writer_.marking() ? any_token : free_token;
  }

 private:
  bool first_round_ = true;
  // Tokens of ours that a rename made ours but the owner mark did not
  // confirm (token_mark.hpp): if one shows up under our name again, it is
  // ours to confirm, not a live holder's to wait for.
  std::vector<std::string> given_up_;
  bool given_up(const std::string& name) const {
    for (const auto& n : given_up_)
      if (n == name) return true;
    return false;
  }

  // A rename made the token ours (taking over `taken_from`, if not empty);
  // where a rename can move a token through a name it no longer has, the
  // owner mark confirms it first.
  failure finish(lock_handle& out, outcome& result, const open_dir& d, std::string token,
                 std::string token_path, std::int64_t expiry, const std::string& taken_from) {
    const bool marks = paths_.owner_marks.load(std::memory_order_relaxed) == 1;
    if (marks) {
      mark_result m;
      std::string holder;
      if (failure f = mark_and_check(sys_, paths_, options_, "acquire", token, token_path,
                                     taken_from, m, holder))
        return f;
      if (m != mark_result::held) {
        if (!given_up(token)) given_up_.push_back(token);
        busy_reason_ = holder.empty() ? "taken by another client at the same moment" : holder;
        result = outcome::busy;
        return {};
      }
    }
    if (!taken_from.empty()) {
      clear_workspace(sys_, d.fd, token, marks);
      // A holder died or stalled; a creator may have died too.
      sweep_creation_leftovers(sys_, paths_, options_);
    }
    lock_access::fill(out, core_, std::move(token), std::move(token_path),
                             expiry, options_.lease);
    result = outcome::acquired;
    return {};
  }

  const std::shared_ptr<const lock_core>& core_;
  const std::shared_ptr<os>& sys_ptr_;
  os& sys_;
  const lock_paths& paths_;
  const lock_options& options_;
  lock_handle& out_;
  std::string busy_reason_;
  std::uint64_t owner_start_ = 0;
  writer_marks writer_;
};

failure acquire_impl(const std::shared_ptr<const lock_core>& core,
                     const boost::filesystem::path& dir, const lock_options& options,
                     bool may_wait, lock_handle& out, bool& busy) {
  busy = false;
  if (failure f = validate(options)) return f;
  if (!core->paths) {
    lock_paths unused;
    return make_lock_paths(dir, unused);
  }
  const std::shared_ptr<os>& sys = core->sys;
  const std::shared_ptr<const lock_paths>& paths_ptr = core->paths;
  if (options.mode == lock_mode::shared || options.slots)
    return acquire_shared(core, options, may_wait, out, busy);
  acquirer a(core, options, out);
  if (failure f = a.resolve_owner()) return f;
  a.may_mark(may_wait && options.wait.count() > 0);
  // Before the first rename: no token of ours waits unmarked meanwhile.
  lock_needs_owner_marks(*sys, *paths_ptr);
  failure f = wait_for_lock(*sys, *paths_ptr, options, *core->waits, may_wait, a, busy);
  bool held = false;
  if (f) {
    if (failure g = a.give_up(held)) return g;
  }
  if (held) {
    busy = false;
    return {};
  }
  return f;
}

}  // namespace

std::shared_ptr<const lock_core> lock_access::make_core(const boost::filesystem::path& dir,
                                                        const lock_options& options,
                                                        std::shared_ptr<os> sys) {
  auto core = std::make_shared<lock_core>();
  core->sys = sys ? std::move(sys) : system_os();
  auto paths = std::make_shared<lock_paths>();
  paths->share = sharing_of(options);
  paths->dir_mode = created_mode(paths->share);
  if (!make_lock_paths(dir, *paths)) core->paths = std::move(paths);
  core->waits = make_wait_state();
  return core;
}

rename_lock lock_access::with_os(boost::filesystem::path dir, lock_options options,
                                 std::shared_ptr<os> sys) {
  rename_lock lock(std::move(dir), options);
  lock.core_ = make_core(lock.dir_, lock.options_, std::move(sys));
  return lock;
}

rename_lock::rename_lock(boost::filesystem::path dir, lock_options options)
    : dir_(std::move(dir)), options_(options), core_(lock_access::make_core(dir_, options_, nullptr)) {}

lock_handle rename_lock::acquire() const {
  lock_handle h;
  bool busy = false;
  run_throwing([&] { return acquire_impl(core_, dir_, options_, true, h, busy); });
  return h;
}

lock_handle rename_lock::acquire(std::error_code& ec) const noexcept {
  lock_handle h;
  bool busy = false;
  run_noexcept(ec, [&] { return acquire_impl(core_, dir_, options_, true, h, busy); });
  return h;
}

std::optional<lock_handle> rename_lock::try_acquire() const {
  lock_handle h;
  bool busy = false;
  failure f = acquire_impl(core_, dir_, options_, false, h, busy);
  if (busy) return std::nullopt;
  if (f) throw_failure(f);
  return std::optional<lock_handle>(std::move(h));
}

std::optional<lock_handle> rename_lock::try_acquire(std::error_code& ec) const noexcept {
  lock_handle h;
  bool busy = false;
  run_noexcept(ec, [&] {
    failure f = acquire_impl(core_, dir_, options_, false, h, busy);
    return busy ? failure{} : f;
  });
  if (ec || busy) return std::nullopt;
  return std::optional<lock_handle>(std::move(h));
}

namespace {

// `legacy_too`: a legacy token may be named (to break it), but never
// adopted: it is a legacy script's, not one that tokenlock handed out.
failure held_name(const std::string& dir, const std::string& token, bool legacy_too = false) {
  const name_kind kind = classify_name(token);
  if (kind != name_kind::held && !(legacy_too && kind == name_kind::legacy))
    return make_failure(errc::bad_argument,
                        describe("token", dir,
                                 "\"" + token +
                                     "\" is not a held token (lockfile.<expiry>.<host>-<hash>."
                                     "<pid>.<start>.<nonce>, as printed by tokenlock acquire" +
                                     std::string(legacy_too ? "; or a legacy lockfile<seconds>" : "") +
                                     ")",
                                 {}));
  return {};
}

failure not_held(const lock_paths& paths, const std::string& token) {
  return make_failure(errc::lock_lost,
                      describe("token", paths.dir,
                               "the lock does not hold " + token +
                                   ": it was released, refreshed or taken over, or it belongs "
                                   "to another lock",
                               {}));
}

failure adopt_impl(const std::shared_ptr<const lock_core>& core, const boost::filesystem::path& dir,
                   const lock_options& options, const std::string& token, lock_handle& out) {
  const std::shared_ptr<os>& sys = core->sys;
  const std::shared_ptr<const lock_paths>& paths = core->paths;
  if (!paths) {
    lock_paths unused;
    return make_lock_paths(dir, unused);
  }
  observed_token entry;
  if (read_entry(token, entry)) return adopt_shared(core, options, token, out);
  if (failure f = held_name(paths->dir, token)) return f;
  {
    held_token t;
    shared_token s;
    classify_name(token, &t);
    if (read_shared(observed(token, t, name_kind::held), s))
      return adopt_shared(core, options, token, out);
  }
  std::shared_ptr<const open_dir> d;
  if (failure f = lock_directory_fd(sys, *paths, paths->share, "token", d)) return f;
  if (!d) return not_held(*paths, token);
  file_status st;
  std::error_code ec = sys->status_at(d->fd, token, st);
  if (ec == std::errc::no_such_file_or_directory) return not_held(*paths, token);
  if (ec) return os_failure(*sys, *paths, "token", "cannot look at " + token, token, ec);
  held_token t;
  classify_name(token, &t);
  lock_needs_owner_marks(*sys, *paths);
  lock_access::fill(out, core, token, paths->dir_slash + token, t.expiry_us,
                           options.lease);
  return {};
}

failure take_over_impl(const std::shared_ptr<const lock_core>& core,
                       const boost::filesystem::path& dir, const lock_options& options,
                       const std::string& token, bool force, lock_handle& out) {
  const std::shared_ptr<os>& sys = core->sys;
  const std::shared_ptr<const lock_paths>& paths = core->paths;
  if (failure f = validate(options)) return f;
  if (!paths) {
    lock_paths unused;
    return make_lock_paths(dir, unused);
  }
  if (failure f = held_name(paths->dir, token, true)) return f;
  held_token t;
  const name_kind kind = classify_name(token, &t);
  judgement j = judge(*sys, options, observed(token, t, kind));
  std::shared_ptr<const open_dir> d;
  if (failure f = lock_directory_fd(sys, *paths, paths->share, "break", d)) return f;
  if (!d) return not_held(*paths, token);
  file_status st;
  std::error_code ec = sys->status_at(d->fd, token, st);
  if (ec == std::errc::no_such_file_or_directory) return not_held(*paths, token);
  if (ec) return os_failure(*sys, *paths, "break", "cannot look at " + token, token, ec);
  if (!j.stale && !force)
    return make_failure(errc::busy, describe("break", paths->dir,
                                             "refusing to take over a token that is not stale: " +
                                                 j.reason,
                                             {}) +
                                        "; force it only if you know its owner is gone");
  const process_identity& me = sys->self();
  const std::int64_t expiry = sys->wall_now_us() + to_us(options.lease);
  std::string mine = make_token(expiry, me.host_tag, me.pid, me.start_time, sys->random_u64());
  std::string mine_path = paths->dir_slash + mine;
  const bool marks = lock_needs_owner_marks(*sys, *paths);
  ec = sys->rename_at(d->fd, token, d->fd, mine);
  if (ec == std::errc::no_such_file_or_directory) return not_held(*paths, token);
  if (ec) return os_failure(*sys, *paths, "break", "cannot rename " + token, token, ec);
  if (marks) {
    mark_result m;
    std::string holder;
    if (failure f = mark_and_check(*sys, *paths, options, "break", mine, mine_path, token, m, holder))
      return f;
    if (m != mark_result::held)
      return make_failure(errc::busy,
                          describe("break", paths->dir,
                                   "another process took " + token + " at the same moment" +
                                       (holder.empty() ? std::string() : " (" + holder + ")") +
                                       "; nothing of theirs was changed",
                                   {}));
  }
  clear_workspace(*sys, d->fd, mine, marks);
  lock_access::fill(out, core, std::move(mine), std::move(mine_path), expiry,
                           options.lease);
  return {};
}

failure holder_impl(const std::shared_ptr<os>& sys_ptr, const boost::filesystem::path& dir,
                    const lock_options& options, std::optional<holder_info>& out) {
  out.reset();
  os& sys = *sys_ptr;
  lock_paths paths;
  if (failure f = make_lock_paths(dir, paths)) return f;
  std::shared_ptr<const open_dir> d;
  if (failure f = lock_directory_fd(sys_ptr, paths, sharing_of(options), "status", d)) return f;
  std::vector<holder_info> all;
  if (failure f = list_holders(sys, paths, d.get(), options, all)) return f;
  if (!all.empty()) out = std::move(all.front());
  return {};
}

failure holders_impl(const std::shared_ptr<os>& sys_ptr, const boost::filesystem::path& dir,
                     const lock_options& options, std::vector<holder_info>& out) {
  out.clear();
  lock_paths paths;
  if (failure f = make_lock_paths(dir, paths)) return f;
  std::shared_ptr<const open_dir> d;
  if (failure f = lock_directory_fd(sys_ptr, paths, sharing_of(options), "status", d)) return f;
  return list_holders(*sys_ptr, paths, d.get(), options, out);
}

}  // namespace

lock_handle rename_lock::adopt(const std::string& token) const {
  lock_handle h;
  run_throwing([&] { return adopt_impl(core_, dir_, options_, token, h); });
  return h;
}

lock_handle rename_lock::adopt(const std::string& token, std::error_code& ec) const noexcept {
  lock_handle h;
  run_noexcept(ec, [&] { return adopt_impl(core_, dir_, options_, token, h); });
  return h;
}

lock_handle rename_lock::take_over(const std::string& token, bool force) const {
  lock_handle h;
  run_throwing([&] { return take_over_impl(core_, dir_, options_, token, force, h); });
  return h;
}

lock_handle rename_lock::take_over(const std::string& token, bool force,
                                   std::error_code& ec) const noexcept {
  lock_handle h;
  run_noexcept(ec, [&] { return take_over_impl(core_, dir_, options_, token, force, h); });
  return h;
}

std::optional<holder_info> rename_lock::holder() const {
  std::optional<holder_info> out;
  run_throwing([&] { return holder_impl(core_->sys, dir_, options_, out); });
  return out;
}

std::vector<holder_info> rename_lock::holders() const {
  std::vector<holder_info> out;
  run_throwing([&] { return holders_impl(core_->sys, dir_, options_, out); });
  return out;
}

std::vector<holder_info> rename_lock::holders(std::error_code& ec) const noexcept {
  std::vector<holder_info> out;
  run_noexcept(ec, [&] { return holders_impl(core_->sys, dir_, options_, out); });
  if (ec) out.clear();
  return out;
}

std::optional<holder_info> rename_lock::holder(std::error_code& ec) const noexcept {
  std::optional<holder_info> out;
  run_noexcept(ec, [&] { return holder_impl(core_->sys, dir_, options_, out); });
  if (ec) out.reset();
  return out;
}

// ---- lock_handle -----------------------------------------------------------

lock_handle::lock_handle(lock_handle&& other) noexcept
    : core_(std::move(other.core_)),
      token_(std::move(other.token_)),
      token_path_(std::move(other.token_path_)),
      expiry_us_(other.expiry_us_),
      lease_(other.lease_),
      fork_generation_(other.fork_generation_),
      cleanup_slot_(other.cleanup_slot_),
      mode_(other.mode_),
      slots_(other.slots_) {
  other.cleanup_slot_ = -1;
  other.forget();
}

lock_handle& lock_handle::operator=(lock_handle&& other) noexcept {
  if (this != &other) {
    if (owns()) {
      std::error_code ignored;
      release(ignored);
    }
    core_ = std::move(other.core_);
    token_ = std::move(other.token_);
    token_path_ = std::move(other.token_path_);
    expiry_us_ = other.expiry_us_;
    lease_ = other.lease_;
    fork_generation_ = other.fork_generation_;
    mode_ = other.mode_;
    slots_ = other.slots_;
    cleanup_untrack(cleanup_slot_);  // an empty or forked-away handle's record
    cleanup_slot_ = other.cleanup_slot_;
    other.cleanup_slot_ = -1;
    other.forget();
  }
  return *this;
}

lock_handle::~lock_handle() {
  if (owns()) {
    std::error_code ignored;
    release(ignored);
  }
}

void lock_handle::forget() noexcept {
  token_.clear();
  token_path_.clear();
  expiry_us_ = 0;
  cleanup_untrack(cleanup_slot_);
  cleanup_slot_ = -1;
}

bool lock_handle::owns() const noexcept {
  return !token_.empty() && core_ && core_->sys->fork_generation() == fork_generation_;
}

const boost::filesystem::path& lock_handle::directory() const noexcept {
  static const boost::filesystem::path none;
  return core_ ? core_->paths->dir_path : none;
}

boost::filesystem::path lock_handle::path() const {
  if (token_.empty() || mode_ == lock_mode::shared) return {};
  return directory() / token_;
}

std::chrono::system_clock::time_point lock_handle::expires() const noexcept {
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::microseconds(expiry_us_)));
}

std::string lock_handle::detach() noexcept {
  std::string t;
  t.swap(token_);
  forget();
  return t;
}

namespace {

// A rename inside the lock directory that the handle's token was acquired
// in. None open any more: the directory was found missing since, and with
// it our token.
std::error_code rename_in_lock(os& sys, const lock_paths& paths, const std::string& from,
                               const std::string& to) {
  const auto d = current_dir(paths);
  if (!d) return std::make_error_code(std::errc::no_such_file_or_directory);
  return sys.rename_at(d->fd, from, d->fd, to);
}

failure not_owner_failure(const char* step, const std::string& dir, bool forked) {
  return make_failure(
      errc::not_owner,
      describe(step, dir,
               forked ? "this handle was acquired by the parent process before fork(); a "
                        "child never releases or refreshes its parent's lock"
                      : "this handle does not hold a token (released, lost or moved from)",
               {}));
}

failure lost_failure(const char* step, const std::string& dir, const std::string& token,
                     std::int64_t expiry_us) {
  return make_failure(errc::lock_lost,
                      describe(step, dir,
                               "our token " + token +
                                   " is gone: the lock was taken over by another process (our "
                                   "lease ended at " +
                                   format_utc(expiry_us) +
                                   ", or our process was judged dead); the new owner's lock "
                                   "was left alone",
                               {}));
}

}  // namespace

void lock_handle::release() {
  run_throwing([&]() -> failure {
    std::error_code ec;
    release(ec);
    if (!ec) return {};
    return make_failure(ec, last_error_message());
  });
}

void lock_handle::release(std::error_code& ec) noexcept {
  run_noexcept(ec, [&]() -> failure {
    if (token_.empty()) return {};
    if (!core_ || core_->sys->fork_generation() != fork_generation_) {
      forget();
      return not_owner_failure("release", core_->paths->dir, true);
    }
    if (mode_ == lock_mode::shared) return release_shared(*this);
    // Never retried after ENOENT, even when a lookup still finds the name:
    // GlusterFS renames a directory through a stale name to whatever that
    // directory is called now, so a retry would release the token of the
    // process that took ours over (docs/network-filesystems.md).
    const bool marked = lock_access::marked(*this);
    if (marked) {
      // The next holder of "lockfile" would find our mark and step back.
      if (std::error_code e = remove_owner_mark(*core_->sys, token_path_, token_))
        return os_failure(*core_->sys, *core_->paths, "release",
                          "cannot remove our owner mark from " + token_ + " (the lock is still ours)",
                          token_, e);
    }
    std::error_code e = rename_in_lock(*core_->sys, *core_->paths, token_, std::string(free_token));
    if (!e) {
      forget();
      return {};
    }
    if (e == std::errc::no_such_file_or_directory) {
      failure f = lost_failure("release", core_->paths->dir, token_, expiry_us_);
      forget();
      return f;
    }
    // Still ours: the caller may retry, and the destructor will. Held
    // without its mark, another client's rename through a stale name could
    // take it beside us.
    failure f =
        os_failure(*core_->sys, *core_->paths, "release", "cannot rename " + token_ + " to lockfile", token_, e);
    if (marked) {
      if (std::error_code m = restore_owner_mark(*core_->sys, token_path_, token_))
        f.message += "; and our owner mark could not be put back (" + m.message() +
                     "): until the release succeeds, another GlusterFS client may take the lock too";
    }
    return f;
  });
}

void lock_handle::refresh() { refresh(lease_); }

void lock_handle::refresh(std::error_code& ec) noexcept { refresh(lease_, ec); }

void lock_handle::refresh(std::chrono::milliseconds lease) {
  run_throwing([&]() -> failure {
    std::error_code ec;
    refresh(lease, ec);
    if (!ec) return {};
    return make_failure(ec, last_error_message());
  });
}

void lock_handle::refresh(std::chrono::milliseconds lease, std::error_code& ec) noexcept {
  run_noexcept(ec, [&]() -> failure {
    const std::string dir = core_ ? core_->paths->dir : std::string();
    if (token_.empty()) return not_owner_failure("refresh", dir, false);
    if (!core_ || core_->sys->fork_generation() != fork_generation_)
      return not_owner_failure("refresh", dir, true);
    if (lease.count() <= 0)
      return make_failure(errc::bad_argument,
                          describe("refresh", dir, "the lease must be positive", {}));
    if (lease > protocol_max_lease)
      return make_failure(errc::bad_argument,
                          describe("refresh", dir,
                                   "the lease must not exceed 24 hours (protocol_max_lease): "
                                   "every process judges a longer one implausible and takes the "
                                   "lock over",
                                   {}));
    if (mode_ == lock_mode::shared) return refresh_shared(*this, lease);
    const std::int64_t expiry = core_->sys->wall_now_us() + to_us(lease);
    std::string next = with_expiry(owner_part(token_), expiry);
    std::string next_path = core_->paths->dir_slash + next;
    // Recorded before the rename, so that a stop signal in between releases
    // whichever of the two names holds the token.
    const bool marked = lock_access::marked(*this);
    cleanup_entry next_record(cleanup_track_token(
        next_path, core_->paths->free_path, marked ? owner_mark_name(next) : std::string()));
    std::error_code e = rename_in_lock(*core_->sys, *core_->paths, token_, next);
    if (e == std::errc::no_such_file_or_directory) {
      // NFS retransmit: the first rename may have happened.
      file_status st;
      const auto d = current_dir(*core_->paths);
      if (!d || core_->sys->status_at(d->fd, next, st)) {
        failure f = lost_failure("refresh", dir, token_, expiry_us_);
        forget();
        return f;
      }
      e.clear();
    }
    if (e)
      return os_failure(*core_->sys, *core_->paths, "refresh", "cannot rename " + token_ + " to " + next,
                        token_, e);
    cleanup_untrack(cleanup_slot_);
    cleanup_slot_ = next_record.release();
    std::string old = std::move(token_);
    token_ = std::move(next);
    token_path_ = std::move(next_path);
    expiry_us_ = expiry;
    lease_ = lease;
    // The mark names the current lease: one naming the old lease would look
    // expired to a process judging it after that lease's end.
    if (marked) {
      if (std::error_code m = rename_owner_mark(*core_->sys, token_path_, old, token_))
        return os_failure(*core_->sys, *core_->paths, "refresh",
                          "the lease was renewed, but our owner mark in " + token_ +
                              " could not be renamed to match (until a refresh succeeds, "
                              "another GlusterFS client may judge it expired at the old lease's end)",
                          token_, m);
    }
    return {};
  });
}

}  // namespace tokenlock
