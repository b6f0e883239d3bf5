#include "lockdir/shared_steps.hpp"

namespace tokenlock::detail {
namespace {

// A lookup loop's bound: each round follows somebody else's successful
// rename, so this many in a row means the lock changes hands faster than
// it can be looked at; the caller's next round looks again.
constexpr int settle_rounds = 64;

}  // namespace

std::string renamed_cover(os& sys, const observed_token& cover, const shared_token& s,
                          std::int64_t expiry_us, int pid, std::uint64_t start) {
  held_token t;
  classify_name(cover.name, &t);
  if (s.kind == share_kind::draining)
    return make_token(expiry_us, cover.host_tag, cover.pid, cover.start_time, t.nonce);
  return make_shared_name(expiry_us, sys.self().host_tag, pid, share_kind::group, s.limit, start,
                          sys.random_u64());
}

bool token_is_cover(os& sys, const lock_paths& paths, const open_dir& d, const char* step) {
  observation obs;
  shared_token now;
  return !observe(sys, paths, &d, step, obs) && obs.kind == observation::held &&
         read_shared(obs.token, now) &&
         (now.kind == share_kind::group || now.kind == share_kind::draining);
}

failure settle_cover(os& sys, const lock_paths& paths, const lock_options& options,
                     const char* step) {
  for (int round = 0; round < settle_rounds; ++round) {
    const auto d = current_dir(paths);
    if (!d) return {};
    observation obs;
    if (failure f = observe(sys, paths, d.get(), step, obs)) return f;
    shared_token s;
    if (obs.kind != observation::held || !read_shared(obs.token, s) ||
        (s.kind != share_kind::group && s.kind != share_kind::draining))
      return {};
    scoped_fd tok{sys};
    token_open how;
    if (failure f = open_token_dir(sys, paths, *d, obs.token.name, step, tok, how)) return f;
    if (how == token_open::gone) continue;
    if (how != token_open::ok) return {};
    entry_census census;
    if (failure f = take_census(sys, paths, tok.fd, options, step, census)) return f;
    if (!census.live.empty()) return {};
    if (!census.malformed.empty())
      return make_failure(errc::lock_corrupt,
                          describe(step, paths.dir,
                                   "the token " + shown_name(obs.token.name) +
                                       " holds a share entry that breaks the grammar (" +
                                       shown_name(census.malformed.front()) +
                                       "): nobody can tell whether its holder is gone; remove it "
                                       "by hand once it is",
                                   {}));
    remove_stale_entries(sys, tok.fd, census);
    const std::string to = s.kind == share_kind::group ? std::string(free_token)
                                                       : hand_over_name(obs.token);
    std::error_code ec = sys.rename_at(d->fd, obs.token.name, d->fd, to);
    if (!ec) return {};
    if (ec != std::errc::no_such_file_or_directory)
      return os_failure(sys, paths, step, "cannot free the shared token " + shown_name(obs.token.name),
                        obs.token.name, ec);
  }
  return {};
}

failure find_share(os& sys, const lock_paths& paths, const std::string& entry, const char* step, share_place& out) {
  out = share_place{};
  for (int round = 0; round < settle_rounds; ++round) {
    const auto d = current_dir(paths);
    if (!d) return {};
    observation obs;
    if (failure f = observe(sys, paths, d.get(), step, obs)) return f;
    if (obs.kind != observation::held || !read_shared(obs.token, out.shared)) return {};
    out.token = obs.token;
    out.is_cover =
        out.shared.kind == share_kind::group || out.shared.kind == share_kind::draining;
    if (!out.is_cover) return {};
    file_status st;
    std::error_code ec = sys.status_at(d->fd, obs.token.name + "/" + entry, st);
    if (!ec || ec != std::errc::no_such_file_or_directory) {
      out.has_entry = !ec;
      return {};
    }
    // Not there: unless the cover was renamed meanwhile, the share is gone.
    if (!sys.status_at(d->fd, obs.token.name, st)) return {};
  }
  return {};
}

}  // namespace tokenlock::detail
