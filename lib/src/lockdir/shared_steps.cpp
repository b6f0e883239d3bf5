#include "lockdir/shared_steps.hpp"

#include <algorithm>

#include "lockdir/trust.hpp"

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
    if (failure f = take_census(sys, paths, tok.fd, options, step, census, true)) return f;
    if (!census.live.empty()) return {};
    if (failure f = corrupt_entry(paths, obs.token.name, census, step)) return f;
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

failure corrupt_entry(const lock_paths& paths, const std::string& token,
                      const entry_census& census, const char* step) {
  if (!census.live.empty() || census.malformed.empty()) return {};
  return make_failure(errc::lock_corrupt,
                      describe(step, paths.dir,
                               "the token " + shown_name(token) +
                                   " holds a share entry that breaks the grammar (" +
                                   shown_name(census.malformed.front()) +
                                   "): nobody can tell whether its holder is gone; remove it "
                                   "by hand once it is",
                               {}));
}

namespace {

// The names in the listing `names` that are the share `share` (see
// locate_share).
std::vector<std::string> names_of_share(const std::string& share,
                                        const std::vector<std::string>& names) {
  std::vector<std::string> out;
  if (!is_lone_name(share)) {
    for (const auto& n : names)
      if (n == share) out.push_back(n);
    return out;
  }
  held_token t;
  if (classify_name(share, &t) != name_kind::held) return out;
  const observed_token lone = observed(share, t, name_kind::held);
  for (const auto& n : names)
    if (is_copy_of(n, lone)) out.push_back(n);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

failure locate_share(os& sys, const lock_paths& paths, const std::string& share,
                     const char* step, share_place& out, scoped_fd& tok) {
  for (int round = 0; round < settle_rounds; ++round) {
    out = share_place{};
    if (tok.fd >= 0) sys.close(tok.fd);
    tok.fd = -1;
    const auto d = current_dir(paths);
    if (!d) return {};
    observation obs;
    if (failure f = observe(sys, paths, d.get(), step, obs)) return f;
    if (obs.kind != observation::held || !read_shared(obs.token, out.shared) ||
        (out.shared.kind != share_kind::group && out.shared.kind != share_kind::draining))
      return {};
    out.token = obs.token;
    token_open how;
    if (failure f = open_token_dir(sys, paths, *d, obs.token.name, step, tok, how)) return f;
    if (how == token_open::gone) continue;  // renamed since the listing
    if (how != token_open::ok) return {};
    std::vector<std::string> names;
    if (std::error_code ec = sys.list_directory_at(tok.fd, names))
      return os_failure(sys, paths, step, "cannot list the shared holders in the token", "", ec);
    out.names = names_of_share(share, names);
    return {};
  }
  return {};
}

}  // namespace tokenlock::detail
