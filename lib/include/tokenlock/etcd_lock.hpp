// tokenlock/etcd_lock.hpp — the same lock on an etcd cluster, whose fence
// never goes back.
//
// Purpose
//   Processes on several hosts exclude each other by a lock NAME kept in an
//   etcd cluster (etcd 3.4 or newer, through its JSON gateway /v3/...).
//   etcd replicates every write to a majority of its members before it
//   answers, so the lock survives the loss of a minority of them (a leader
//   killed while the lock is held: the holder keeps it and refreshes
//   through another member). Each grant comes with a fencing token, the
//   grant key's create revision: strictly increasing for the whole cluster,
//   across leader changes and restarts. A holder that lost its lock is told
//   so (errc::lock_lost, with the reason) by its next release or refresh.
//   docs/etcd.md has the keys, the requests and the choices behind them.
//
// Calling sequence
//     tokenlock::etcd_lock lock("etcd://10.0.0.1:2379,10.0.0.2:2379", "coupons");
//     {
//       tokenlock::etcd_handle h = lock.acquire();  // waits up to options.wait
//       use(resource, h.fence());   // the resource checks the token
//       h.release();   // or let the destructor release (it never throws)
//     }
//   try_acquire() makes one attempt and returns std::nullopt when the lock
//   is held. Waiters queue in the order they asked (FIFO): each watches only
//   the waiter before it, so a release wakes exactly one. A crashed
//   holder's lock frees when its lease ends.
//
// Shared locks and semaphores
//     tokenlock::etcd_lock_options o;
//     o.mode = tokenlock::lock_mode::shared;   // or o.slots = 4: one of 4
//     tokenlock::etcd_lock readers(url, "catalogue", o);
//     tokenlock::etcd_handle h = readers.acquire();  // beside other readers
//   Readers hold together, a writer (the default mode) alone; with slots
//   N, at most N hold. Everyone waits in the one line, in the order they
//   asked, so a writer is not starved by readers nor readers by writers,
//   and an exclusive client of the previous version waits for shared
//   holders too. A shared grant has no fence (fence() is 0); holders()
//   lists every holder. docs/etcd.md, Shared locks and semaphores.
//
// Waiters that die
//   A waiter's key waits on a lease of its own of 3 s, kept alive every
//   second, and takes the holder's lease in the request that grants it: a
//   waiter killed with kill -9 holds the line up for about 3.5 s, not for
//   options.lease (docs/etcd.md, Waiters that die). While acquire() waits,
//   SIGTERM, SIGINT and SIGHUP (those the process does not ignore) are
//   caught: the waiter gives its place back (revokes its leases), restores
//   the signal's previous action and raises the signal again, so the
//   process ends as it would have. When the program's own handler returns
//   instead, acquire() fails with std::errc::interrupted. The handlers are
//   in place only while acquire() waits.
//
// The cluster
//   URL: etcd://[user:password@]host:port[,host:port...][?cacert=PATH]
//   (plain HTTP), or etcds://... for HTTPS (cacert: the CA bundle that
//   signed the members' certificates; the system's CAs by default). IPv6
//   hosts in brackets; the port is 2379 when omitted; user and password may
//   be percent-encoded. A request that cannot reach a member, or that the
//   member answers "no leader" / "leader changed", goes to the next one.
//
// The lease
//   etcd counts leases in whole seconds and raises a TTL below its minimum
//   (about 2 s with default settings: 1.5 election timeouts, rounded up).
//   The lease asked for is rounded up to whole seconds, and
//   etcd_handle::lease() is the TTL etcd granted: when it is longer than
//   options.lease, etcd raised it (etcd_handle::lease_raised()). A lease
//   cannot be changed after the grant, so refresh() has no lease argument.
//
// Errors
//   Each fallible call has a throwing form (tokenlock::lock_error) and a
//   noexcept form taking std::error_code& (see errors.hpp). Conditions:
//   - errc::busy / errc::timed_out: as for rename_lock.
//   - errc::lock_lost    release()/refresh()/adopt() found the lock no
//                        longer ours; the message says why: our lease
//                        ended, or our key was deleted by someone else.
//                        From break_owner(): that owner does not hold it.
//                        From acquire(): the waiter's own lease ended
//                        while it waited (no member answered its
//                        keep-alives for a whole lease).
//   - errc::bad_argument a URL, name or options that cannot work (the
//                        message says which part or option).
//   - errc::server_error a member answered an error: a wrong password,
//                        auth not allowed, a request refused.
//   - std::errc codes for the connection (connection_refused, timed_out,
//                        host_unreachable, ...) once every member failed.
//   Every message names the member(s), the step, the cause and the fix.
//   An owner id read from etcd appears escaped and cut (any client that
//   may write the key prefix could have written it).
//   A failed acquire leaves nothing of its own in etcd (its lease is
//   revoked, or ends with its TTL when no member answers).
//
// Threads and fork
//   An etcd_lock keeps one connection for requests and, while waiting, one
//   for watching; it must not be used by two threads at once (make one per
//   thread). An etcd_handle in a child of fork(2) owns nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "tokenlock/errors.hpp"
#include "tokenlock/lock.hpp"
#include "tokenlock/lock_options.hpp"
#include "tokenlock/update_any.hpp"
#include "tokenlock/update_options.hpp"

namespace tokenlock {

namespace detail {
class etcd_client;
struct etcd_handle_access;
}

struct etcd_lock_options {
  // The lease's TTL; rounded up to whole seconds, and raised by etcd to its
  // minimum (see The lease). More than 0 and at most 24 hours.
  std::chrono::milliseconds lease = std::chrono::seconds(60);
  // How long acquire() waits for a busy lock before errc::timed_out. Zero
  // means one attempt (errc::busy); below zero is bad_argument.
  std::chrono::milliseconds wait = std::chrono::seconds(10);
  // Connecting to one member, and each request to it, give up after these;
  // then the next member is tried. More than 0 (else bad_argument).
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(2);
  std::chrono::milliseconds command_timeout = std::chrono::seconds(2);
  // Prefix of the lock's keys: a grant is <prefix><name>/<lease id, hex>
  // (a shared holder's: <lease id, hex>.s<slots>).
  std::string key_prefix = "tokenlock/";
  // exclusive (the default): one holder at a time. shared: holders in this
  // mode hold together, and a writer (exclusive) only alone; every process
  // takes its place in one line, so neither side starves (docs/etcd.md,
  // Shared locks and semaphores). A shared grant has no fence.
  lock_mode mode = lock_mode::exclusive;
  // A semaphore: at most `slots` holders at once (1 to max_slots); non-zero
  // implies shared. Every process must give the same number: one with
  // another waits until the others' holders are gone.
  std::uint32_t slots = 0;
};

// Who holds an etcd lock, as holder() reports it.
struct etcd_holder_info {
  std::string owner;          // the holder's unique id ("<host>-<hash8>.<pid>.<start>.<nonce>")
  std::uint64_t fence = 0;    // its fencing token (the key's create revision)
  std::int64_t lease_id = 0;  // the etcd lease its key is attached to
  std::chrono::milliseconds remaining{0};  // of its lease, as etcd counts it (whole seconds)
  std::chrono::milliseconds lease{0};      // the TTL etcd granted its lease
  std::string key;            // its key in etcd
  // How it holds: exclusive, or shared (slots > 0: one of a semaphore of
  // that many). A shared holder has no fence (fence is 0).
  lock_mode mode = lock_mode::exclusive;
  std::uint32_t slots = 0;
  // Not a holder: the first writer waiting behind shared holders (holders()
  // only). Shared holders that ask after it queue behind it.
  bool waiting_writer = false;
  // The key's create revision: its place in the line (the fence of an
  // exclusive holder).
  std::uint64_t revision = 0;
};

class etcd_handle;

// A tokenlock::lock (lock.hpp): through a tokenlock::lock& its calls give
// tokenlock::handle, whose id() is the owner id and fence() the grant's
// fence; called on an etcd_lock they give etcd_handle, as here.
class etcd_lock : public lock {
 public:
  // Parses nothing yet: a bad URL or name is reported by the first call
  // (bad_argument).
  etcd_lock(std::string url, std::string name, etcd_lock_options options = {});
  ~etcd_lock();
  etcd_lock(etcd_lock&&) noexcept;
  etcd_lock& operator=(etcd_lock&&) noexcept;
  etcd_lock(const etcd_lock&) = delete;
  etcd_lock& operator=(const etcd_lock&) = delete;

  etcd_handle acquire();
  etcd_handle acquire(std::error_code& ec) noexcept;
  std::optional<etcd_handle> try_acquire();
  std::optional<etcd_handle> try_acquire(std::error_code& ec) noexcept;

  // A handle for the grant whose owner id is `owner` (etcd_handle::owner()),
  // so that another process can refresh or release it. lock_lost when the
  // lock is not held by that owner; bad_argument for an empty owner.
  etcd_handle adopt(const std::string& owner);
  etcd_handle adopt(const std::string& owner, std::error_code& ec) noexcept;

  // Removes the grant of `owner`, for an operator who knows its holder is
  // gone: deletes the lock's first key only while it is still that owner's
  // grant (compare and delete, by the key's create revision), then revokes
  // its lease. The next waiter is granted the lock; the old holder's
  // release or refresh reports lock_lost. lock_lost (nothing deleted) when
  // another owner, or nobody, holds the lock; bad_argument for an empty
  // owner.
  void break_owner(const std::string& owner);
  void break_owner(const std::string& owner, std::error_code& ec) noexcept;

  // Who holds the lock now; std::nullopt when it is free. With shared
  // holders: the first of them.
  std::optional<etcd_holder_info> holder();
  std::optional<etcd_holder_info> holder(std::error_code& ec) noexcept;

  // Every holder, in line order (empty when the lock is free), and after
  // shared holders the first writer waiting behind them (waiting_writer).
  std::vector<etcd_holder_info> holders();
  std::vector<etcd_holder_info> holders(std::error_code& ec) noexcept;

  const std::string& url() const noexcept { return url_; }
  const std::string& name() const noexcept { return name_; }
  const etcd_lock_options& options() const noexcept { return options_; }

  // The URL with its password masked, '#' and the name (tokenlock::lock::spec()).
  std::string spec() const override;
  lock_backend backend() const noexcept override { return lock_backend::etcd; }
  lock_features features() const noexcept override;
  std::vector<lock_fact> location() const override;

 private:
  handle acquire_any(std::error_code& ec) noexcept override;
  std::optional<handle> try_acquire_any(std::error_code& ec) noexcept override;
  handle adopt_any(const std::string& owner, std::error_code& ec) noexcept override;
  void break_owner_any(const std::string& owner, std::error_code& ec) noexcept override;
  std::optional<lock_holder> holder_any(std::error_code& ec) noexcept override;
  std::vector<lock_holder> holders_any(std::error_code& ec) noexcept override;

  std::string url_;
  std::string name_;
  etcd_lock_options options_;
  std::shared_ptr<detail::etcd_client> client_;
};

// One grant. Move-only; the destructor releases (and never throws).
class etcd_handle {
 public:
  etcd_handle() noexcept = default;
  etcd_handle(etcd_handle&& other) noexcept;
  etcd_handle& operator=(etcd_handle&& other) noexcept;  // releases ours first
  etcd_handle(const etcd_handle&) = delete;
  etcd_handle& operator=(const etcd_handle&) = delete;
  ~etcd_handle();

  // Deletes our key if it is still ours (the next waiter wakes), then
  // revokes the lease. lock_lost (with the reason) when it was not ours any
  // more. On an empty handle: does nothing. not_owner in a forked child.
  void release();
  void release(std::error_code& ec) noexcept;

  // Keeps the lease alive for another lease() (etcd's keep-alive), and
  // checks that our key is still there. lock_lost when the lease expired or
  // the key was deleted. The fence stays.
  void refresh();
  void refresh(std::error_code& ec) noexcept;

  // Gives up the handle without releasing; returns the owner id (for
  // etcd_lock::adopt() in another process). The lease then ends with its
  // TTL unless someone refreshes it.
  std::string detach() noexcept;

  bool owns() const noexcept;
  explicit operator bool() const noexcept { return owns(); }

  // The fencing token: the key's create revision, larger than every
  // revision etcd gave before it. 0 for a shared grant, which has none.
  std::uint64_t fence() const noexcept { return mode_ == lock_mode::shared ? 0 : fence_; }
  const std::string& owner() const noexcept { return owner_; }
  const std::string& key() const noexcept { return key_; }
  std::int64_t lease_id() const noexcept { return lease_id_; }
  // When the lease ends, by this host's clock (etcd counts it; this is the
  // local estimate from the last grant or keep-alive's answer).
  std::chrono::system_clock::time_point expires() const noexcept { return expires_; }
  // The TTL etcd granted, and whether it is longer than the one asked for
  // (etcd's minimum TTL, or the rounding up to whole seconds).
  std::chrono::milliseconds lease() const noexcept { return lease_; }
  bool lease_raised() const noexcept { return lease_raised_; }
  // exclusive, or shared (a shared holder's or a semaphore's grant).
  lock_mode mode() const noexcept { return mode_; }

 private:
  friend struct detail::etcd_handle_access;
  void forget() noexcept;

  std::shared_ptr<detail::etcd_client> client_;
  std::string key_;
  std::string owner_;
  std::uint64_t fence_ = 0;  // the key's create revision, a shared grant's too
  std::int64_t lease_id_ = 0;
  std::chrono::system_clock::time_point expires_{};
  std::chrono::milliseconds lease_{0};
  bool lease_raised_ = false;
  std::uint64_t fork_generation_ = 0;
  lock_mode mode_ = lock_mode::exclusive;
};

// Whether the process that holds a grant is known to be gone, from its
// owner id: dead when it names this host and a pid that no longer exists;
// unknown for another host (or an id tokenlock did not write); alive
// otherwise, including a process that may not be signalled. Only a dead
// holder's grant may be broken before its lease ends without the
// operator's word that its owner is gone. The same judgement as
// redis_holder_liveness (redis_inspect.hpp). Never fails; thread safe.
//     if (auto h = lock.holder())
//       if (tokenlock::etcd_holder_liveness(*h) == tokenlock::owner_liveness::dead)
//         lock.break_owner(h->owner);
owner_liveness etcd_holder_liveness(const etcd_holder_info& holder) noexcept;

// update_file, increment_counter and commit_file under an etcd lock are
// tokenlock/update_any.hpp's forms for any tokenlock::lock (included here, so
// that code written for this header's own overloads still compiles): the
// commit is fenced by the grant's fence through a directory TARGET.fence
// beside the target; a holder that stalled past its lease writes nothing
// (lock_lost), and a holder whose fence is older than the last one that
// updated the file fails at once. The target must be written only through
// these (or by processes that honour the fence directory).
// update_result::fenced is always true.

}  // namespace tokenlock
