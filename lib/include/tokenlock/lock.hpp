// tokenlock/lock.hpp — one lock, whatever keeps it: a lock directory, a
// Redis server or an etcd cluster.
//
// Purpose
//   tokenlock::lock is what rename_lock (rename_lock.hpp), redis_lock
//   (redis_lock.hpp) and etcd_lock (etcd_lock.hpp) have in common, so that
//   a program written against it runs on any of them, chosen at run time by
//   a spec string (tokenlock::open_lock, open_lock.hpp). Its grants are
//   tokenlock::handle, one type for every backend.
//
// Calling sequence
//     std::unique_ptr<tokenlock::lock> lock = tokenlock::open_lock(spec);
//     {
//       tokenlock::handle h = lock->acquire();   // waits up to the wait budget
//       if (h.fence()) use(resource, *h.fence());
//       ... h.refresh() to extend the lease ...
//       h.release();   // or let the destructor release (it never throws)
//     }
//   A concrete lock keeps its own calls, which return its own handle type
//   (rename_lock::acquire() gives a lock_handle, as before): the interface's
//   calls are reached through a tokenlock::lock& (or pointer), where they
//   give a tokenlock::handle. handle::as<lock_handle>() (or redis_handle,
//   etcd_handle) reaches the backend's own handle behind a handle.
//
// Errors
//   As the backends report them (rename_lock.hpp, redis_lock.hpp,
//   etcd_lock.hpp): each call has a throwing form (tokenlock::lock_error)
//   and a noexcept form taking std::error_code&, whose message is in
//   last_error_message(). Common to all: busy (wait zero), timed_out,
//   lock_lost, bad_argument, not_owner.
//
// Ids
//   handle::id() is what adopt() and break_owner() take: a lock directory's
//   token name (it changes with every refresh: take it after the last one),
//   a Redis or etcd grant's owner id (it stays).
//
// Fences
//   handle::fence() is the grant's fencing token where the backend has one:
//   Redis and etcd (strictly increasing per lock). A lock directory has no
//   number that increases across takeovers (its token names carry a lease
//   end, which a refresh or another host's clock may lower), so its fence
//   is std::nullopt: its fenced commits go through the token's path instead
//   (lock_handle::path(), update.hpp).
//
// Threads and fork
//   As the backend: a rename_lock may be shared between threads; a Redis or
//   etcd lock must not be used by two threads at once. A handle must not be
//   used by two threads at once; in a child of fork(2) it owns nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <typeinfo>
#include <utility>
#include <variant>
#include <vector>

#include "tokenlock/errors.hpp"
#include "tokenlock/lock_options.hpp"

namespace tokenlock {

// What keeps a lock.
enum class lock_backend { directory, redis, etcd };

// "directory", "redis" or "etcd".
const char* backend_name(lock_backend backend) noexcept;

// What a backend's locks do differently, for a program that runs on any
// of them and must decide or say something that depends on it (the
// tokenlock command asks these instead of asking which backend it has).
struct lock_features {
  // Grants carry a fencing token (handle::fence()): Redis, etcd.
  bool fences = false;
  // refresh(lease) can give a lease of another length than the grant's.
  // False for etcd, whose lease keeps the TTL it was granted with.
  bool lease_adjustable = true;
  // The lock names its holder's process (lock_options::owner_pid) and is
  // free once that process is found dead on this host, whatever its lease:
  // a lock directory. A server frees a grant only when its lease ends, so a
  // script's grant there should have a shorter lease.
  bool frees_dead_owners = false;
  // Leases are judged by this host's clock, which must agree with the file
  // server's (clock.hpp, estimate_clock_offset): a lock directory. A server
  // counts its leases itself.
  bool local_clock = false;
};

// One named fact about a lock or its holder that the common fields do not
// carry (the owner's pid, an etcd lease id, ...), for displays and logs:
// `tokenlock status --json` prints them as they are. Names are lower case
// with underscores; each backend's are listed in docs/api.md.
struct lock_fact {
  std::string name;
  std::variant<bool, std::int64_t, std::uint64_t, std::string> value;
};

// Who holds a lock, as every backend can say it.
struct lock_holder {
  // What adopt() and break_owner() take: the token name of a lock
  // directory, the owner id of a Redis or etcd grant.
  std::string id;
  // When its lease ends, by this host's clock (for a server lock, the
  // server's count of the lease added to now).
  std::chrono::system_clock::time_point expires{};
  // Whether its process is known to be alive or gone (same host only).
  owner_liveness owner = owner_liveness::unknown;
  // Whether it may be broken now without the operator's word: its lease has
  // ended or its process is gone. reason says why, or why not, in words.
  bool stale = false;
  std::string reason;
  // Its fencing token, where the backend has fences (Redis, etcd).
  std::optional<std::uint64_t> fence;
  // The backend's own facts about the holder (docs/api.md lists them):
  // its pid and host, its lease as the server counts it, ...
  std::vector<lock_fact> facts;
  // How it holds: exclusive, or shared (slots > 0 for a semaphore's holder,
  // with the semaphore's size).
  lock_mode mode = lock_mode::exclusive;
  std::uint32_t slots = 0;
  // Not a holder but a writer waiting for the shared holders to leave,
  // which bars new ones meanwhile (docs/protocol.md, The order of waiters).
  bool waiting_writer = false;
};

namespace detail {
// One grant of some backend, behind a tokenlock::handle (lib/src/lock_grant.hpp).
class grant {
 public:
  virtual ~grant() = default;  // releases, never throws
  virtual void release(std::error_code& ec) noexcept = 0;
  // No `lease`: the lease acquired with.
  virtual void refresh(std::optional<std::chrono::milliseconds> lease,
                       std::error_code& ec) noexcept = 0;
  virtual std::string detach() noexcept = 0;
  virtual bool owns() const noexcept = 0;
  virtual std::chrono::system_clock::time_point expires() const noexcept = 0;
  virtual std::chrono::milliseconds lease() const noexcept = 0;
  virtual std::optional<std::uint64_t> fence() const noexcept = 0;
  virtual const std::string& id() const noexcept = 0;
  virtual const std::string& notice() const noexcept = 0;
  virtual lock_mode mode() const noexcept = 0;
  // The backend's own handle if it is of type `type`, else nullptr.
  virtual void* native(const std::type_info& type) noexcept = 0;
};
}  // namespace detail

// One grant of a tokenlock::lock. Move-only; the destructor releases (and
// never throws: call release() to know whether the lock was still ours).
class handle {
 public:
  handle() noexcept = default;  // owns nothing
  explicit handle(std::unique_ptr<detail::grant> grant) noexcept : grant_(std::move(grant)) {}
  handle(handle&&) noexcept = default;
  handle& operator=(handle&&) noexcept = default;  // releases ours first
  handle(const handle&) = delete;
  handle& operator=(const handle&) = delete;
  ~handle() = default;

  // Gives the lock back. lock_lost (with the reason) when it was no longer
  // ours; nothing is undone for the new owner. On an empty handle: does
  // nothing. not_owner in a forked child.
  void release();
  void release(std::error_code& ec) noexcept;

  // Extends the lease to now + `lease` (default: the lease acquired with).
  // lock_lost when the grant is not ours any more; not_owner on an empty
  // handle (or one released already). A `lease` of 0 or less, or above 24
  // hours, is bad_argument (nothing changed). An etcd lease keeps the TTL
  // it was granted with: there a `lease` longer than lease() is
  // bad_argument too, and a shorter one renews lease().
  void refresh();
  void refresh(std::error_code& ec) noexcept;
  void refresh(std::chrono::milliseconds lease);
  void refresh(std::chrono::milliseconds lease, std::error_code& ec) noexcept;

  // Gives up the handle without releasing; returns id(), for adopt() in
  // another process. The lease then ends unless someone refreshes it.
  std::string detach() noexcept;

  bool owns() const noexcept { return grant_ && grant_->owns(); }
  explicit operator bool() const noexcept { return owns(); }

  // When the lease ends, by this host's clock; the lease refresh() renews.
  std::chrono::system_clock::time_point expires() const noexcept;
  std::chrono::milliseconds lease() const noexcept;
  // The fencing token (Redis, etcd); std::nullopt for a lock directory.
  std::optional<std::uint64_t> fence() const noexcept;
  // What adopt() and break_owner() take (see Ids above); empty if none.
  const std::string& id() const noexcept;
  // What the operator should know about this grant, in one sentence, or ""
  // when nothing: the server's clock went back behind the lock's last
  // fence (Redis), the server granted a longer lease than asked for (etcd's
  // minimum TTL). Set by acquire; for logs, never a reason to give up.
  const std::string& notice() const noexcept;
  // exclusive, or shared (lock_options::mode and slots of the lock that
  // gave it); exclusive for an empty handle.
  lock_mode mode() const noexcept;

  // The backend's own handle (lock_handle, redis_handle or etcd_handle)
  // when it is an H, else nullptr; for its extras (lock_handle::path(),
  // etcd_handle::lease_id(), ...). Valid as long as this handle.
  template <class H>
  H* as() noexcept {
    return grant_ ? static_cast<H*>(grant_->native(typeid(H))) : nullptr;
  }
  template <class H>
  const H* as() const noexcept {
    return grant_ ? static_cast<const H*>(grant_->native(typeid(H))) : nullptr;
  }

 private:
  void refresh_grant(std::optional<std::chrono::milliseconds> lease,
                     std::error_code& ec) noexcept;

  std::unique_ptr<detail::grant> grant_;
};

// A lock of some backend. rename_lock, redis_lock and etcd_lock derive from
// it; tokenlock::open_lock makes one from a spec.
class lock {
 public:
  virtual ~lock() = default;

  // Acquires the lock, waiting up to the lock's wait budget: busy (budget
  // zero), timed_out, or the backend's errors.
  handle acquire();
  handle acquire(std::error_code& ec) noexcept;

  // One attempt: std::nullopt when another holds the lock.
  std::optional<handle> try_acquire();
  std::optional<handle> try_acquire(std::error_code& ec) noexcept;

  // A handle for the grant named `id` (handle::id(), lock_holder::id), made
  // by this or another process, to refresh or release it here. lock_lost
  // when the lock is not held under that id; bad_argument for an id that
  // cannot be one.
  handle adopt(const std::string& id);
  handle adopt(const std::string& id, std::error_code& ec) noexcept;

  // Frees the lock from the grant named `id`, whatever its lease, for an
  // operator who knows its holder is gone (check holder()->stale first):
  // that grant's next release or refresh reports lock_lost. lock_lost
  // (nothing changed) when another grant, or none, holds the lock. A lock
  // directory takes the token over and releases it (rename_lock::take_over
  // with force); Redis and etcd delete the grant by compare and delete.
  void break_owner(const std::string& id);
  void break_owner(const std::string& id, std::error_code& ec) noexcept;

  // Who holds the lock now; std::nullopt when it is free. Read-only. With
  // shared holders: one of them (holders() lists them all).
  std::optional<lock_holder> holder();
  std::optional<lock_holder> holder(std::error_code& ec) noexcept;

  // Everyone who holds the lock now (empty when it is free): one writer, or
  // every shared holder, and a writer waiting for them to leave
  // (lock_holder::waiting_writer). Read-only.
  std::vector<lock_holder> holders();
  std::vector<lock_holder> holders(std::error_code& ec) noexcept;

  // The spec this lock answers to, as open_lock reads it: the lock
  // directory's path, or the server URL with its password masked ("***")
  // and "#" and the lock's name. For messages and logs; never a secret.
  virtual std::string spec() const = 0;
  virtual lock_backend backend() const noexcept = 0;
  // What this backend's locks do differently (lock_features above).
  virtual lock_features features() const noexcept = 0;
  // Where the lock is kept, as facts, never a secret: a lock directory's
  // {"lock_dir": path}; a server's {"redis" or "etcd": the server without
  // its credentials, "name": NAME}.
  virtual std::vector<lock_fact> location() const = 0;

 protected:
  lock() = default;
  lock(const lock&) = default;
  lock(lock&&) = default;
  lock& operator=(const lock&) = default;
  lock& operator=(lock&&) = default;

 private:
  // Each backend's side of the calls above (their error_code& forms).
  virtual handle acquire_any(std::error_code& ec) noexcept = 0;
  virtual std::optional<handle> try_acquire_any(std::error_code& ec) noexcept = 0;
  virtual handle adopt_any(const std::string& id, std::error_code& ec) noexcept = 0;
  virtual void break_owner_any(const std::string& id, std::error_code& ec) noexcept = 0;
  virtual std::optional<lock_holder> holder_any(std::error_code& ec) noexcept = 0;
  // Default: holder_any's one holder, for a backend without shared holders.
  virtual std::vector<lock_holder> holders_any(std::error_code& ec) noexcept;
};

}  // namespace tokenlock
