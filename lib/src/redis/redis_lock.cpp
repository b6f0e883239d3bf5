#include "tokenlock/redis_lock.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <string_view>

#include <hiredis/hiredis.h>

#include "core/escaped.hpp"
#include "core/failure.hpp"
#include "grant_handle.hpp"
#include "lockdir/owner_id.hpp"
#include "tokenlock/keep_alive.hpp"
#include "posix/os.hpp"
#include "redis/redis_connection.hpp"
#include "redis/redis_scripts.hpp"
#include "redis/redis_wait_stats.hpp"
#include "lockdir/token_name.hpp"

namespace tokenlock {

namespace detail {

// The keys of one lock (docs/redis.md):
//   <prefix><name>        string "<fence> <owner>": the grant; expires with
//                         the lease
//   <prefix><name>:fence  the last fence granted; expires a day after it
//   <prefix><name>:waiters  how many are waiting (a count each refused
//                         attempt of a caller that will wait increments and
//                         its next attempt decrements); expires when the
//                         last of them would have tried again
//   <prefix><name>:wake   a list each release pushes one element to and one
//                         waiter pops (BLPOP); at most 64 long (a wake-up
//                         nobody waited for costs the next waiter one more
//                         attempt); expires with a lease
//   <prefix><name>:handoff  set by a release that woke a waiter: until the
//                         woken waiter's attempt deletes it, or it expires
//                         (500 ms: lib/src/redis/scripts/wake.lua), only a
//                         woken waiter may take the free lock ('1'), or
//                         the writer it names (the last shared holder's)
//   <prefix><name>:shared  hash: shared holders (owner -> the end of its
//                         lease, ms) and 'limit'; expires with the grant
//   <prefix><name>:writer  the owner id of a writer waiting for shared
//                         holders, which bars new ones; expires with its
//                         lease
// While shared holders hold, the grant is "<fence> <shared owner>"
// (lib/src/redis/scripts/shared.lua), so that clients that know only
// exclusive grants see the lock held.
// The grant is one string, not a hash of owner and fence: one SET with PX
// writes it where a hash took HSET and PEXPIRE, and an uncontended cycle
// costs the server about a third less (docs/redis.md, Figures).

// The seven names in one buffer (one allocation per call, not seven);
// views into it, so neither copied nor moved.
constexpr std::string_view key_suffixes[] = {"", ":fence", ":wake", ":waiters", ":handoff",
                                             ":shared", ":writer"};
constexpr std::size_t key_count = sizeof key_suffixes / sizeof key_suffixes[0];

class redis_keys {
 public:
  explicit redis_keys(std::string_view base) {
    const auto& suffixes = key_suffixes;
    std::size_t size = 0;
    for (std::string_view x : suffixes) size += base.size() + x.size();
    buf_.reserve(size);
    std::size_t at[key_count];
    for (std::size_t i = 0; i < key_count; ++i) {
      at[i] = buf_.size();
      buf_.append(base).append(suffixes[i]);
    }
    const std::string_view all(buf_);
    std::string_view* views[] = {&lock, &fence, &wake, &waiters, &handoff, &shared, &writer};
    for (std::size_t i = 0; i < key_count; ++i)
      *views[i] = all.substr(at[i], base.size() + suffixes[i].size());
  }
  redis_keys(const redis_keys&) = delete;
  redis_keys& operator=(const redis_keys&) = delete;

  std::string_view lock, fence, wake, waiters, handoff, shared, writer;

 private:
  std::string buf_;
};

// The scripts (acquire_script, acquire_shared_script, settle_script,
// settle_shared_script, holder_script, holders_script, break_script) are
// lib/src/redis/scripts/*.lua, embedded with their SHA-1 at build time
// (cmake/tokenlock_redis_scripts.cmake); each file says what it does and
// its KEYS and ARGV. bindings/php/src/Redis/Scripts.php holds every one
// but break byte for byte (PHP and C++ processes share one lock), written
// from the same files by scripts/php-redis-scripts.

constexpr std::int64_t fence_ttl_ms = 24LL * 3600 * 1000;
// The protocol's maximum lease (lock_options::max_lease's default), the
// same for every process: a longer one would be judged implausible by the
// file lock's holders and is a bad argument here too.
constexpr std::chrono::milliseconds max_lease = std::chrono::hours(24);

std::string lock_key(const redis_lock_options& o, const std::string& name) {
  return o.key_prefix + name;
}

// Element i of an array reply, as an integer (integer or numeric string).
bool int_at(const redisReply* r, std::size_t i, long long& out) {
  if (!r || r->type != REDIS_REPLY_ARRAY || i >= r->elements) return false;
  const redisReply* e = r->element[i];
  if (e->type == REDIS_REPLY_INTEGER) {
    out = e->integer;
    return true;
  }
  if (e->type == REDIS_REPLY_STRING) {
    char* end = nullptr;
    out = std::strtoll(e->str, &end, 10);
    return end && *end == '\0' && e->len > 0;
  }
  return false;
}

std::string str_at(const redisReply* r, std::size_t i) {
  if (!r || r->type != REDIS_REPLY_ARRAY || i >= r->elements) return {};
  const redisReply* e = r->element[i];
  if (e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS) return std::string(e->str, e->len);
  return {};
}

failure unexpected_reply(const char* step, const std::string& server) {
  return make_failure(std::make_error_code(std::errc::protocol_error),
                      "tokenlock: " + std::string(step) + " " + server +
                          ": the server's reply has an unexpected shape (is it Redis 5 or newer?)");
}

// Which of a lock's keys a script named: the fix differs.
enum class key_role { grant, fence, other };

// A key the lock cannot use, as lock_corrupt: the key, what it holds (the
// first 64 bytes, escaped, and the length when it is longer) and how to
// repair it. `why` is the scripts' word: "type <t>", "fence", "largest",
// "grant", "persistent" or "holders" (a field of the shared holders' hash,
// "<owner> <value>"). tokenlock break --redis cannot repair either
// key (it removes only a grant whose owner it can read, and never touches
// the fence), so the fix is a redis-cli command.
failure corrupt_key(const redis_connection& conn, const char* step, const std::string& name,
                    const std::string& key, key_role role, const std::string& value,
                    long long length, const std::string& why) {
  std::string holds;
  if (why.rfind("type ", 0) == 0) {
    const bool hash = key.size() > 7 && key.compare(key.size() - 7, 7, ":shared") == 0;
    holds = "a " + escaped(why.substr(5)) + (hash ? ", not a hash" : ", not a string");
  } else {
    holds = "\"" + escaped(value) + "\"";
    if (length > 64) holds += "... (" + std::to_string(length) + " bytes)";
  }
  if (why == "fence")
    holds += ", which is not a fence (1 to 19 decimal digits, below 2^63): fences would stop "
             "increasing or wrap";
  else if (why == "largest")
    holds += ": no fence below 2^63 can follow it";
  else if (why == "grant")
    holds += ", which is not a grant as the lock writes it (\"<fence> <owner>\")";
  else if (why == "persistent")
    holds += ", a grant without an expiry (PTTL -1): it would hold the lock forever";
  else if (why == "holders")
    holds += " (a field and its value), which is not a shared holder's lease end in ms nor the "
             "slot limit";
  const std::string cli = conn.cli_command() + " ";
  const std::string k = shell_word(escaped(key, 1024));
  std::string fix;
  if (role == key_role::other)
    fix = "once no process uses the lock, delete it: " + cli + "DEL " + k +
          " (a shared holder or a waiter that needs it loses its place)";
  else if (role == key_role::fence)
    fix = "set it to a fence above every fence already handed out for this lock (above the "
          "largest any resource it guards has seen; the server's TIME in microseconds is, "
          "unless its clock went back): " + cli + "SET " + k +
          " FENCE (tokenlock break --redis does not touch the fence key)";
  else if (why == "persistent")
    fix = "once its holder is gone, delete it: " + cli + "DEL " + k + "; or give it a lease: " +
          cli + "PEXPIRE " + k + " MILLISECONDS";
  else
    fix = "once no process uses the lock, delete it: " + cli + "DEL " + k +
          " (tokenlock break --redis removes only a grant whose owner it can read)";
  return make_failure(errc::lock_corrupt,
                      "tokenlock: " + std::string(step) + " " + conn.server() +
                          (name.empty() ? std::string() : " " + escaped(name, 1024)) +
                          ": the key " + escaped(key, 1024) + " holds " + holds + "; fix: " + fix);
}

// A script's answer about a key it cannot use (common.lua's
// corrupt()) as lock_corrupt; no failure for any other answer.
failure corrupt_answer(const redisReply* r, const redis_connection& conn, const char* step,
                       const std::string& name, std::string_view grant_key) {
  long long tag = 0, length = 0;
  if (!int_at(r, 0, tag) || tag != -1) return {};
  if (!int_at(r, 3, length)) return unexpected_reply(step, conn.server());
  const std::string key = str_at(r, 1);
  const key_role role = key == grant_key                          ? key_role::grant
                        : key == std::string(grant_key) + ":fence" ? key_role::fence
                                                                 : key_role::other;
  return corrupt_key(conn, step, name, key, role, str_at(r, 2), length, str_at(r, 4));
}

// The owner id of the grant while shared holders hold (shared.lua): of
// the form every version parses, with pid 0, which no holder has.
constexpr std::string_view shared_owner_id = "shared-00000000.0.0.0000000000000000";

// "pid 123 on host web-1a2b3c4d", or the owner id as it is.
std::string describe_owner(const std::string& owner) {
  std::string host_tag;
  int pid = 0;
  if (parse_owner_id(owner, host_tag, pid))
    return "pid " + std::to_string(pid) + " on host " + host_tag;
  return shown_bytes(owner);
}

// "held by pid 123 on host web-1a2b3c4d (fence 17...), 2.5 s of its lease left".
std::string describe_holder(const std::string& owner, long long fence, long long pttl_ms) {
  std::string s = "held by " + describe_owner(owner) + " (fence " + std::to_string(fence) + ")";
  if (pttl_ms >= 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, ", %.3f s of its lease left", static_cast<double>(pttl_ms) / 1000.0);
    s += buf;
  }
  return s;
}

std::string lost_reason(const std::string& kind, long long fence, long long mine) {
  if (kind == "taken" || kind == "newer")
    return "our lease ended and a newer grant (fence " + std::to_string(fence) +
           ") took the lock after ours (" + std::to_string(mine) + ")";
  if (kind == "expired") return "our lease ended (nobody has taken the lock since)";
  return "the server lost the lock's state (a restart without persistence, FLUSHALL, or a "
         "failover to a replica that missed our grant)";
}

std::string new_owner_id() {
  auto sys = system_os();
  const process_identity& me = sys->self();
  return std::string(owner_part(make_token(1, me.host_tag, me.pid, me.start_time, sys->random_u64())));
}

struct redis_handle_access {
  static void fill(redis_handle& h, std::shared_ptr<redis_connection> conn, std::string key,
                   std::string owner, std::uint64_t fence, std::chrono::milliseconds lease,
                   long long pttl_ms, lock_mode mode = lock_mode::exclusive) {
    h.conn_ = std::move(conn);
    h.mode_ = mode;
    h.key_ = std::move(key);
    h.owner_ = std::move(owner);
    h.fence_ = fence;
    h.lease_ = lease;
    h.expires_ = std::chrono::system_clock::now() + std::chrono::milliseconds(pttl_ms);
    h.fork_generation_ = system_os()->fork_generation();
  }
  static void set_clock_behind(redis_handle& h, long long us) {
    h.clock_behind_ = std::chrono::microseconds(us > 0 ? us : 0);
  }
};

redis_wait_stats& this_thread_redis_wait_stats() noexcept {
  thread_local redis_wait_stats stats;
  return stats;
}

}  // namespace detail

using namespace detail;

namespace {

failure validate(const redis_lock_options& o, const std::string& name) {
  auto bad = [](const std::string& what) {
    return make_failure(errc::bad_argument, "tokenlock: bad redis_lock arguments: " + what);
  };
  if (name.empty()) return bad("the lock name is empty");
  // Lock X's other keys are X:fence, X:wake, ...: a lock named so would
  // share them with X, and each would stall the other.
  for (std::string_view suffix : key_suffixes)
    if (!suffix.empty() && name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return bad("a lock name must not end in :fence, :wake, :waiters, :handoff, :shared or "
                 ":writer: those are the keys of the lock named without that suffix (\"" +
                 escaped(name) + "\")");
  if (o.slots > max_slots)
    return bad("slots must be at most " + std::to_string(max_slots) + "; it is " +
               std::to_string(o.slots));
  if (o.lease.count() <= 0 || o.lease > max_lease)
    return bad("the lease must be more than 0 and at most 24 hours (the protocol's maximum "
               "lease, the same for every process); it is " + std::to_string(o.lease.count()) +
               " ms");
  if (o.wait.count() < 0) return bad("wait must not be negative");
  if (o.connect_timeout.count() <= 0 || o.command_timeout.count() <= 0)
    return bad("connect_timeout and command_timeout must be positive");
  if (o.replicas < 0) return bad("replicas must not be negative");
  return {};
}

bool is_shared(const redis_lock_options& o) { return o.mode == lock_mode::shared || o.slots > 0; }

// Ends our grant or share: a release, a refresh (`what_arg`: the wake
// list's expiry or the new lease, ms). The answer is the script's.
failure settle_script_run(redis_connection& conn, const redis_keys& k, const std::string& owner,
                          std::uint64_t fence, bool shared, const char* step,
                          const std::string& what_arg, reply_ptr& r) {
  if (shared)
    return conn.eval(step, settle_shared_script,
                     {k.lock, k.fence, k.wake, k.waiters, k.handoff, k.shared, k.writer},
                     {owner, step, what_arg}, r);
  char mine[24];
  const auto n = std::to_chars(mine, mine + sizeof mine, fence);
  return conn.eval(step, settle_script, {k.lock, k.fence, k.wake, k.waiters, k.handoff},
                   {owner, std::string_view(mine, static_cast<std::size_t>(n.ptr - mine)), what_arg,
                    step},
                   r);
}

// With options.replicas: waits for them to acknowledge the grant just
// made; when they do not, releases it (a failover now could lose it).
failure keep_on_replicas(redis_connection& conn, const redis_keys& k, const std::string& owner,
                         long long fence, const redis_lock_options& o, const std::string& name) {
  if (o.replicas <= 0) return {};
  reply_ptr w;
  failure f = conn.command("wait for replicas",
                           {"WAIT", std::to_string(o.replicas), std::to_string(o.replica_timeout.count())},
                           w, o.replica_timeout + o.command_timeout);
  long long acked = -1;
  if (!f && w && w->type == REDIS_REPLY_INTEGER) acked = w->integer;
  if (!f && acked >= o.replicas) return {};
  reply_ptr ignored;
  settle_script_run(conn, k, owner, static_cast<std::uint64_t>(fence), is_shared(o), "release",
                    std::to_string(o.lease.count()), ignored);
  if (f) return f;
  return make_failure(errc::not_replicated,
                      "tokenlock: acquire " + conn.server() + " " + name + ": " +
                          std::to_string(acked) + " of " + std::to_string(o.replicas) +
                          " replicas acknowledged the grant within " +
                          std::to_string(o.replica_timeout.count()) +
                          " ms; the grant was released again");
}

// Blocks on the lock's wake list until a release's wake-up, or the
// holder's lease ends (a crashed holder never releases: `pttl` ms left),
// whichever comes first, and never past the budget (`left`). `woken`:
// a release's wake-up ended the block (not its time).
failure block_for_release(redis_connection& blocking, const redis_keys& k,
                          std::chrono::steady_clock::duration left, long long pttl,
                          const redis_lock_options& o, bool& woken) {
  auto block = std::chrono::duration_cast<std::chrono::milliseconds>(left);
  if (pttl >= 0 && std::chrono::milliseconds(pttl + 1) < block) block = std::chrono::milliseconds(pttl + 1);
  if (block.count() < 1) block = std::chrono::milliseconds(1);
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.3f", static_cast<double>(block.count()) / 1000.0);
  reply_ptr popped;
  failure f = blocking.command("wait", {"BLPOP", k.wake, secs}, popped, block + o.command_timeout);
  woken = !f && popped && popped->type == REDIS_REPLY_ARRAY;
  if (woken) ++this_thread_redis_wait_stats().wakes;
  return f;
}

void joined_line() {
  const auto& hook = this_thread_redis_wait_stats().joined_line;
  if (hook) hook();
}

// A release's wake-up whose attempt found the lock taken all the same;
// `blocked_at`: when the BLPOP that returned it was about to be sent.
void count_lost_wake(std::chrono::steady_clock::time_point blocked_at) {
  redis_wait_stats& stats = this_thread_redis_wait_stats();
  ++stats.wakes_lost;
  if (std::chrono::steady_clock::now() - blocked_at < redis_handoff_grace) ++stats.wakes_lost_within_grace;
}

// One attempt's answer.
struct attempt_answer {
  bool granted = false;
  long long fence = 0, pttl = 0, behind = 0;
  std::string holder;  // refused with none: the lock is free, handed to a woken waiter
  // Why refused, where the script says more (acquire.lua, acquire_shared.lua):
  // "marked" (our mark bars shared holders), "mark" (another writer's does),
  // "writer", "limit" (shared holders of another slot count: `limit`),
  // "full" (all `limit` slots held).
  std::string why;
  long long limit = 0;
};

// One run of the acquire script (acquire_shared for a shared lock).
// `before`: what came before the attempt ('0' nothing, '1' a block that ran
// out, '2' a release's wake-up); `count_ms`: how long the count of waiters
// must keep us when we are refused, 0 when we will not wait; `marked`: an
// earlier attempt marked the lock for us (a grant removes the mark).
failure attempt(redis_connection& conn, const redis_keys& k, const std::string& owner,
                const redis_lock_options& o, const std::string& name, char before,
                long long count_ms, bool marked, attempt_answer& a) {
  const bool shared = is_shared(o);
  reply_ptr r;
  if (failure f = conn.eval("acquire", shared ? acquire_shared_script : acquire_script,
                            {k.lock, k.fence, k.wake, k.waiters, k.handoff, k.shared, k.writer},
                            {owner, std::to_string(o.lease.count()), std::to_string(fence_ttl_ms),
                             std::string_view(&before, 1), std::to_string(count_ms),
                             shared ? std::to_string(o.slots) : std::string(marked ? "1" : "0")},
                            r))
    return f;
  if (failure f = corrupt_answer(r.get(), conn, "acquire", name, k.lock)) return f;
  if (r && r->type == REDIS_REPLY_INTEGER) {
    // A fresh grant, the server's clock ahead of the last fence.
    a = attempt_answer{};
    a.granted = true;
    a.fence = r->integer;
    a.pttl = o.lease.count();
    return {};
  }
  long long granted = 0;
  if (!int_at(r.get(), 0, granted) || !int_at(r.get(), 2, a.fence) || !int_at(r.get(), 3, a.pttl) ||
      !int_at(r.get(), 4, a.behind))
    return unexpected_reply("acquire", conn.server());
  a.granted = granted == 1;
  a.holder = str_at(r.get(), 1);
  a.why = str_at(r.get(), 5);
  if (!int_at(r.get(), 6, a.limit)) a.limit = 0;
  return {};
}

std::string slots_text(long long n) {
  return n == 0 ? std::string("shared holders without a limit")
                : "a semaphore of " + std::to_string(n) + (n == 1 ? " slot" : " slots");
}

// Why the lock was refused, in words: "held by ...".
std::string refusal_reason(const attempt_answer& a, const redis_lock_options& o) {
  char buf[160];
  if (a.holder.empty()) {
    std::snprintf(buf, sizeof buf, "free, and kept %.3f s more for the waiter the last release woke",
                  static_cast<double>(a.pttl) / 1000.0);
    return buf;
  }
  std::snprintf(buf, sizeof buf, ", %.3f s of the shared holders' leases left",
                static_cast<double>(a.pttl) / 1000.0);
  const std::string left = buf;
  if (a.why == "marked" || (a.why.empty() && a.holder == shared_owner_id))
    return "held by shared holders" + left;
  if (a.why == "mark")
    return "held or kept by shared holders, and a writer (" + describe_owner(a.holder) +
           ") waits for them, which bars new shared holders" + left;
  if (a.why == "limit")
    return "held by " + slots_text(a.limit) + ", and this lock asks for " + slots_text(o.slots) +
           " (every process of a lock gives the same count; this one waits until those holders "
           "are gone)" + left;
  if (a.why == "full")
    return "full: all " + std::to_string(a.limit) + " slots of the semaphore are held" + left;
  return describe_holder(a.holder, a.fence, a.pttl);
}

failure refused(const redis_connection& conn, const std::string& name, const attempt_answer& a,
                bool waited, const redis_lock_options& o) {
  const std::string reason = refusal_reason(a, o);
  if (!waited)
    return make_failure(errc::busy,
                        "tokenlock: acquire " + conn.server() + " " + name + ": the lock is " + reason);
  return make_failure(errc::timed_out, "tokenlock: acquire " + conn.server() + " " + name +
                                           ": waited " + std::to_string(o.wait.count()) +
                                           " ms; the lock is " + reason);
}

// A grant: with options.replicas, kept only once they have it.
failure granted(redis_connection& conn, const std::shared_ptr<redis_connection>& shared_conn,
                const redis_keys& k, const std::string& owner, const attempt_answer& a,
                const redis_lock_options& o, const std::string& name, redis_handle& out) {
  if (failure f = keep_on_replicas(conn, k, owner, a.fence, o, name)) return f;
  if (is_shared(o)) {
    // A shared grant fences nothing: its handle has no fence.
    redis_handle_access::fill(out, shared_conn, std::string(k.lock), owner, 0, o.lease, a.pttl,
                              lock_mode::shared);
  } else {
    redis_handle_access::fill(out, shared_conn, std::string(k.lock), owner,
                              static_cast<std::uint64_t>(a.fence), o.lease, a.pttl);
  }
  redis_handle_access::set_clock_behind(out, a.behind);
  return {};
}

// How long a refused caller blocks at most for this answer: the holder's
// lease, and a third of ours while our mark waits (each attempt renews the
// mark, which expires with our lease).
long long block_bound(const attempt_answer& a, const redis_lock_options& o) {
  if (a.why == "marked") return std::min(a.pttl, static_cast<long long>(o.lease.count() / 3));
  return a.pttl;
}

// Attempts until granted or the budget is spent. A refused caller that
// will wait is counted as a waiter and blocks until a release wakes it;
// its next attempt says so, and takes the lock the release kept for it.
failure acquire_impl(const std::string& url, const std::string& name,
                     const redis_lock_options& o, std::shared_ptr<redis_connection>& conn,
                     bool may_wait, redis_handle& out, bool& busy) {
  busy = false;
  if (failure f = validate(o, name)) return f;
  if (!conn) conn = std::make_shared<redis_connection>(url, o.connect_timeout, o.command_timeout);
  const redis_keys k(lock_key(o, name));
  const std::string owner = new_owner_id();
  const auto deadline = std::chrono::steady_clock::now() + (may_wait ? o.wait : std::chrono::milliseconds(0));
  std::unique_ptr<redis_connection> blocking;
  char before = '0';
  bool marked = false;
  attempt_answer a;
  std::chrono::steady_clock::time_point blocked_at;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    // Counted only while it will wait: a caller that gives up after this
    // attempt leaves no count behind to wake nobody.
    const bool will_wait = may_wait && left.count() > 0;
    const long long count_ms = will_wait ? left.count() + 2 * o.command_timeout.count() : 0;
    if (failure f = attempt(*conn, k, owner, o, name, before, count_ms, marked, a)) return f;
    if (a.granted) return granted(*conn, conn, k, owner, a, o, name, out);
    marked = marked || a.why == "marked";
    if (before == '2') count_lost_wake(blocked_at);
    if (!will_wait) break;
    if (!blocking) {
      blocking = std::make_unique<redis_connection>(url, o.connect_timeout, o.command_timeout);
      blocking->after_send(&joined_line);
    }
    bool woken = false;
    blocked_at = std::chrono::steady_clock::now();
    if (failure f = block_for_release(*blocking, k, deadline - std::chrono::steady_clock::now(),
                                      block_bound(a, o), o, woken))
      return f;
    before = woken ? '2' : '1';
  }
  busy = true;
  return refused(*conn, name, a, may_wait && o.wait.count() > 0, o);
}

}  // namespace

// ---- redis_lock -------------------------------------------------------------

redis_lock::redis_lock(std::string url, std::string name, redis_lock_options options)
    : url_(std::move(url)), name_(std::move(name)), options_(std::move(options)) {}
redis_lock::~redis_lock() = default;
redis_lock::redis_lock(redis_lock&&) noexcept = default;
redis_lock& redis_lock::operator=(redis_lock&&) noexcept = default;

namespace {

// The lock's acquire and try_acquire (grant_handle.hpp) around acquire_impl.
auto acquisitions_of(const std::string& url, const std::string& name, const redis_lock_options& o,
                     std::shared_ptr<redis_connection>& conn) {
  return make_acquisitions<redis_handle>([&](bool may_wait, redis_handle& h, bool& busy) {
    return acquire_impl(url, name, o, conn, may_wait, h, busy);
  });
}

}  // namespace

redis_handle redis_lock::acquire() {
  return acquisitions_of(url_, name_, options_, conn_).acquire();
}

redis_handle redis_lock::acquire(std::error_code& ec) noexcept {
  return acquisitions_of(url_, name_, options_, conn_).acquire(ec);
}

std::optional<redis_handle> redis_lock::try_acquire() {
  return acquisitions_of(url_, name_, options_, conn_).try_acquire();
}

std::optional<redis_handle> redis_lock::try_acquire(std::error_code& ec) noexcept {
  return acquisitions_of(url_, name_, options_, conn_).try_acquire(ec);
}

namespace {

// An empty owner id can name no grant: refused before the server is asked.
failure empty_owner(const char* step, const std::string& name) {
  return make_failure(errc::bad_argument, std::string("tokenlock: ") + step + " " + name +
                                              ": the owner id is empty; give the holder's "
                                              "redis_handle::owner()");
}

// One holder of the holders script's answer (holders.lua).
redis_holder_info holder_info(std::string owner, long long fence, long long ms, lock_mode mode,
                              long long limit) {
  redis_holder_info info;
  info.owner = std::move(owner);
  info.fence = static_cast<std::uint64_t>(fence);
  info.remaining = std::chrono::milliseconds(ms < 0 ? 0 : ms);
  info.mode = mode;
  info.slots = static_cast<std::uint32_t>(limit < 0 ? 0 : limit);
  parse_owner_id(info.owner, info.host_tag, info.pid);
  return info;
}

// Every holder, then a waiting writer's mark (holders.lua).
failure holders_impl(const std::string& url, const std::string& name, const redis_lock_options& o,
                     std::shared_ptr<redis_connection>& conn, std::vector<redis_holder_info>& out) {
  out.clear();
  if (failure f = validate(o, name)) return f;
  if (!conn) conn = std::make_shared<redis_connection>(url, o.connect_timeout, o.command_timeout);
  const redis_keys k(lock_key(o, name));
  reply_ptr r;
  if (failure f = conn->eval("status", holders_script,
                             {k.lock, k.fence, k.wake, k.waiters, k.handoff, k.shared, k.writer},
                             {}, r))
    return f;
  if (failure f = corrupt_answer(r.get(), *conn, "status", name, k.lock)) return f;
  long long kind = 0, fence = 0, pttl = 0, mark_ms = 0, limit = 0, count = 0;
  if (!int_at(r.get(), 0, kind) || !int_at(r.get(), 1, fence) || !int_at(r.get(), 2, pttl) ||
      !int_at(r.get(), 4, mark_ms) || !int_at(r.get(), 5, limit) || !int_at(r.get(), 6, count))
    return unexpected_reply("status", conn->server());
  const lock_mode mode = kind == 2 ? lock_mode::shared : lock_mode::exclusive;
  for (std::size_t i = 7; i + 1 < r->elements; i += 2) {
    long long ms = 0;
    if (!int_at(r.get(), i + 1, ms)) return unexpected_reply("status", conn->server());
    out.push_back(holder_info(str_at(r.get(), i), fence, ms, mode, limit));
  }
  const std::string mark = str_at(r.get(), 3);
  if (!mark.empty()) {
    out.push_back(holder_info(mark, 0, mark_ms, lock_mode::exclusive, 0));
    out.back().waiting_writer = true;
  }
  return {};
}

// One holder: the grant's (holder.lua),
// or, when shared holders hold, the first of them (holders.lua).
failure holder_impl(const std::string& url, const std::string& name, const redis_lock_options& o,
                    std::shared_ptr<redis_connection>& conn, std::optional<redis_holder_info>& out) {
  out.reset();
  if (failure f = validate(o, name)) return f;
  if (!conn) conn = std::make_shared<redis_connection>(url, o.connect_timeout, o.command_timeout);
  const redis_keys k(lock_key(o, name));
  reply_ptr r;
  if (failure f = conn->eval("status", holder_script, {k.lock}, {}, r)) return f;
  if (failure f = corrupt_answer(r.get(), *conn, "status", name, k.lock)) return f;
  long long held = 0, fence = 0, pttl = 0;
  if (!int_at(r.get(), 0, held)) return unexpected_reply("status", conn->server());
  if (!held) return {};
  if (!int_at(r.get(), 2, fence) || !int_at(r.get(), 3, pttl))
    return unexpected_reply("status", conn->server());
  std::string owner = str_at(r.get(), 1);
  if (owner != shared_owner_id) {
    out = holder_info(std::move(owner), fence, pttl, lock_mode::exclusive, 0);
    return {};
  }
  std::vector<redis_holder_info> all;
  if (failure f = holders_impl(url, name, o, conn, all)) return f;
  if (!all.empty() && !all.front().waiting_writer) out = std::move(all.front());
  return {};
}

}  // namespace

std::optional<redis_holder_info> redis_lock::holder() {
  std::optional<redis_holder_info> out;
  run_throwing([&] { return holder_impl(url_, name_, options_, conn_, out); });
  return out;
}

std::optional<redis_holder_info> redis_lock::holder(std::error_code& ec) noexcept {
  std::optional<redis_holder_info> out;
  run_noexcept(ec, [&] { return holder_impl(url_, name_, options_, conn_, out); });
  if (ec) out.reset();
  return out;
}

std::vector<redis_holder_info> redis_lock::holders() {
  std::vector<redis_holder_info> out;
  run_throwing([&] { return holders_impl(url_, name_, options_, conn_, out); });
  return out;
}

std::vector<redis_holder_info> redis_lock::holders(std::error_code& ec) noexcept {
  std::vector<redis_holder_info> out;
  run_noexcept(ec, [&] { return holders_impl(url_, name_, options_, conn_, out); });
  if (ec) out.clear();
  return out;
}

redis_handle redis_lock::adopt(const std::string& owner) {
  redis_handle h;
  throw_on_error([&](std::error_code& ec) { h = adopt(owner, ec); });
  return h;
}

redis_handle redis_lock::adopt(const std::string& owner, std::error_code& ec) noexcept {
  redis_handle h;
  run_noexcept(ec, [&]() -> failure {
    if (owner.empty()) return empty_owner("adopt", name_);
    std::vector<redis_holder_info> all;
    if (failure f = holders_impl(url_, name_, options_, conn_, all)) return f;
    const auto info = std::find_if(all.begin(), all.end(), [&](const redis_holder_info& i) {
      return i.owner == owner && !i.waiting_writer;
    });
    if (info == all.end())
      return make_failure(errc::lock_lost, "tokenlock: adopt " + conn_->server() + " " + name_ +
                                               ": the lock is not held by " + owner);
    const bool shared = info->mode == lock_mode::shared;
    redis_handle_access::fill(h, conn_, lock_key(options_, name_), owner, shared ? 0 : info->fence,
                              options_.lease, info->remaining.count(), info->mode);
    return {};
  });
  return h;
}

void redis_lock::break_owner(const std::string& owner) {
  throw_on_error([&](std::error_code& ec) { break_owner(owner, ec); });
}

void redis_lock::break_owner(const std::string& owner, std::error_code& ec) noexcept {
  run_noexcept(ec, [&]() -> failure {
    if (failure f = validate(options_, name_)) return f;
    if (owner.empty()) return empty_owner("break", name_);
    if (!conn_)
      conn_ = std::make_shared<redis_connection>(url_, options_.connect_timeout,
                                                 options_.command_timeout);
    const redis_keys k(lock_key(options_, name_));
    reply_ptr r;
    if (failure f = conn_->eval("break", break_script,
                                {k.lock, k.fence, k.wake, k.waiters, k.handoff, k.shared, k.writer},
                                {owner, std::to_string(options_.lease.count())}, r))
      return f;
    if (failure f = corrupt_answer(r.get(), *conn_, "break", name_, k.lock)) return f;
    long long done = 0;
    if (!int_at(r.get(), 0, done)) return unexpected_reply("break", conn_->server());
    if (done) return {};
    const std::string now = str_at(r.get(), 1);
    return make_failure(errc::lock_lost,
                        "tokenlock: break " + conn_->server() + " " + name_ + ": " + shown_bytes(owner) +
                            " does not hold the lock" +
                            (now.empty() ? std::string(" (it is free)") : " (" + shown_bytes(now) + " does)"));
  });
}

// ---- redis_handle -----------------------------------------------------------

redis_handle::redis_handle(redis_handle&& o) noexcept
    : conn_(std::move(o.conn_)),
      key_(std::move(o.key_)),
      owner_(std::move(o.owner_)),
      fence_(o.fence_),
      expires_(o.expires_),
      lease_(o.lease_),
      clock_behind_(o.clock_behind_),
      fork_generation_(o.fork_generation_),
      mode_(o.mode_) {
  o.forget();
}

redis_handle& redis_handle::operator=(redis_handle&& o) noexcept {
  return move_assign(*this, std::move(o));
}

redis_handle::~redis_handle() { release_quietly(*this); }

void redis_handle::forget() noexcept {
  owner_.clear();
  fence_ = 0;
}

bool redis_handle::owns() const noexcept {
  return !owner_.empty() && conn_ && system_os()->fork_generation() == fork_generation_;
}

std::string redis_handle::detach() noexcept {
  std::string o;
  o.swap(owner_);
  forget();
  return o;
}

namespace {

// Release or refresh: compare-and-act on our owner id.
failure settle(redis_connection& conn, const std::string& lock_key, const std::string& owner,
               std::uint64_t fence, bool shared, const char* step, const std::string& what_arg) {
  const redis_keys k(lock_key);
  reply_ptr r;
  if (failure f = settle_script_run(conn, k, owner, fence, shared, step, what_arg, r)) return f;
  long long ok = 0, other = 0;
  if (r && r->type == REDIS_REPLY_INTEGER && r->integer == 1) return {};
  if (failure f = corrupt_answer(r.get(), conn, step, std::string(), k.lock)) return f;
  if (!int_at(r.get(), 0, ok) || !int_at(r.get(), 2, other))
    return unexpected_reply(step, conn.server());
  if (ok) return {};
  const std::string kind = str_at(r.get(), 1);
  if (shared) {
    const std::string why =
        kind == "taken"     ? "our lease ended, and a writer (fence " + std::to_string(other) +
                                  ") holds the lock"
        : kind == "expired" ? std::string("our lease ended (our share is removed)")
                            : lost_reason(kind, other, 0);
    return make_failure(errc::lock_lost, "tokenlock: " + std::string(step) + " " +
                                             conn.server() + ": the shared hold of " + owner +
                                             " is no longer ours: " + why);
  }
  return make_failure(errc::lock_lost, "tokenlock: " + std::string(step) + " " + conn.server() +
                                           ": the grant (fence " + std::to_string(fence) +
                                           ") is no longer ours: " +
                                           lost_reason(kind, other, static_cast<long long>(fence)));
}

}  // namespace

void redis_handle::release() {
  throw_on_error([&](std::error_code& ec) { release(ec); });
}

void redis_handle::release(std::error_code& ec) noexcept {
  run_noexcept(ec, [&]() -> failure {
    if (owner_.empty()) return {};
    if (!owns()) {
      forget();
      return not_owner_failure("release");
    }
    failure f = settle(*conn_, key_, owner_, fence_, mode_ == lock_mode::shared, "release",
                       std::to_string(lease_.count()));
    // Not retried: a lost grant stays lost, and a connection error leaves
    // the grant to end with its lease.
    // A grant key that is not ours any more, lost or made unreadable: the
    // grant is gone either way.
    if (!f || f.code == errc::lock_lost || f.code == errc::lock_corrupt) forget();
    return f;
  });
}

void redis_handle::refresh() { refresh(lease_); }
void redis_handle::refresh(std::error_code& ec) noexcept { refresh(lease_, ec); }

void redis_handle::refresh(std::chrono::milliseconds lease) {
  throw_on_error([&](std::error_code& ec) { refresh(lease, ec); });
}

void redis_handle::refresh(std::chrono::milliseconds lease, std::error_code& ec) noexcept {
  run_noexcept(ec, [&]() -> failure {
    if (owner_.empty() || !owns()) return not_owner_failure("refresh");
    if (lease.count() <= 0 || lease > max_lease)
      return make_failure(errc::bad_argument,
                          "tokenlock: refresh: the lease must be more than 0 and at most 24 "
                          "hours (the protocol's maximum lease, the same for every process); it "
                          "is " + std::to_string(lease.count()) + " ms");
    const auto sent = std::chrono::system_clock::now();
    failure f = settle(*conn_, key_, owner_, fence_, mode_ == lock_mode::shared, "refresh",
                       std::to_string(lease.count()));
    if (f) {
      if (f.code == errc::lock_lost || f.code == errc::lock_corrupt) forget();
      return f;
    }
    lease_ = lease;
    expires_ = sent + lease;
    return {};
  });
}

}  // namespace tokenlock
