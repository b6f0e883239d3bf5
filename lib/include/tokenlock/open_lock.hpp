// tokenlock/open_lock.hpp — a lock of any backend, chosen by a spec string.
//
// Purpose
//   One string says where a lock is kept, so that a program (a command, a
//   CGI, a worker) takes its lock from its configuration and runs on a lock
//   directory, Redis or etcd without a branch of its own. The lock it gives
//   is a tokenlock::lock (lock.hpp).
//
// Specs
//   /srv/app/locks/coupons           a lock directory (rename_lock): any
//                                    spec without "scheme://" is a path
//   redis://[[user]:password@]host[:port][/db]#NAME
//   unix://[:password@]/path/to.sock[?db=N]#NAME
//                                    lock NAME in a Redis server (redis_lock)
//   etcd://[user:password@]host:port[,host:port...][?cacert=PATH]#NAME
//   etcds://...#NAME                 lock NAME in an etcd cluster (etcd_lock)
//   The part before '#' is the server URL exactly as redis_lock and
//   etcd_lock take it (redis_lock.hpp, etcd_lock.hpp). NAME is
//   percent-decoded: write '%' as %25, '#' as %23 and '@' as %40. A '#' in
//   a password is written %23 (RFC 3986 allows no raw '#' before the
//   fragment), and so is one in a unix:// socket path, which is
//   percent-decoded. A directory whose path starts with "scheme://" is written
//   ./scheme://...
//
// Calling sequence
//     tokenlock::open_options o;
//     o.wait = std::chrono::seconds(2);
//     std::unique_ptr<tokenlock::lock> lock =
//         tokenlock::open_lock("redis://127.0.0.1:6379/0#coupons", o);
//     tokenlock::handle h = lock->acquire();
//   Opening connects to nothing and touches no directory: the first call on
//   the lock does, and reports what is wrong with the URL or the directory.
//
// Errors
//   - errc::bad_argument        an empty spec, a scheme of no backend
//                               ("ftp://"), a server URL without #NAME, a
//                               bad escape in NAME. The message shows the
//                               spec with its password masked.
//   - errc::backend_unavailable the spec names Redis or etcd and this build
//                               of the library has no such backend; the
//                               message says which build option adds it.
//   Everything else is reported by the lock's first call.
//
// Linking
//   open_lock is in the library tokenlock::open (CMake), which links the
//   backends this build has (tokenlock::redis, tokenlock::etcd).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include "tokenlock/lock.hpp"
#include "tokenlock/lock_options.hpp"

namespace tokenlock {

// The settings of a lock opened by a spec. lease, wait and the timeouts
// apply to every backend; the rest go to the backend they name and are
// ignored by the others.
struct open_options {
  // How long a grant stays valid after acquire or refresh; more than 0 and
  // at most 24 hours (an etcd lease is rounded up to whole seconds).
  std::chrono::milliseconds lease = std::chrono::seconds(60);
  // How long acquire() waits for a busy lock; zero: one attempt (busy).
  std::chrono::milliseconds wait = std::chrono::seconds(10);
  // A server lock's connect and per-command timeouts.
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(2);
  std::chrono::milliseconds command_timeout = std::chrono::seconds(2);
  // How the lock is held, on every backend (lock_options::mode and slots):
  // exclusive, shared, or one of `slots` holders of a semaphore.
  lock_mode mode = lock_mode::exclusive;
  std::uint32_t slots = 0;

  // A lock directory's settings (lock_options.hpp): dead-owner detection,
  // modes, group, waiting. Its lease, wait, mode and slots are replaced by
  // those above.
  lock_options directory;

  // A Redis lock's own settings (redis_lock_options in redis_lock.hpp).
  struct redis_settings {
    int replicas = 0;
    std::chrono::milliseconds replica_timeout = std::chrono::milliseconds(500);
    std::string key_prefix = "tokenlock:";
  } redis;

  // An etcd lock's own settings (etcd_lock_options in etcd_lock.hpp).
  struct etcd_settings {
    std::string key_prefix = "tokenlock/";
  } etcd;
};

// The lock `spec` names (see Specs above).
std::unique_ptr<lock> open_lock(std::string_view spec, const open_options& options = {});
std::unique_ptr<lock> open_lock(std::string_view spec, const open_options& options,
                                std::error_code& ec) noexcept;

// The spec of lock `name` in the server `url` (a Redis or etcd URL, as
// redis_lock and etcd_lock take it): url#name, with '%', '#' and '@' in
// the name percent-encoded and a raw '#' in the URL (a password's) written
// %23, which the servers' URL parsers decode. For programs that take the
// server and the name apart, as the tokenlock command does (--redis URL
// NAME). Checks nothing: open_lock does.
std::string server_lock_spec(std::string_view url, std::string_view name);

// Whether this build of the library has `backend` (a lock directory always).
bool backend_available(lock_backend backend) noexcept;

}  // namespace tokenlock
