// The command line's lock as a spec, and tokens (lock_target.hpp).
#include "lock_target.hpp"

#include <iostream>

#include "url_source.hpp"

namespace tokenlock::cli {

void add_server_options(po::options_description& d) {
  d.add_options()("redis", po::value<std::string>()->value_name("URL"),
                  "the lock is the NAME given for LOCKDIR in this Redis server "
                  "(redis://[[user]:password@]host[:port][/db] or unix:///path[?db=N]; "
                  "env:VAR or file:PATH read it from there, keeping a password off the "
                  "command line)")(
      "etcd", po::value<std::string>()->value_name("URL"),
      "the lock is the NAME given for LOCKDIR in this etcd cluster "
      "(etcd://[user:password@]host:port[,host:port...][?cacert=PATH], or etcds:// for HTTPS; "
      "env:VAR or file:PATH as for --redis)");
}

bool names_server(const po::variables_map& v) { return v.count("redis") || v.count("etcd"); }

namespace {

// LOCKDIR as a spec: a relative path that would read as "scheme://" is
// written ./scheme://...
std::string path_for_spec(const std::string& dir) {
  return dir.find("://") != std::string::npos && dir.front() != '/' ? "./" + dir : dir;
}

// The URL of --redis or --etcd names a server of that kind: a spec would
// otherwise read "etcd://" after --redis as etcd. The URL is not shown: it
// may hold a password.
void check_scheme(const std::string& url, bool redis) {
  const auto starts = [&](const char* scheme) { return url.rfind(scheme, 0) == 0; };
  if (redis && !starts("redis://") && !starts("rediss://") && !starts("unix://"))
    throw po::error("--redis takes a Redis URL: it must start with redis://, rediss:// or "
                    "unix://");
  if (!redis && !starts("etcd://") && !starts("etcds://"))
    throw po::error("--etcd takes an etcd URL: it must start with etcd:// or etcds://");
}

}  // namespace

std::string lock_spec_of(const po::variables_map& v, const std::string& name) {
  const bool redis = v.count("redis") > 0, etcd = v.count("etcd") > 0;
  if (!redis && !etcd) return path_for_spec(name);
  if (redis && etcd) throw po::error("--redis and --etcd exclude each other: name one lock server");
  const char* opt = redis ? "--redis" : "--etcd";
  for (const char* dir_only : {"dir-mode", "group", "legacy-timeout"})
    if (v.count(dir_only))
      throw po::error(std::string("--") + dir_only + " has no meaning with " + opt);
  const std::string url = url_from_source(v[redis ? "redis" : "etcd"].as<std::string>(), opt);
  check_scheme(url, redis);
  return server_lock_spec(url, name);
}

std::unique_ptr<lock> open_or_report(const std::string& spec, const open_options& options,
                                     int& code) {
  std::error_code ec;
  std::unique_ptr<lock> l = open_lock(spec, options, ec);
  if (ec) code = report(ec, last_error_message());
  return l;
}

lock_features features_of(const std::string& spec) {
  std::error_code ec;
  const std::unique_ptr<lock> l = open_lock(spec, open_options{}, ec);
  return l ? l->features() : lock_features{};
}

std::string token_of(const handle& h) {
  return h.fence() ? std::to_string(*h.fence()) + "." + h.id() : h.id();
}

std::string token_of(const lock_holder& h) {
  return h.fence ? std::to_string(*h.fence) + "." + h.id : h.id;
}

std::string id_of(const lock& l, const std::string& token) {
  if (!l.features().fences) return token;
  const auto dot = token.find('.');
  if (dot == 0 || dot == std::string::npos || dot + 1 == token.size())
    throw po::error("\"" + escaped(token) + "\" is not a token of " + escaped(l.spec()) +
                    " (<fence>.<owner>, or a shared grant's <owner>, as acquire prints it)");
  // A shared grant has no fence, and acquire prints its owner alone. An
  // owner's first part is host-hash8, never digits only, so a token whose
  // first part is digits has a fence in front.
  if (token.find_first_not_of("0123456789") != dot) return token;
  return token.substr(dot + 1);
}

void print_notice(const handle& h) {
  if (!h.notice().empty()) std::cerr << "tokenlock: note: " << escaped(h.notice()) << "\n";
}

}  // namespace tokenlock::cli
