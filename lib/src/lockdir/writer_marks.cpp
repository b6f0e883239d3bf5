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
    held_token t;
    classify_name(seen.name, &t);
    if (holder.pid == pid_ && holder.host_tag == sys_.self().host_tag && t.nonce == mark_nonce_) {
      mark_ = seen.name;  // a member's refresh may have raised its expiry
      return meet_own_mark(d, seen, s, token, out);
    }
    judgement j = judge(sys_, options_, holder);
    if (j.owner != owner_liveness::dead) {
      out.reason = "another writer (pid " + std::to_string(seen.pid) +
                   ") waits for the shared holders to leave";
      return {};
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
  if (census.live.empty()) {
    out.what = step::took;
    out.taken_from = seen.name;
    return {};
  }
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

// Marks the shared holders' token as ours to drain: a lone share gets its
// holder's entry first, as a conversion does.
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
  if (s.kind != share_kind::lone && census.live.empty()) {
    out.what = step::took;
    out.taken_from = seen.name;
    return {};
  }
  remove_stale_entries(sys_, tok.fd, census);
  bool existed = false;
  if (s.kind == share_kind::lone)
    if (failure f = make_entry(sys_, paths_, tok.fd, entry_of_lone(seen), "acquire", existed)) {
      // Removed at once by a converter whose rename failed (as for a join).
      if (f.code != std::errc::no_such_file_or_directory) return f;
      out.what = step::again;
      return {};
    }
  const std::int64_t now = sys_.wall_now_us();
  if (mark_nonce_ == 0) mark_nonce_ = sys_.random_u64() | 1;
  const std::string draining =
      make_shared_name(later_expiry(seen.expiry_us, now + to_us(options_.lease)),
                       sys_.self().host_tag, pid_, share_kind::draining, s.limit, start_,
                       mark_nonce_);
  std::error_code ec = sys_.rename_at(d.fd, seen.name, d.fd, draining);
  if (ec == std::errc::no_such_file_or_directory) {
    // Its holder renamed it first (a release, a refresh), or another
    // process converted or marked it. The entry we made for that share
    // stays only if it was converted meanwhile, as a converter's does:
    // left behind, it would count as a live share until its lease ended,
    // and bar every writer, this one included.
    if (s.kind == share_kind::lone && !existed && !token_is_cover(sys_, paths_, d, "acquire"))
      remove_entry(sys_, tok.fd, entry_of_lone(seen));
    out.what = step::again;
    return {};
  }
  if (ec)
    return os_failure(sys_, paths_, "acquire", "cannot mark the shared holders' token " +
                      shown_name(seen.name), seen.name, ec);
  mark_ = draining;
  mark_renewed_us_ = now;
  const std::size_t n = census.live.size() + (s.kind == share_kind::lone ? 1 : 0);
  out.reason = "waiting for " + holders_text(n) + " to leave (no new one joins)";
  return {};
}

failure writer_marks::give_up(std::string& held) {
  held.clear();
  const auto d = current_dir(paths_);
  if (mark_.empty() || !d) return {};
  observation obs;
  if (failure f = observe(sys_, paths_, d.get(), "acquire", obs)) return f;
  if (obs.kind == observation::held && handed_over(obs.token.name)) {
    held = obs.token.name;
    return {};
  }
  shared_token s;
  if (obs.kind != observation::held || obs.token.name != mark_ || !read_shared(obs.token, s))
    return {};
  const std::string cover = make_shared_name(later_expiry(obs.token.expiry_us, 0),
                                             sys_.self().host_tag, pid_, share_kind::group,
                                             s.limit, start_, sys_.random_u64());
  std::error_code ec = sys_.rename_at(d->fd, mark_, d->fd, cover);
  mark_.clear();
  if (ec == std::errc::no_such_file_or_directory) {
    // Handed over at the last moment: a success at the deadline is one.
    if (!observe(sys_, paths_, d.get(), "acquire", obs) && obs.kind == observation::held &&
        handed_over(obs.token.name))
      held = obs.token.name;
    return {};
  }
  // The cover we made may be empty by now: the last one out left it to us.
  return settle_cover(sys_, paths_, options_, "acquire");
}

}  // namespace tokenlock::detail
