#include "lockdir/shared_group.hpp"

#include <algorithm>

#include "lockdir/trust.hpp"

namespace tokenlock::detail {

observed_token named_holder(const observed_token& shared) {
  shared_token s;
  observed_token h = shared;
  if (!read_shared(shared, s)) return h;
  h.host_tag = flipped_tag(shared.host_tag);
  h.start_time = s.start12;
  return h;
}

bool entry_census::holds(const std::string& entry) const {
  return std::any_of(live.begin(), live.end(),
                     [&](const observed_token& t) { return t.name == entry; });
}

std::size_t entry_census::others(const std::string& a, const std::string& b) const {
  return static_cast<std::size_t>(std::count_if(live.begin(), live.end(), [&](const observed_token& t) {
    return t.name != a && t.name != b;
  }));
}

failure open_token_dir(os& sys, const lock_paths& paths, const open_dir& d,
                       const std::string& name, const char* step, scoped_fd& out,
                       token_open& how) {
  how = token_open::ok;
  std::error_code ec = sys.open_directory(d.fd, name, out.fd);
  if (ec == std::errc::no_such_file_or_directory) {
    how = token_open::gone;
    return {};
  }
  // A file (a legacy script's token, or a plant) or a link as the token:
  // no entry is made or listed through it; shared holders wait.
  if (ec == std::errc::not_a_directory || ec == std::errc::too_many_symbolic_link_levels) {
    how = token_open::not_a_directory;
    return {};
  }
  if (ec)
    return os_failure(sys, paths, step, "cannot open the token " + shown_name(name), name, ec);
  failure f = check_trusted_fd(sys, out.fd, paths.dir_slash + name, step, "token", d.group);
  // A FUSE client (sshfs) answers the fstat of a directory renamed since
  // it was opened by the name it had: ENOENT is the rename, not a fault.
  if (f.code == std::errc::no_such_file_or_directory) {
    how = token_open::gone;
    return {};
  }
  return f;
}

namespace {

// The part of an entry's name that its copies share: all but the last 8
// hex digits of the nonce (shared_name.hpp, copy_of_lone).
std::string_view copy_key(std::string_view name) { return name.substr(0, name.size() - 8); }

// Whether `name` is a copy of an entry counted already.
bool copy_counted(const std::vector<observed_token>& live, const std::string& name) {
  return std::any_of(live.begin(), live.end(), [&](const observed_token& t) {
    return copy_key(t.name) == copy_key(name);
  });
}

}  // namespace

failure take_census(os& sys, const lock_paths& paths, int fd, const lock_options& options,
                    const char* step, entry_census& out, bool until_live) {
  out = entry_census{};
  std::vector<std::string> names;
  if (std::error_code ec = sys.list_directory_at(fd, names))
    return os_failure(sys, paths, step, "cannot list the shared holders in the token", "", ec);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  for (auto& n : names) {
    if (n.compare(0, entry_prefix.size(), entry_prefix) != 0) continue;
    observed_token t;
    if (!read_entry(n, t)) {
      out.malformed.push_back(std::move(n));
      continue;
    }
    if (judge(sys, options, t).stale)
      out.stale.push_back(std::move(n));
    else if (!copy_counted(out.live, n))
      out.live.push_back(std::move(t));
    if (until_live && !out.live.empty()) break;
  }
  return {};
}

void remove_stale_entries(os& sys, int fd, const entry_census& census) {
  for (const auto& n : census.stale)
    if (sys.remove_at(fd, n, true) == std::errc::not_a_directory) sys.remove_at(fd, n, false);
}

failure make_entry(os& sys, const lock_paths& paths, int fd, const std::string& name,
                   const char* step, entry_made& how) {
  how = entry_made::made;
  std::error_code ec = sys.make_bare_directory_at(fd, name, 0700);
  if (ec == std::errc::file_exists) {
    how = entry_made::existed;
    return {};
  }
  if (ec == std::errc::no_such_file_or_directory) {
    how = entry_made::gone;
    return {};
  }
  if (ec)
    return os_failure(sys, paths, step, "cannot make the share entry " + shown_name(name), "",
                      ec);
  return {};
}

std::error_code remove_entry(os& sys, int fd, const std::string& name) {
  return sys.remove_at(fd, name, true);
}

}  // namespace tokenlock::detail
