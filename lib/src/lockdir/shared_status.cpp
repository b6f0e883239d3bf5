// Who holds a lock directory: the exclusive holder, or every shared holder
// and a waiting writer; and breaking one share.
#include <string>

#include "lockdir/shared_lock.hpp"
#include "lockdir/shared_steps.hpp"
#include "lockdir/trust.hpp"

namespace tokenlock::detail {
namespace {

std::chrono::system_clock::time_point time_of(std::int64_t us) {
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::microseconds(us)));
}

}  // namespace

holder_info holder_row(const boost::filesystem::path& dir, const observed_token& t,
                       const judgement& j, const lock_options& options) {
  holder_info h;
  h.token = t.name;
  h.path = dir / t.name;
  const std::int64_t legacy_us = options.legacy_timeout.count() * 1000;
  h.expires = time_of(t.legacy ? t.expiry_us + legacy_us : t.expiry_us);
  h.legacy = t.legacy;
  h.host_tag = t.host_tag;
  h.same_host = j.same_host;
  h.pid = t.pid;
  h.start_time = t.start_time;
  h.owner = j.owner;
  h.stale = j.stale;
  h.reason = j.reason;
  return h;
}

namespace {

// The members of a cover, each a row; a draining cover's writer too.
failure cover_rows(os& sys, const lock_paths& paths, const open_dir& d, const observed_token& seen,
                   const shared_token& s, const lock_options& options,
                   std::vector<holder_info>& out) {
  scoped_fd tok{sys};
  token_open how;
  if (failure f = open_token_dir(sys, paths, d, seen.name, "status", tok, how)) return f;
  entry_census census;
  if (how == token_open::ok)
    if (failure f = take_census(sys, paths, tok.fd, options, "status", census)) return f;
  for (const observed_token& e : census.live) {
    holder_info h = holder_row(paths.dir_path / seen.name, e, judge(sys, options, e), options);
    h.mode = lock_mode::shared;
    h.slots = s.limit;
    out.push_back(std::move(h));
  }
  if (s.kind == share_kind::draining) {
    const observed_token writer = named_holder(seen);
    holder_info h = holder_row(paths.dir_path, writer, judge(sys, options, writer), options);
    h.token = seen.name;
    h.waiting_writer = true;
    h.stale = false;
    h.reason = "waits for the shared holders to leave; no new one joins meanwhile";
    out.push_back(std::move(h));
  }
  return {};
}

}  // namespace

failure list_holders(os& sys, const lock_paths& paths, const open_dir* d,
                     const lock_options& options, std::vector<holder_info>& out) {
  out.clear();
  observation obs;
  if (failure f = observe(sys, paths, d, "status", obs)) return f;
  if (obs.kind != observation::held) return {};
  shared_token s;
  if (!read_shared(obs.token, s) || s.kind == share_kind::reserved) {
    out.push_back(holder_row(paths.dir_path, obs.token, judge(sys, options, obs.token), options));
    return {};
  }
  if (s.kind == share_kind::lone) {
    const observed_token holder = named_holder(obs.token);
    holder_info h = holder_row(paths.dir_path, holder, judge(sys, options, holder), options);
    h.token = obs.token.name;
    h.mode = lock_mode::shared;
    h.slots = s.limit;
    out.push_back(std::move(h));
    return {};
  }
  return cover_rows(sys, paths, *d, obs.token, s, options, out);
}

failure break_share(const std::shared_ptr<const lock_core>& core, const lock_options& options,
                    const std::string& id) {
  os& sys = *core->sys;
  const lock_paths& paths = *core->paths;
  std::shared_ptr<const open_dir> d;
  if (failure f = lock_directory_fd(core->sys, paths, paths.share, "break", d)) return f;
  share_place place;
  scoped_fd tok{sys};
  if (d)
    if (failure f = locate_share(sys, paths, id, "break", place, tok)) return f;
  // A member's entry, or every copy of a converted lone share.
  bool removed = false;
  for (const auto& name : place.names) removed = !remove_entry(sys, tok.fd, name) || removed;
  if (!removed)
    return make_failure(errc::lock_lost,
                        describe("break", paths.dir,
                                 "the lock holds no share " + shown_name(id) +
                                     " (released, refreshed or broken already)",
                                 {}));
  return settle_cover(sys, paths, options, "break");
}

}  // namespace tokenlock::detail
