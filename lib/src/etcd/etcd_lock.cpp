#include "tokenlock/etcd_lock.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "etcd/etcd_client.hpp"
#include "etcd/etcd_line.hpp"
#include "etcd/etcd_requests.hpp"
#include "etcd/etcd_wait_stats.hpp"
#include "core/escaped.hpp"
#include "core/failure.hpp"
#include "grant_handle.hpp"
#include "lockdir/owner_id.hpp"
#include "posix/os.hpp"
#include "posix/signals.hpp"
#include "posix/stop_signal_watch.hpp"
#include "lockdir/token_name.hpp"

namespace tokenlock {

namespace detail {

etcd_wait_stats& this_thread_etcd_wait_stats() noexcept {
  thread_local etcd_wait_stats stats;
  return stats;
}

struct etcd_handle_access {
  static void fill(etcd_handle& h, std::shared_ptr<etcd_client> c, const etcd_kv& kv,
                   std::string owner, long long ttl_s, std::chrono::milliseconds asked,
                   lock_mode mode) {
    h.client_ = std::move(c);
    h.mode_ = mode;
    h.key_ = kv.key;
    h.owner_ = std::move(owner);
    h.fence_ = static_cast<std::uint64_t>(kv.create_revision);
    h.lease_id_ = kv.lease;
    h.lease_ = std::chrono::seconds(ttl_s);
    h.lease_raised_ = h.lease_ > asked;
    h.expires_ = std::chrono::system_clock::now() + h.lease_;
    h.fork_generation_ = system_os()->fork_generation();
  }
  static void expires_in(etcd_handle& h, std::chrono::milliseconds remaining) {
    h.expires_ = std::chrono::system_clock::now() + remaining;
  }
};

}  // namespace detail

namespace {

using namespace detail;
using std::chrono::milliseconds;

constexpr milliseconds max_lease = std::chrono::hours(24);

failure bad_option(const std::string& name, const char* option, milliseconds value,
                   const char* must) {
  return make_failure(errc::bad_argument, "tokenlock: etcd lock " + name + ": options." + option +
                                              " must be " + must + "; it is " +
                                              std::to_string(value.count()) + " ms");
}

// A value read from etcd (an owner id, which any client with write access
// to the prefix may have written), fit for a one-line message: escaped and
// cut (escaped.hpp).
std::string shown(const std::string& value) { return shown_bytes(value, 80); }

failure validate(const etcd_lock_options& o, const std::string& name) {
  if (name.empty() || name.size() > 200)
    return make_failure(errc::bad_argument, "tokenlock: etcd lock name: it must be 1 to 200 bytes long");
  for (char c : name)
    if (c == '/' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return make_failure(errc::bad_argument,
                          "tokenlock: etcd lock name \"" + name +
                              "\": it must not hold '/' or control characters (a '/' would "
                              "make one lock's keys part of another's)");
  if (o.lease.count() <= 0 || o.lease > max_lease)
    return make_failure(errc::bad_argument,
                        "tokenlock: etcd lock " + name +
                            ": the lease must be more than 0 and at most 24 hours; it is " +
                            std::to_string(o.lease.count()) + " ms");
  if (o.wait.count() < 0) return bad_option(name, "wait", o.wait, "0 or more (0: one attempt)");
  if (o.connect_timeout.count() <= 0)
    return bad_option(name, "connect_timeout", o.connect_timeout, "more than 0");
  if (o.command_timeout.count() <= 0)
    return bad_option(name, "command_timeout", o.command_timeout, "more than 0");
  if (o.slots > max_slots)
    return make_failure(errc::bad_argument, "tokenlock: etcd lock " + name +
                                                ": options.slots must be 0 (no semaphore) to " +
                                                std::to_string(max_slots) + "; it is " +
                                                std::to_string(o.slots));
  return {};
}

failure connect(const std::string& url, const etcd_lock_options& o, std::shared_ptr<etcd_client>& c) {
  if (c) return {};
  etcd_url u;
  if (failure f = parse_etcd_url(url, u)) return f;
  c = std::make_shared<etcd_client>(std::move(u), o.connect_timeout, o.command_timeout);
  return {};
}

std::string lock_dir(const etcd_lock_options& o, const std::string& name) {
  return o.key_prefix + name + "/";
}

bool is_shared(const etcd_lock_options& o) { return o.mode == lock_mode::shared || o.slots > 0; }

std::string lease_hex(long long id) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(id));
  return buf;
}

std::string new_owner_id() {
  auto sys = system_os();
  const process_identity& me = sys->self();
  return std::string(owner_part(make_token(1, me.host_tag, me.pid, me.start_time, sys->random_u64())));
}

// The lease of a key that waits in line (docs/etcd.md, Waiters that
// die): short, so that a waiter killed without a word (kill -9) holds the
// line up for this long, not for the holder's lease; kept alive at a
// third of it.
constexpr long long waiter_lease_s = 3;

struct attempt {
  std::string key, dir, owner;
  long long lease = 0, ttl_s = 0, revision = 0;
  std::chrono::steady_clock::time_point kept_alive;
  // The waiter's own short lease (0: none), while the key waits on it.
  long long waiter_lease = 0, waiter_ttl_s = 0;
  std::chrono::steady_clock::time_point waiter_kept_alive;
  // A shared holder's attempt, and its slots (0: readers without a limit).
  bool shared = false;
  std::uint32_t limit = 0;
  // The keys ahead of ours at the last look: the whole line ahead for a
  // shared attempt, the first key for a writer's first try.
  std::vector<etcd_kv> ahead;
};

std::string slots_text(std::uint32_t limit) {
  return limit == 0 ? std::string("shared without a limit")
                    : "a semaphore of " + std::to_string(limit);
}

// Who keeps attempt `a` out, from the keys ahead of its own.
std::string holders_text(const attempt& a) {
  if (a.ahead.empty()) return "held";
  const etcd_kv& first = a.ahead[0];
  const line_kind k = kind_of(a.dir, first.key);
  const std::string owner = first.value.empty() ? std::string("?") : shown(first.value);
  if (k.kind == line_kind::exclusive)
    return "held by " + owner + " (fence " + std::to_string(first.create_revision) + ")";
  if (!a.shared) return "held by shared holders (the first: " + owner + ")";
  const std::size_t held = holder_count(a.dir, a.ahead);
  std::string text = "held by " + std::to_string(held) +
                     (k.limit == 0 ? " shared holder" : " holder") + (held == 1 ? "" : "s") +
                     (k.limit == 0 ? std::string() : " of " + slots_text(k.limit)) +
                     " (the first: " + owner + ")";
  if (k.limit != a.limit)
    text += "; this acquire is " + slots_text(a.limit) + ", theirs " + slots_text(k.limit) +
            ": every process must give the same number of slots";
  const std::size_t writer = waiting_writer(a.dir, a.ahead);
  if (writer < a.ahead.size())
    text += "; a writer waits ahead of us (" + shown(a.ahead[writer].value) + ")";
  return text;
}

failure refused(const etcd_client& c, const std::string& name, const attempt& a, bool waited,
                milliseconds wait) {
  const std::string who = holders_text(a);
  if (!waited)
    return make_failure(errc::busy, "tokenlock: acquire " + c.server() + " " + name + ": the lock is " + who);
  return make_failure(errc::timed_out, "tokenlock: acquire " + c.server() + " " + name + ": waited " +
                                           std::to_string(wait.count()) + " ms; the lock is " + who);
}

// Gives the leases back after a failed or refused attempt (revoking a
// lease deletes the key attached to it); a lease would end with its TTL
// anyway, so a failure here is not reported.
void give_back(etcd_client& c, const attempt& a) {
  bool gone = false;
  (void)lease_revoke(c, "acquire", a.lease, gone);
  if (a.waiter_lease != 0) (void)lease_revoke(c, "acquire", a.waiter_lease, gone);
}

// Keeps lease `id` (of `ttl_s`) alive when a third of it has passed since
// `kept_alive`: a lease must outlive the wait. (In milliseconds: a third of
// 2 s in whole seconds would be 0.)
failure keep_alive_if_due(etcd_client& c, const attempt& a, long long id, long long ttl_s,
                          std::chrono::steady_clock::time_point& kept_alive,
                          std::chrono::steady_clock::time_point now) {
  if (id == 0 || now - kept_alive < milliseconds(std::chrono::seconds(ttl_s)) / 3) return {};
  long long ttl = 0;
  if (failure f = lease_keepalive(c, "acquire", id, ttl)) return f;
  if (ttl <= 0)
    return make_failure(errc::lock_lost, "tokenlock: acquire " + c.server() + " " + a.key +
                                             ": our lease expired while waiting in line; "
                                             "the lease must be longer than a member's stall");
  kept_alive = now;
  return {};
}

failure place_lost(const etcd_client& c, const attempt& a) {
  return make_failure(errc::lock_lost, "tokenlock: acquire " + c.server() + " " + a.key +
                                           ": our place in line ended while we waited (our "
                                           "lease ran out, or another client deleted the "
                                           "key); nothing was granted");
}

// Our key on lease `lease`, its place in line kept; lock_lost when the key
// is gone.
failure move_key(etcd_client& c, const attempt& a, long long lease) {
  bool moved = false;
  if (failure f = move_to_lease(c, a.key, a.revision, a.owner, lease, moved)) return f;
  if (!moved) return place_lost(c, a);
  return {};
}

// Both leases of a waiter, kept alive when due.
failure keep_both_alive(etcd_client& c, attempt& a, std::chrono::steady_clock::time_point now) {
  if (failure f = keep_alive_if_due(c, a, a.lease, a.ttl_s, a.kept_alive, now)) return f;
  return keep_alive_if_due(c, a, a.waiter_lease, a.waiter_ttl_s, a.waiter_kept_alive, now);
}

// How long one watch may last: a third of the shortest lease (they must be
// kept alive), and no later than the deadline.
milliseconds watch_span(const attempt& a, std::chrono::steady_clock::time_point deadline,
                        std::chrono::steady_clock::time_point now) {
  const long long shortest = a.waiter_lease != 0 ? std::min(a.ttl_s, a.waiter_ttl_s) : a.ttl_s;
  const milliseconds third = milliseconds(std::chrono::seconds(shortest)) / 3;
  return std::min(std::chrono::duration_cast<milliseconds>(deadline - now), third);
}

// One watch, counted (etcd_wait_stats.hpp).
failure watch_once(etcd_client& c, const etcd_client::watch_target& t, long long from_rev,
                   milliseconds span) {
  auto& stats = this_thread_etcd_wait_stats();
  bool woken = false;
  ++stats.watches;
  if (failure f = c.wait_change(t, from_rev, span, woken)) return f;
  if (woken) ++stats.wakes;
  return {};
}

// Waits in line until every key before ours is gone (granted), or the
// deadline passes. Each round watches only the key just before ours, so a
// release wakes one waiter: the one behind it.
failure wait_in_line(etcd_client& c, attempt& a, std::chrono::steady_clock::time_point deadline,
                     bool& granted) {
  granted = false;
  for (;;) {
    etcd_kv pred, mine;
    bool found = false, ours = false;
    long long rev = 0;
    const lease_move back{a.owner, a.lease};
    if (failure f = predecessor(c, a.dir, a.revision, a.key, pred, found, mine, ours, rev,
                                a.waiter_lease != 0 ? &back : nullptr))
      return f;
    // Our place counts only while our key is there: one that ended while we
    // waited (our lease ran out in a stall, or another client deleted it)
    // lets the waiter behind us in too.
    if (!ours || mine.create_revision != a.revision) return place_lost(c, a);
    if (!found) {
      granted = true;
      return {};
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return {};
    if (failure f = keep_both_alive(c, a, now)) return f;
    if (failure f = watch_once(c, {pred.key, {}, false}, rev + 1, watch_span(a, deadline, now)))
      return f;
  }
}

// What a shared waiter watches (etcd_line.hpp, judge_shared).
etcd_client::watch_target shared_watch(const attempt& a, const shared_verdict& v) {
  if (v.what == shared_verdict::first_waiter) return {a.dir, prefix_end(a.dir), false};
  return {a.ahead[v.key].key, {}, v.what == shared_verdict::behind_waiter};
}

// A shared holder's wait: each round reads the keys ahead of ours and
// watches the one it waits for (a writer or another limit ahead, the
// slots' holders, or the semaphore's waiter just ahead), so that a
// release wakes only the waiters it may admit. Granted, our key is put
// again on the holder's lease: that put wakes a semaphore's waiter behind.
failure wait_in_line_shared(etcd_client& c, attempt& a,
                            std::chrono::steady_clock::time_point deadline, bool& granted) {
  granted = false;
  for (;;) {
    etcd_kv mine;
    bool ours = false;
    long long rev = 0;
    if (failure f = keys_ahead(c, a.dir, a.revision, a.key, a.ahead, mine, ours, rev)) return f;
    if (!ours || mine.create_revision != a.revision) return place_lost(c, a);
    const shared_verdict v = judge_shared(a.dir, a.ahead, a.limit);
    if (v.what == shared_verdict::admitted) {
      if (failure f = move_key(c, a, a.lease)) return f;
      granted = true;
      return {};
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return {};
    if (failure f = keep_both_alive(c, a, now)) return f;
    if (failure f = watch_once(c, shared_watch(a, v), rev + 1, watch_span(a, deadline, now)))
      return f;
  }
}

// The put found our key there already. A member that timed out may have
// applied our first Txn before the client sent it to the next member: then
// the key holds our owner id and the attempt goes on from it, with the
// whole line. Anything else is someone else's key under our lease's name.
failure put_repeated(etcd_client& c, attempt& a, std::vector<etcd_kv>& line) {
  etcd_kv kv;
  bool found = false;
  if (failure f = get_key(c, "acquire", a.key, kv, found)) return f;
  if (!found || kv.value != a.owner)
    return make_failure(errc::server_error, "tokenlock: acquire " + c.server() + " " + a.key +
                                                ": the key of our new lease exists already, "
                                                "written by another client (a key_prefix shared "
                                                "with another program?): use a key_prefix of "
                                                "the lock's own");
  a.revision = kv.create_revision;
  return line_keys(c, "acquire", a.dir, line);
}

// The client's requests end at once on a stop signal while this lives.
struct wake_on_stop {
  wake_on_stop(etcd_client& c, const posix::stop_signal_watch& w) : client(c) { c.set_wake_fd(w.fd()); }
  ~wake_on_stop() { end(); }
  void end() { client.set_wake_fd(-1); }
  etcd_client& client;
};

// The first try found the lock busy: our key waits in line. It waits on a
// short lease of its own (when the holder's is longer), kept alive while
// it waits, so that a waiter killed without a word (kill -9) holds the
// line up for that lease only; granted, it is back on the holder's lease
// (the Txn that finds it first moves it). A stop signal (SIGTERM, SIGINT,
// SIGHUP) ends the wait: our place is given back before the signal takes
// its course. Gives the leases back itself when nothing is granted.
failure wait_as_waiter(etcd_client& c, attempt& a, std::chrono::steady_clock::time_point deadline,
                       bool& granted) {
  posix::stop_signal_watch watch;
  wake_on_stop wake(c, watch);
  failure f;
  if (a.ttl_s > waiter_lease_s) {
    f = lease_grant(c, waiter_lease_s, a.waiter_lease, a.waiter_ttl_s);
    a.waiter_kept_alive = std::chrono::steady_clock::now();
    if (!f) f = move_key(c, a, a.waiter_lease);
  }
  // Granted, the key is back on the holder's lease (predecessor()).
  if (!f) f = a.shared ? wait_in_line_shared(c, a, deadline, granted)
                       : wait_in_line(c, a, deadline, granted);
  wake.end();  // the revokes below must not be cut short
  const int sig = posix::stop_signal_watch::caught();
  if (f || !granted || sig != 0) {
    give_back(c, a);
    granted = false;
  }
  watch.finish();  // the signal caught, if any, takes its course here
  if (sig != 0)
    return make_failure(std::make_error_code(std::errc::interrupted),
                        "tokenlock: acquire " + c.server() + " " + a.key + ": " +
                            posix::signal_name(sig) +
                            " arrived while waiting in line; our place was given back");
  return f;
}

// The first try: our key put in line, and whether it holds at once. A
// writer reads the first key of the line, a semaphore of N its first N, a
// shared holder without a limit the whole line (nothing after ours exists
// yet); a.ahead keeps the keys before ours.
failure first_try(etcd_client& c, attempt& a, bool& granted) {
  granted = false;
  bool created = false;
  std::vector<etcd_kv> line;
  const std::size_t limit = a.shared ? a.limit : 1;
  if (failure f = put_if_absent(c, a.key, a.owner, a.lease, a.dir, limit, created, a.revision, line))
    return f;
  if (!created)
    if (failure f = put_repeated(c, a, line)) return f;
  a.ahead.clear();
  for (etcd_kv& kv : line)
    if (kv.create_revision < a.revision) a.ahead.push_back(std::move(kv));
  granted = a.shared ? judge_shared(a.dir, a.ahead, a.limit).what == shared_verdict::admitted
                     : !line.empty() && a.ahead.empty();
  return {};
}

failure acquire_impl(const std::string& url, const std::string& name, const etcd_lock_options& o,
                     std::shared_ptr<etcd_client>& client, bool may_wait, etcd_handle& out,
                     bool& busy) {
  busy = false;
  if (failure f = validate(o, name)) return f;
  if (failure f = connect(url, o, client)) return f;
  etcd_client& c = *client;
  attempt a;
  a.dir = lock_dir(o, name);
  a.owner = new_owner_id();
  a.shared = is_shared(o);
  a.limit = o.slots;
  const long long ask_s = (o.lease.count() + 999) / 1000;
  if (failure f = lease_grant(c, ask_s, a.lease, a.ttl_s)) return f;
  a.kept_alive = std::chrono::steady_clock::now();
  const auto deadline = a.kept_alive + (may_wait ? o.wait : milliseconds(0));
  a.key = a.dir + lease_hex(a.lease) + (a.shared ? shared_suffix(a.limit) : std::string());
  bool granted = false;
  failure f = first_try(c, a, granted);
  if (!f && !granted && may_wait && o.wait.count() > 0) f = wait_as_waiter(c, a, deadline, granted);
  else if (f || !granted) give_back(c, a);
  if (f) return f;
  if (!granted) {
    busy = true;
    return refused(c, name, a, may_wait && o.wait.count() > 0, o.wait);
  }
  etcd_kv mine;
  mine.key = a.key;
  mine.create_revision = a.revision;
  mine.lease = a.lease;
  etcd_handle_access::fill(out, client, mine, a.owner, a.ttl_s, o.lease,
                           a.shared ? lock_mode::shared : lock_mode::exclusive);
  // The lease runs from its last keep-alive, which a wait may have sent a
  // while ago.
  etcd_handle_access::expires_in(out, std::chrono::duration_cast<milliseconds>(
                                          std::chrono::seconds(a.ttl_s) -
                                          (std::chrono::steady_clock::now() - a.kept_alive)));
  return {};
}

}  // namespace

// ---- etcd_lock --------------------------------------------------------------

etcd_lock::etcd_lock(std::string url, std::string name, etcd_lock_options options)
    : url_(std::move(url)), name_(std::move(name)), options_(std::move(options)) {}
etcd_lock::~etcd_lock() = default;
etcd_lock::etcd_lock(etcd_lock&&) noexcept = default;
etcd_lock& etcd_lock::operator=(etcd_lock&&) noexcept = default;

namespace {

// The lock's acquire and try_acquire (grant_handle.hpp) around acquire_impl.
auto acquisitions_of(const std::string& url, const std::string& name, const etcd_lock_options& o,
                     std::shared_ptr<etcd_client>& conn) {
  return make_acquisitions<etcd_handle>([&](bool may_wait, etcd_handle& h, bool& busy) {
    return acquire_impl(url, name, o, conn, may_wait, h, busy);
  });
}

}  // namespace

etcd_handle etcd_lock::acquire() {
  return acquisitions_of(url_, name_, options_, client_).acquire();
}

etcd_handle etcd_lock::acquire(std::error_code& ec) noexcept {
  return acquisitions_of(url_, name_, options_, client_).acquire(ec);
}

std::optional<etcd_handle> etcd_lock::try_acquire() {
  return acquisitions_of(url_, name_, options_, client_).try_acquire();
}

std::optional<etcd_handle> etcd_lock::try_acquire(std::error_code& ec) noexcept {
  return acquisitions_of(url_, name_, options_, client_).try_acquire(ec);
}

namespace {

// A key of the line as holder() reports it, with its lease's TTL.
failure info_of(etcd_client& c, const char* step, const std::string& dir, const etcd_kv& kv,
                etcd_holder_info& info) {
  long long ttl = 0, granted = 0;
  if (failure f = lease_ttl(c, step, kv.lease, ttl, granted)) return f;
  const line_kind k = kind_of(dir, kv.key);
  info.owner = kv.value;
  info.revision = static_cast<std::uint64_t>(kv.create_revision);
  info.mode = k.kind == line_kind::shared ? lock_mode::shared : lock_mode::exclusive;
  info.slots = k.limit;
  info.fence = info.mode == lock_mode::shared ? 0 : info.revision;
  info.lease_id = kv.lease;
  info.remaining = std::chrono::seconds(std::max<long long>(ttl, 0));
  info.lease = std::chrono::seconds(std::max<long long>(granted, 0));
  info.key = kv.key;
  return {};
}

failure holder_impl(const std::string& url, const std::string& name, const etcd_lock_options& o,
                    std::shared_ptr<etcd_client>& client, std::optional<etcd_holder_info>& out) {
  out.reset();
  if (failure f = validate(o, name)) return f;
  if (failure f = connect(url, o, client)) return f;
  etcd_kv first;
  bool found = false;
  const std::string dir = lock_dir(o, name);
  if (failure f = first_key(*client, "status", dir, first, found)) return f;
  if (!found) return {};
  etcd_holder_info info;
  if (failure f = info_of(*client, "status", dir, first, info)) return f;
  out = std::move(info);
  return {};
}

// The whole line, and how many keys at its head hold the lock.
failure read_line(const std::string& url, const std::string& name, const etcd_lock_options& o,
                  std::shared_ptr<etcd_client>& client, const char* step,
                  std::vector<etcd_kv>& line, std::size_t& held) {
  if (failure f = validate(o, name)) return f;
  if (failure f = connect(url, o, client)) return f;
  if (failure f = line_keys(*client, step, lock_dir(o, name), line)) return f;
  held = holder_count(lock_dir(o, name), line);
  return {};
}

failure holders_impl(const std::string& url, const std::string& name, const etcd_lock_options& o,
                     std::shared_ptr<etcd_client>& client, std::vector<etcd_holder_info>& out) {
  out.clear();
  std::vector<etcd_kv> line;
  std::size_t held = 0;
  if (failure f = read_line(url, name, o, client, "status", line, held)) return f;
  const std::string dir = lock_dir(o, name);
  const std::size_t writer = waiting_writer(dir, line);
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (i >= held && i != writer) continue;
    etcd_holder_info info;
    // A key whose lease ended between the range and this look: it holds
    // no more, and the lease says so (0 left).
    if (failure f = info_of(*client, "status", dir, line[i], info)) return f;
    info.waiting_writer = i == writer;
    out.push_back(std::move(info));
  }
  return {};
}

// Who holds the lock, in a message that names another owner: "it is
// free", "OWNER holds it" (`verb` "holds it", or "does"), or "OWNER and 2
// more hold it".
std::string held_by(const std::vector<etcd_kv>& line, std::size_t held, const char* verb) {
  if (held == 0) return "it is free";
  if (held == 1) return shown(line[0].value) + " " + verb;
  return shown(line[0].value) + " and " + std::to_string(held - 1) + " more hold it";
}

// The grant of `owner` among the holders. Not found: `who` says who holds
// the lock instead, for the message.
failure find_holder(const std::string& url, const std::string& name, const etcd_lock_options& o,
                    std::shared_ptr<etcd_client>& client, const char* step,
                    const std::string& owner, std::optional<etcd_holder_info>& found,
                    std::string& who) {
  found.reset();
  std::vector<etcd_kv> line;
  std::size_t held = 0;
  if (failure f = read_line(url, name, o, client, step, line, held)) return f;
  for (std::size_t i = 0; i < held; ++i) {
    if (line[i].value != owner) continue;
    etcd_holder_info info;
    if (failure f = info_of(*client, step, lock_dir(o, name), line[i], info)) return f;
    found = std::move(info);
    return {};
  }
  who = held_by(line, held, std::strcmp(step, "break") == 0 ? "does" : "holds it");
  return {};
}

// A call that reads `Out`, in its throwing form, and in its noexcept form,
// which gives an empty Out on an error.
template <class Out, class Read>
Out read_throwing(const Read& read) {
  Out out;
  run_throwing([&] { return read(out); });
  return out;
}

template <class Out, class Read>
Out read_noexcept(std::error_code& ec, const Read& read) noexcept {
  Out out;
  run_noexcept(ec, [&] { return read(out); });
  if (ec) out = Out();
  return out;
}

}  // namespace

std::optional<etcd_holder_info> etcd_lock::holder() {
  return read_throwing<std::optional<etcd_holder_info>>(
      [&](auto& out) { return holder_impl(url_, name_, options_, client_, out); });
}

std::optional<etcd_holder_info> etcd_lock::holder(std::error_code& ec) noexcept {
  return read_noexcept<std::optional<etcd_holder_info>>(
      ec, [&](auto& out) { return holder_impl(url_, name_, options_, client_, out); });
}

std::vector<etcd_holder_info> etcd_lock::holders() {
  return read_throwing<std::vector<etcd_holder_info>>(
      [&](auto& out) { return holders_impl(url_, name_, options_, client_, out); });
}

std::vector<etcd_holder_info> etcd_lock::holders(std::error_code& ec) noexcept {
  return read_noexcept<std::vector<etcd_holder_info>>(
      ec, [&](auto& out) { return holders_impl(url_, name_, options_, client_, out); });
}

etcd_handle etcd_lock::adopt(const std::string& owner) {
  etcd_handle h;
  throw_on_error([&](std::error_code& ec) { h = adopt(owner, ec); });
  return h;
}

etcd_handle etcd_lock::adopt(const std::string& owner, std::error_code& ec) noexcept {
  etcd_handle h;
  run_noexcept(ec, [&]() -> failure {
    if (owner.empty())
      return make_failure(errc::bad_argument, "tokenlock: adopt " + name_ +
                                                  ": the owner id is empty; give the holder's "
                                                  "etcd_handle::owner()");
    std::optional<etcd_holder_info> info;
    std::string who;
    if (failure f = find_holder(url_, name_, options_, client_, "adopt", owner, info, who)) return f;
    if (!info)
      return make_failure(errc::lock_lost, "tokenlock: adopt " + client_->server() + " " + name_ +
                                               ": the lock is not held by " + shown(owner) + " (" +
                                               who + ")");
    etcd_kv kv;
    kv.key = info->key;
    kv.create_revision = static_cast<long long>(info->revision);
    kv.lease = info->lease_id;
    etcd_handle_access::fill(h, client_, kv, owner, info->lease.count() / 1000, options_.lease,
                             info->mode);
    etcd_handle_access::expires_in(h, info->remaining);
    return {};
  });
  return h;
}

namespace {

// Compare and delete: the holder's key, only while it is `owner`'s and has
// the create revision we read; then its lease, so that nothing of the
// broken grant stays (a waiter of the same owner id cannot exist: ids are
// unique per acquisition).
failure break_impl(const std::string& url, const std::string& name, const etcd_lock_options& o,
                   std::shared_ptr<etcd_client>& client, const std::string& owner) {
  if (owner.empty())
    return make_failure(errc::bad_argument, "tokenlock: break " + name +
                                                ": the owner id is empty; give the holder's "
                                                "etcd_handle::owner()");
  std::optional<etcd_holder_info> info;
  std::string who;
  if (failure f = find_holder(url, name, o, client, "break", owner, info, who)) return f;
  bool deleted = false, gone = false;
  if (info)
    if (failure f = delete_if_revision(*client, "break", info->key,
                                       static_cast<long long>(info->revision), deleted))
      return f;
  if (!deleted)
    return make_failure(errc::lock_lost, "tokenlock: break " + client->server() + " " + name +
                                             ": " + shown(owner) + " does not hold the lock (" +
                                             (info ? std::string("its grant ended meanwhile") : who) +
                                             "); nothing was deleted");
  // The key is gone already: a revoke that fails leaves only a lease
  // without keys, which ends with its TTL.
  (void)lease_revoke(*client, "break", info->lease_id, gone);
  return {};
}

}  // namespace

void etcd_lock::break_owner(const std::string& owner) {
  run_throwing([&] { return break_impl(url_, name_, options_, client_, owner); });
}

void etcd_lock::break_owner(const std::string& owner, std::error_code& ec) noexcept {
  run_noexcept(ec, [&] { return break_impl(url_, name_, options_, client_, owner); });
}

owner_liveness etcd_holder_liveness(const etcd_holder_info& holder) noexcept {
  return owner_id_liveness(holder.owner);
}

// ---- etcd_handle ------------------------------------------------------------

etcd_handle::etcd_handle(etcd_handle&& o) noexcept
    : client_(std::move(o.client_)),
      key_(std::move(o.key_)),
      owner_(std::move(o.owner_)),
      fence_(o.fence_),
      lease_id_(o.lease_id_),
      expires_(o.expires_),
      lease_(o.lease_),
      lease_raised_(o.lease_raised_),
      fork_generation_(o.fork_generation_),
      mode_(o.mode_) {
  o.forget();
}

etcd_handle& etcd_handle::operator=(etcd_handle&& o) noexcept {
  return move_assign(*this, std::move(o));
}

etcd_handle::~etcd_handle() { release_quietly(*this); }

void etcd_handle::forget() noexcept {
  owner_.clear();
  fence_ = 0;
}

std::string etcd_handle::detach() noexcept {
  std::string o;
  o.swap(owner_);
  forget();
  return o;
}

bool etcd_handle::owns() const noexcept {
  return !owner_.empty() && client_ && system_os()->fork_generation() == fork_generation_;
}

namespace {

std::string lost_message(const etcd_client& c, const char* step, const std::string& key,
                         std::uint64_t revision, lock_mode mode, bool lease_gone) {
  return "tokenlock: " + std::string(step) + " " + c.server() + " " + key + ": the " +
         (mode == lock_mode::shared ? "shared grant (revision " : "grant (fence ") +
         std::to_string(revision) + ") is no longer ours: " +
         (lease_gone ? "our lease ended (it expired, no keep-alive having reached etcd within its "
                       "TTL, or another process revoked it), and etcd deleted our key"
                     : "our key was deleted by someone else (an operator's etcdctl del, or a "
                       "break)");
}

}  // namespace

void etcd_handle::release() {
  throw_on_error([&](std::error_code& ec) { release(ec); });
}

void etcd_handle::release(std::error_code& ec) noexcept {
  run_noexcept(ec, [&]() -> failure {
    if (owner_.empty()) return {};
    if (!owns()) {
      forget();
      return not_owner_failure("release");
    }
    bool deleted = false, gone = false;
    // Not retried past the client's fail-over. On an error the handle
    // keeps the grant: a later release (or the destructor) may still
    // remove it; otherwise it ends with its lease.
    if (failure f = delete_if_revision(*client_, "release", key_, static_cast<long long>(fence_),
                                       deleted))
      return f;
    failure revoked = lease_revoke(*client_, "release", lease_id_, gone);
    const std::uint64_t fence = fence_;
    forget();
    if (deleted) return {};
    if (revoked) return revoked;
    return make_failure(errc::lock_lost,
                        lost_message(*client_, "release", key_, fence, mode_, gone));
  });
}

void etcd_handle::refresh() {
  throw_on_error([&](std::error_code& ec) { refresh(ec); });
}

void etcd_handle::refresh(std::error_code& ec) noexcept {
  run_noexcept(ec, [&]() -> failure {
    if (owner_.empty() || !owns()) return not_owner_failure("refresh");
    const auto sent = std::chrono::system_clock::now();
    long long ttl = 0;
    if (failure f = lease_keepalive(*client_, "refresh", lease_id_, ttl)) return f;
    etcd_kv kv;
    bool found = false;
    if (ttl > 0)
      if (failure f = get_key(*client_, "refresh", key_, kv, found)) return f;
    if (ttl <= 0 || !found || kv.create_revision != static_cast<long long>(fence_)) {
      bool gone = ttl <= 0;
      if (!gone) (void)lease_revoke(*client_, "refresh", lease_id_, gone);
      const std::uint64_t fence = fence_;
      forget();
      return make_failure(errc::lock_lost,
                          lost_message(*client_, "refresh", key_, fence, mode_, ttl <= 0));
    }
    expires_ = sent + std::chrono::seconds(ttl);
    return {};
  });
}

}  // namespace tokenlock
