// A writer among shared holders (docs/protocol.md, A writer): it marks
// their token so that no new one joins, waits for the last one out to hand
// the token over, takes an empty cover, and takes its mark back when its
// wait ends.
#include <string>

#include "lockdir/shared_lock.hpp"
#include "lockdir/shared_steps.hpp"
#include "lockdir/trust.hpp"

namespace tokenlock::detail {
namespace {

std::int64_t to_us(std::chrono::milliseconds ms) { return ms.count() * 1000; }

std::string holders_text(std::size_t n) {
  return std::to_string(n) + (n == 1 ? " shared holder" : " shared holders");
}

}  // namespace

bool writer_marks::handed_over(const std::string& name) const {
  if (mark_nonce_ == 0) return false;
  held_token t;
  if (classify_name(name, &t) != name_kind::held) return false;
  return t.nonce == mark_nonce_ && t.pid == pid_ && t.host_tag == sys_.self().host_tag;
}

failure writer_marks::meet(const open_dir& d, const observed_token& seen, const shared_token& s,
                           const std::string& token, step& out) {
  out = step{};
  const observed_token holder = named_holder(seen);
  if (s.kind == share_kind::draining) {
    if (own_mark(seen)) {
      mark_ = seen.name;  // a member's refresh may have raised its expiry
      return meet_own_mark(d, seen, s, token, out);
    }
    judgement j = judge(sys_, options_, holder);
    if (j.owner != owner_liveness::dead && !j.stale) {
      out.reason = "another writer (pid " + std::to_string(seen.pid) +
                   ") waits for the shared holders to leave";
      return may_mark_ ? remove_stale(d, seen.name) : failure{};
    }
  }
  if (s.kind == share_kind::lone || s.kind == share_kind::reserved) {
    judgement j = judge(sys_, options_, s.kind == share_kind::lone ? holder : seen);
    if (j.stale) {
      out.what = step::took;
      out.taken_from = seen.name;
      return {};
    }
    if (s.kind == share_kind::reserved) {
      out.reason = std::move(j.reason);
      return {};
    }
  }
  return mark(d, seen, s, out);
}

// Our mark: take it when no share in it is live, else keep it fresh.
failure writer_marks::meet_own_mark(const open_dir& d, const observed_token& seen,
                                    const shared_token& s, const std::string& token, step& out) {
  scoped_fd tok{sys_};
  token_open how;
  if (failure f = open_token_dir(sys_, paths_, d, seen.name, "acquire", tok, how)) return f;
  if (how == token_open::gone) {
    out.what = step::again;
    return {};
  }
  entry_census census;
  if (how == token_open::ok) {
    if (failure f = take_census(sys_, paths_, tok.fd, options_, "acquire", census)) return f;
  }
  if (failure f = corrupt_entry(paths_, seen.name, census, "acquire")) return f;
  if (census.live.empty()) {
    out.what = step::took;
    out.taken_from = seen.name;
    return {};
  }
  // A waiting writer removes the stale ones (docs/protocol.md, Leaving a
  // group), so that the token does not fill with the entries of readers
  // killed with kill -9 while the live ones finish.
  remove_stale_entries(sys_, tok.fd, census);
  out.reason = "waiting for " + holders_text(census.live.size()) + " to leave (no new one joins)";
  const std::int64_t now = sys_.wall_now_us();
  if (now - mark_renewed_us_ < to_us(options_.lease) / 3) return {};
  const std::string renewed = renamed_cover(sys_, seen, s, later_expiry(seen.expiry_us,
                                            now + to_us(options_.lease)), pid_, start_);
  if (!sys_.rename_at(d.fd, seen.name, d.fd, renewed)) {
    mark_ = renewed;
    mark_renewed_us_ = now;
  }
  (void)token;
  return {};
}

// Another writer's mark we wait behind: its stale entries go, so that the
// token does not fill with the entries of readers killed with kill -9
// (docs/protocol.md, Leaving a group: a waiting writer removes them).
failure writer_marks::remove_stale(const open_dir& d, const std::string& name) {
  scoped_fd tok{sys_};
  token_open how;
  if (failure f = open_token_dir(sys_, paths_, d, name, "acquire", tok, how)) return f;
  if (how != token_open::ok) return {};
  entry_census census;
  if (failure f = take_census(sys_, paths_, tok.fd, options_, "acquire", census)) return f;
  remove_stale_entries(sys_, tok.fd, census);
  return {};
}

// Marks the shared holders' token as ours to drain: a lone share gets our
// copy of its holder's share first, as a conversion does.
failure writer_marks::mark(const open_dir& d, const observed_token& seen, const shared_token& s,
                           step& out) {
  scoped_fd tok{sys_};
  token_open how;
  if (failure f = open_token_dir(sys_, paths_, d, seen.name, "acquire", tok, how)) return f;
  if (how == token_open::gone) {
    out.what = step::again;
    return {};
  }
  if (how == token_open::not_a_directory) {
    out.reason = "held by a shared holder whose token is not a directory";
    return {};
  }
  entry_census census;
  if (failure f = take_census(sys_, paths_, tok.fd, options_, "acquire", census)) return f;
  if (s.kind != share_kind::lone)
    if (failure f = corrupt_entry(paths_, seen.name, census, "acquire")) return f;
  if (s.kind != share_kind::lone && census.live.empty()) {
    out.what = step::took;
    out.taken_from = seen.name;
    return {};
  }
  const std::size_t holders = census.live.size() + (s.kind == share_kind::lone ? 1 : 0);
  if (!may_mark_) {
    out.reason = "held by " + holders_text(holders);
    return {};
  }
  remove_stale_entries(sys_, tok.fd, census);
  entry_made entry = entry_made::made;
  const std::string copy =
      s.kind == share_kind::lone ? copy_of_lone(seen, sys_.random_u64()) : std::string();
  if (!copy.empty())
    if (failure f = make_entry(sys_, paths_, tok.fd, copy, "acquire", entry)) return f;
  // Another maker's copy of that name, or ours removed at once by the lone
  // holder leaving: look again.
  if (entry != entry_made::made) {
    out.what = step::again;
    return {};
  }
  if (failure f = rename_to_mark(d, tok.fd, seen, s, copy, out)) return f;
  if (out.what == step::wait)
    out.reason = "waiting for " + holders_text(holders) + " to leave (no new one joins)";
  return {};
}

// The mark itself: the exact name seen renamed to our draining cover.
failure writer_marks::rename_to_mark(const open_dir& d, int tok, const observed_token& seen,
                                     const shared_token& s, const std::string& copy, step& out) {
  const std::int64_t now = sys_.wall_now_us();
  if (mark_nonce_ == 0) mark_nonce_ = sys_.random_u64() | 1;
  const std::string draining =
      make_shared_name(later_expiry(seen.expiry_us, now + to_us(options_.lease)),
                       sys_.self().host_tag, pid_, share_kind::draining, s.limit, start_,
                       mark_nonce_);
  std::error_code ec = sys_.rename_at(d.fd, seen.name, d.fd, draining);
  // Not marked: our copy of the lone holder's share is nobody's share; and
  // if the share was converted meanwhile, a leaver may have left the cover
  // to us because of it, as to a joiner that lost.
  if (ec && !copy.empty()) {
    remove_entry(sys_, tok, copy);
    if (failure f = settle_cover(sys_, paths_, options_, "acquire")) return f;
  }
  if (ec == std::errc::no_such_file_or_directory) {
    out.what = step::again;
    return {};
  }
  if (ec)
    return os_failure(sys_, paths_, "acquire", "cannot mark the shared holders' token " +
                      shown_name(seen.name), seen.name, ec);
  mark_ = draining;
  mark_renewed_us_ = now;
  return {};
}

bool writer_marks::own_mark(const observed_token& seen) const {
  shared_token s;
  if (mark_nonce_ == 0 || !read_shared(seen, s) || s.kind != share_kind::draining) return false;
  const observed_token holder = named_holder(seen);
  held_token t;
  classify_name(seen.name, &t);
  return holder.pid == pid_ && holder.host_tag == sys_.self().host_tag && t.nonce == mark_nonce_;
}

failure writer_marks::give_up(std::string& held) {
  held.clear();
  if (mark_.empty()) return {};
  mark_.clear();
  // Our mark, by its writer and nonce: a member's refresh may have renamed
  // it (a later expiry) since we last looked, and it must not stay out.
  for (int round = 0; round < 16; ++round) {
    const auto d = current_dir(paths_);
    if (!d) return {};
    observation obs;
    if (failure f = observe(sys_, paths_, d.get(), "acquire", obs)) return f;
    if (obs.kind != observation::held) return {};
    // Handed over at the last moment: a success at the deadline is one.
    if (handed_over(obs.token.name)) {
      held = obs.token.name;
      return {};
    }
    if (!own_mark(obs.token)) return {};
    shared_token s;
    read_shared(obs.token, s);
    const std::string cover = make_shared_name(later_expiry(obs.token.expiry_us, 0),
                                               sys_.self().host_tag, pid_, share_kind::group,
                                               s.limit, start_, sys_.random_u64());
    std::error_code ec = sys_.rename_at(d->fd, obs.token.name, d->fd, cover);
    // The cover we made may be empty by now: the last one out left it to us.
    if (!ec) return settle_cover(sys_, paths_, options_, "acquire");
    if (ec != std::errc::no_such_file_or_directory)
      return os_failure(sys_, paths_, "acquire", "cannot take back our mark " +
                        shown_name(obs.token.name), obs.token.name, ec);
  }
  return {};
}

}  // namespace tokenlock::detail
