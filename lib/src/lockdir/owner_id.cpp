#include "lockdir/owner_id.hpp"

#include "posix/os.hpp"
#include "lockdir/token_name.hpp"

namespace tokenlock::detail {

bool parse_owner_id(std::string_view owner, std::string& host_tag, int& pid) {
  host_tag.clear();
  pid = 0;
  // An owner id is a held token without "lockfile.<expiry>.": parsed as one.
  const std::string as_token = with_expiry(owner, 1);
  held_token t;  // points into as_token
  if (classify_name(as_token, &t) != name_kind::held) return false;
  host_tag = std::string(t.host_tag);
  pid = t.pid;
  return true;
}

owner_liveness process_liveness(std::string_view host_tag, int pid) noexcept {
  try {
    auto sys = system_os();
    if (pid <= 0 || host_tag != sys->self().host_tag) return owner_liveness::unknown;
    return sys->signal_probe(pid) == std::errc::no_such_process ? owner_liveness::dead
                                                                : owner_liveness::alive;
  } catch (...) {
    return owner_liveness::unknown;  // out of memory for the host tag: not known to be gone
  }
}

owner_liveness owner_id_liveness(std::string_view owner) noexcept {
  try {
    std::string host_tag;
    int pid = 0;
    if (!parse_owner_id(owner, host_tag, pid)) return owner_liveness::unknown;
    return process_liveness(host_tag, pid);
  } catch (...) {
    return owner_liveness::unknown;
  }
}

}  // namespace tokenlock::detail
