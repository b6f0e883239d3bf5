#include "open/lock_spec.hpp"

#include <cctype>

#include "net/server_url.hpp"

namespace tokenlock::detail {
namespace {

// "scheme" of "scheme://...", lower case; empty when `spec` is no URL
// (RFC 3986: a letter, then letters, digits, '+', '-', '.').
std::string scheme_of(std::string_view spec) {
  const std::size_t colon = spec.find("://");
  if (colon == std::string_view::npos || colon == 0 || !std::isalpha(static_cast<unsigned char>(spec[0])))
    return {};
  std::string scheme;
  for (char c : spec.substr(0, colon)) {
    const auto u = static_cast<unsigned char>(c);
    if (!std::isalnum(u) && c != '+' && c != '-' && c != '.') return {};
    scheme += static_cast<char>(std::tolower(u));
  }
  return scheme;
}

bool is_etcd(const std::string& scheme) { return scheme == "etcd" || scheme == "etcds"; }

const char* const spec_forms =
    "a lock directory's path, redis://[:PASSWORD@]HOST[:PORT][/DB]#NAME, "
    "unix:///SOCKET[?db=N]#NAME or etcd[s]://HOST:PORT[,HOST:PORT...]#NAME";

failure bad_spec(std::string_view spec, const std::string& what) {
  return make_failure(errc::bad_argument, "tokenlock: open_lock " + masked_spec(spec) + ": " +
                                              what + "; a spec is " + spec_forms);
}

}  // namespace

std::string masked_spec(std::string_view spec) {
  const std::string scheme = scheme_of(spec);
  if (scheme.empty()) return std::string(spec);
  // The fragment is not shown: a password holding an unencoded '#' would
  // end up there, and with an '@' after the '#' even the part before it
  // may be a piece of a password.
  const std::size_t hash = spec.find('#');
  if (hash != std::string_view::npos && spec.find('@', hash) != std::string_view::npos)
    return std::string(spec.substr(0, spec.find("://"))) + "://***";
  return masked_url(spec.substr(0, spec.find('#')), is_etcd(scheme)) +
         (spec.find('#') != std::string_view::npos ? "#..." : "");
}

failure parse_lock_spec(std::string_view spec, lock_spec& out) {
  out = lock_spec{};
  if (spec.empty()) return bad_spec(spec, "the spec is empty");
  const std::string scheme = scheme_of(spec);
  if (scheme.empty()) {
    out.location = std::string(spec);
    return {};
  }
  if (scheme == "redis" || scheme == "rediss" || scheme == "unix")
    out.backend = lock_backend::redis;
  else if (is_etcd(scheme))
    out.backend = lock_backend::etcd;
  else
    return bad_spec(spec, "no lock backend is called " + scheme + "://");
  const std::size_t hash = spec.find('#');
  if (hash == std::string_view::npos || hash + 1 == spec.size())
    return bad_spec(spec, "no lock name: end the server URL with #NAME");
  const std::string_view fragment = spec.substr(hash + 1);
  // A raw '@' after the '#' is most likely a password holding a '#'.
  if (fragment.find('@') != std::string_view::npos)
    return bad_spec(spec, "an '@' after the '#': write a '#' in a password as %23, and an '@' "
                          "in a lock name as %40");
  if (!percent_decode(fragment, out.name))
    return bad_spec(spec, "the lock name has a '%' without two hex digits (a '%' is %25)");
  out.location = std::string(spec.substr(0, hash));
  return {};
}

}  // namespace tokenlock::detail
