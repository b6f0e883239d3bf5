#include "tokenlock/rename_lock.hpp"

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <optional>

#include "cleanup_registry.hpp"
#include "failure.hpp"
#include "lock_directory.hpp"
#include "token_name.hpp"
#include "wait_line.hpp"

namespace tokenlock {

namespace detail {

// Fills a handle from inside the library without widening its public API.
struct lock_handle_access {
  static void fill(lock_handle& h, std::shared_ptr<os> sys,
                   std::shared_ptr<const lock_paths> paths, std::string token,
                   std::string token_path, std::int64_t expiry_us,
                   std::chrono::milliseconds lease) {
    h.os_ = std::move(sys);
    h.paths_ = std::move(paths);
    h.token_ = std::move(token);
    h.token_path_ = std::move(token_path);
    h.expiry_us_ = expiry_us;
    h.lease_ = lease;
    h.fork_generation_ = h.os_->fork_generation();
    h.cleanup_slot_ = cleanup_track_token(h.token_path_, h.paths_->free_path);
  }
};

// One idle directory watch, kept between waits. Closing an inotify instance
// waits for an SRCU grace period in the kernel (milliseconds), which made
// a per-wait watch cost more than it saved. A watch inherited through fork
// is never reused: parent and child would read one event queue.
//
// It also remembers, for a while, that the lock was seen cycling fast, so
// that the following waits poll from their start instead of each paying a
// few wake-ups to find that out again.
struct watch_cache {
  static constexpr std::int64_t remember_fast_us = 100000;

  std::mutex mutex;
  std::unique_ptr<dir_watch> idle;
  std::uint64_t fork_generation = 0;
  std::int64_t poll_until_us = 0;  // steady clock

  void saw_fast_releases(os& sys) {
    std::lock_guard<std::mutex> lock(mutex);
    poll_until_us = sys.steady_now_us() + remember_fast_us;
  }

  // An armed watch, or nullptr (none available, or the lock cycles fast).
  std::unique_ptr<dir_watch> take(os& sys, const std::string& dir) {
    std::unique_ptr<dir_watch> w;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (sys.steady_now_us() < poll_until_us) return nullptr;
      if (idle && fork_generation == sys.fork_generation()) w = std::move(idle);
    }
    if (!w) w = sys.watch_directory(dir);
    if (w && !w->arm()) w.reset();
    return w;
  }
  // The wait board, mapped once per lock object and shared by its threads;
  // a mapping stays valid across fork.
  std::shared_ptr<wait_board> board;
  bool board_tried = false;

  // The board if an earlier wait mapped it, without opening it.
  std::shared_ptr<wait_board> mapped_board() {
    std::lock_guard<std::mutex> lock(mutex);
    return board;
  }

  std::shared_ptr<wait_board> wait_board_for(os& sys, const lock_paths& paths, unsigned dir_mode) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!board_tried) {
      board_tried = true;
      std::unique_ptr<wait_board> b = sys.open_wait_board(paths.board_path, dir_mode & 0666);
      if (b && board_is_usable(*b)) board = std::move(b);
    }
    return board;
  }

  void give_back(os& sys, std::unique_ptr<dir_watch> w) {
    if (!w) return;
    w->disarm();
    std::lock_guard<std::mutex> lock(mutex);
    if (!idle || fork_generation != sys.fork_generation()) {
      idle = std::move(w);
      fork_generation = sys.fork_generation();
    }
  }
};

}  // namespace detail

using namespace detail;

namespace {

std::int64_t to_us(std::chrono::milliseconds ms) { return ms.count() * 1000; }

failure validate(const lock_options& o) {
  auto bad = [](const std::string& what) {
    return make_failure(errc::bad_argument, "tokenlock: bad lock_options: " + what);
  };
  if (o.lease.count() <= 0) return bad("lease must be positive");
  if (o.wait.count() < 0) return bad("wait must not be negative");
  if (o.skew_allowance.count() < 0) return bad("skew_allowance must not be negative");
  if (o.max_lease < o.lease) return bad("lease must not exceed max_lease");
  if (o.dir_mode > 07777) return bad("dir_mode must be a permission mode (at most 07777)");
  if (o.backoff_min.count() <= 0 || o.backoff_max < o.backoff_min)
    return bad("backoff_min must be positive and at most backoff_max");
  if (o.owner_pid < 0) return bad("owner_pid must be a process id (or 0 for this process)");
  return {};
}

// Exponential backoff with ±25 % jitter, from options.backoff_min doubling
// to options.backoff_max. Jitter keeps waiters that started together from
// retrying in lockstep.
class backoff {
 public:
  explicit backoff(const lock_options& o)
      : current_(std::max<std::int64_t>(o.backoff_min.count(), 1)),
        max_(std::max<std::int64_t>(o.backoff_max.count(), current_)) {}

  std::chrono::microseconds next(os& sys) {
    const std::int64_t base = current_;
    current_ = std::min<std::int64_t>(current_ * 2, max_);
    const std::int64_t spread = base / 2;  // ±25 % = a window of 50 %
    const std::int64_t jitter = spread > 0 ? static_cast<std::int64_t>(sys.random_u64() %
                                                                       static_cast<std::uint64_t>(spread + 1))
                                           : 0;
    return std::chrono::microseconds(base - base / 4 + jitter);
  }

 private:
  std::int64_t current_;
  std::int64_t max_;
};

enum class outcome { acquired, busy, again };

class acquirer {
 public:
  acquirer(const std::shared_ptr<os>& sys, const std::shared_ptr<const lock_paths>& paths,
           const lock_options& options)
      : sys_ptr_(sys), sys_(*sys), paths_ptr_(paths), paths_(*paths), options_(options) {}

  // One round of the protocol: the fast-path rename, then (on ENOENT and
  // when `look` is set) the NFS retransmit check, a look at the directory,
  // and a takeover or creation when that is what the directory needs.
  failure attempt(lock_handle& out, outcome& result, bool look) {
    const process_identity& me = sys_.self();
    const int owner = options_.owner_pid ? options_.owner_pid : me.pid;
    const std::uint64_t owner_start = options_.owner_pid ? owner_start_ : me.start_time;
    const std::uint64_t nonce = sys_.random_u64();
    std::int64_t expiry = sys_.wall_now_us() + to_us(options_.lease);
    std::string token = make_token(expiry, me.host_tag, owner, owner_start, nonce);
    std::string mine = paths_.dir_slash + token;

    // After the first round a waiter checks that the token is free with a
    // lookup, which takes no lock, before a rename, which locks the
    // directory exclusively and so would stall the holder's own renames.
    file_status st;
    bool try_rename = true;
    if (!first_round_) {
      try_rename = !sys_.status(paths_.free_path, st);
      if (!try_rename && !look) {
        result = outcome::busy;
        return {};
      }
    }
    first_round_ = false;
    if (try_rename) {
      std::error_code ec = sys_.rename(paths_.free_path, mine);
      if (!ec) return held(out, result, std::move(token), std::move(mine), expiry);
      if (ec != std::errc::no_such_file_or_directory)
        return os_failure(sys_, paths_, "acquire", "cannot rename lockfile to " + token,
                          std::string(free_token), ec);
      // An NFS client may retransmit a rename whose first reply was lost;
      // the retransmission then fails with ENOENT although the rename
      // happened.
      if (!sys_.status(mine, st))
        return held(out, result, std::move(token), std::move(mine), expiry);
      if (!look) {
        result = outcome::busy;
        return {};
      }
    }

    observation obs;
    if (failure f = observe(sys_, paths_, "acquire", obs)) return f;
    switch (obs.kind) {
      case observation::missing:
      case observation::empty:
        if (failure f = create_lock_directory(sys_, paths_, options_)) return f;
        result = outcome::again;
        return {};
      case observation::free:
        result = outcome::again;
        return {};
      case observation::held: break;
    }
    judgement j = judge(sys_, options_, obs.token);
    if (!j.stale) {
      busy_reason_ = std::move(j.reason);
      result = outcome::busy;
      return {};
    }
    // Take over exactly the name we judged: if its owner refreshed or
    // released it, or another taker was first, this name is gone and the
    // rename fails without touching anyone's token.
    expiry = sys_.wall_now_us() + to_us(options_.lease);
    token = make_token(expiry, me.host_tag, owner, owner_start, nonce);
    mine = paths_.dir_slash + token;
    std::error_code ec = sys_.rename(paths_.dir_slash + obs.token.name, mine);
    if (ec == std::errc::no_such_file_or_directory) {
      result = outcome::again;
      return {};
    }
    if (ec)
      return os_failure(sys_, paths_, "take over",
                        "cannot rename stale token " + obs.token.name + " (" + j.reason + ")",
                        obs.token.name, ec);
    clear_workspace(sys_, mine);
    return held(out, result, std::move(token), std::move(mine), expiry);
  }

  // For lock_options::owner_pid: that process's start time, read once.
  failure resolve_owner() {
    if (!options_.owner_pid) return {};
    process_status ps;
    if (auto ec = sys_.read_process_status(options_.owner_pid, ps))
      return make_failure(ec, describe("acquire", paths_.dir,
                                       "cannot read /proc for the owner process " +
                                           std::to_string(options_.owner_pid) +
                                           " (the owner must be a live process on this host)",
                                       ec));
    owner_start_ = ps.start_time;
    return {};
  }

  std::string busy_reason() const {
    return busy_reason_.empty() ? "changing hands too fast to see who holds it" : busy_reason_;
  }

 private:
  bool first_round_ = true;
  failure held(lock_handle& out, outcome& result, std::string token, std::string token_path,
               std::int64_t expiry) {
    lock_handle_access::fill(out, sys_ptr_, paths_ptr_, std::move(token), std::move(token_path),
                             expiry, options_.lease);
    result = outcome::acquired;
    return {};
  }

  const std::shared_ptr<os>& sys_ptr_;
  os& sys_;
  const std::shared_ptr<const lock_paths>& paths_ptr_;
  const lock_paths& paths_;
  const lock_options& options_;
  std::string busy_reason_;
  std::uint64_t owner_start_ = 0;
};

// A waiter retries the fast-path rename on every round but lists the
// directory and judges the holder at most this often: under contention the
// look (a listing, kill(2), /proc) costs ten system calls that compete with
// the holder for the CPU, while a dead holder is still noticed well within
// 100 ms. See docs/benchmarks.md.
constexpr std::int64_t look_interval_us = 10000;

// A waiter woken by releases that follow each other within fast_release_us,
// this many times in a row, stops watching and polls (and the lock
// remembers it for a while): see where it is applied, and
// docs/benchmarks.md. Critical sections of 1 ms release a thousand times
// slower than this; empty ones ten times faster.
constexpr std::int64_t fast_release_us = 200;
constexpr int fast_release_wakes = 3;

// Rounds that end in "again" (the token moved while we looked, or we just
// created the directory) retry at once, but only this often in a row:
// beyond that the lock counts as busy and we wait like any waiter.
constexpr int max_immediate_rounds = 16;

// A head of the line that has waited this long marks the line hungry
// (wait_line::hungry): long enough for a holder that releases and
// re-acquires at once to keep the lock through short bursts, short enough
// that the head gets it within a few critical sections. docs/benchmarks.md
// has the measurements.
constexpr std::int64_t head_patience_us = 1000;

// The head of the line records a beat at least every backoff_max; one that
// has not for twice that, and 10 ms more for a busy scheduler, is taken to
// be gone (killed, stopped) and its place is taken.
std::chrono::milliseconds stale_head_after(const lock_options& o) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(2 * o.backoff_max) +
         std::chrono::milliseconds(10);
}

failure acquire_impl(const std::shared_ptr<os>& sys, const boost::filesystem::path& dir,
                     const std::shared_ptr<const lock_paths>& paths_ptr,
                     const lock_options& options, watch_cache& watches, bool may_wait,
                     lock_handle& out, bool& busy) {
  busy = false;
  if (failure f = validate(options)) return f;
  if (!paths_ptr) {
    lock_paths unused;
    return make_lock_paths(dir, unused);
  }
  const lock_paths& paths = *paths_ptr;
  acquirer a(sys, paths_ptr, options);
  if (failure f = a.resolve_owner()) return f;
  const std::int64_t start = sys->steady_now_us();
  const std::int64_t deadline = start + (may_wait ? to_us(options.wait) : 0);
  backoff delay(options);
  std::unique_ptr<dir_watch> watch;
  bool watch_tried = false;
  struct return_watch {
    watch_cache& cache;
    os& sys;
    std::unique_ptr<dir_watch>& w;
    ~return_watch() { cache.give_back(sys, std::move(w)); }
  } returner{watches, *sys, watch};
  int immediate = 0;
  std::int64_t last_look = 0;
  bool looked = false;
  // The first round looks at once unless this waiter will line up: then a
  // head of the line, if there is one, judges the holder anyway, and a
  // waiter that finds nobody at the head looks on its next round.
  bool defer_look = may_wait && options.wait.count() > 0 && options.queue_waiters;
  // A process that waited on this lock before still has its board; while
  // the line is hungry it joins the line instead of taking the fast path.
  bool skip_fast_path = false;
  if (defer_look)
    if (std::shared_ptr<wait_board> b = watches.mapped_board())
      skip_fast_path = wait_line::hungry(
          *b, static_cast<std::uint32_t>(start / 1000), stale_head_after(options).count());
  std::int64_t head_since = 0;
  bool hungry = false;
  int quick_wakes = 0;
  std::int64_t last_wake = 0;
  // Declared after the watch, so that it is left (handing the head's place
  // on) before the watch goes back.
  std::optional<wait_line> line;
  std::optional<backoff> head_delay;
  for (;;) {
    outcome r = outcome::busy;
    const std::int64_t before = sys->steady_now_us();
    // Look on the first round (try_acquire makes only one) unless it is
    // deferred, and always on the last one before the deadline, so a
    // verdict is never stale.
    const bool look = (!looked && !defer_look) ||
                      (looked && before - last_look >= look_interval_us) || before >= deadline;
    defer_look = false;
    if (look) {
      looked = true;
      last_look = before;
    }
    if (skip_fast_path)
      skip_fast_path = false;  // r stays busy: straight to the line
    else if (failure f = a.attempt(out, r, look))
      return f;
    if (r == outcome::acquired) return {};
    if (r == outcome::again && ++immediate < max_immediate_rounds) continue;
    immediate = 0;
    const std::int64_t now = sys->steady_now_us();
    if (now >= deadline) {
      busy = true;
      if (may_wait && options.wait.count() > 0)
        return make_failure(errc::timed_out,
                            describe("acquire", paths.dir,
                                     "timed out after " + std::to_string(options.wait.count()) +
                                         " ms; the lock is " + a.busy_reason(),
                                     {}));
      return make_failure(errc::busy,
                          describe("acquire", paths.dir, "the lock is " + a.busy_reason(), {}));
    }
    std::chrono::microseconds pause = delay.next(*sys);
    if (options.queue_waiters && !line)
      line.emplace(*sys, watches.wait_board_for(*sys, paths, options.dir_mode),
                   stale_head_after(options));
    if (line && line->usable()) {
      std::uint32_t turn = 0;
      if (!line->claim_head(turn)) {
        // Someone else watches the lock: sleep until the place is ours.
        head_delay.reset();
        hungry = false;
        if (watch) {
          watches.give_back(*sys, std::move(watch));
          watch_tried = false;
        }
        if (line->wait_for_place(turn, deadline) == wait_line::place::handed_on) {
          // The head that handed its place on took the lock (or judged
          // its holder while it looked): the holder needs judging only a
          // look interval from now.
          looked = true;
          last_look = sys->steady_now_us();
        }
        continue;
      }
      // A new head of the line starts looking quickly again: the lock may
      // be released any moment, and only the head is looking.
      if (!head_delay) {
        head_delay.emplace(options);
        head_since = now;
      }
      pause = head_delay->next(*sys);
      if (now - head_since >= head_patience_us) {
        line->mark_hungry();
        hungry = true;
      }
    }
    pause = std::min(pause, std::chrono::microseconds(deadline - now));
    if (options.wake_on_release && !watch_tried) {
      watch_tried = true;
      watch = watches.take(*sys, paths.dir);
    }
    // The others now leave a freed lock to a hungry head: one that polls
    // looks again soon, or the lock stays free for the rest of a pause that
    // may be backoff_max. A watching head is woken by the release anyway.
    if (hungry && !watch) pause = std::min<std::chrono::microseconds>(pause, options.backoff_min);
    if (watch) {
      if (watch->wait_for(std::string(free_token), pause)) {
        // Woken by a release. When releases follow each other this fast,
        // the lock is cycling through short critical sections: waking every
        // waiter on each one costs the holder more than prompt hand-offs
        // gain, so poll instead.
        const std::int64_t woke = sys->steady_now_us();
        quick_wakes = last_wake != 0 && woke - last_wake < fast_release_us ? quick_wakes + 1 : 0;
        last_wake = woke;
        if (quick_wakes >= fast_release_wakes) {
          watches.saw_fast_releases(*sys);
          watches.give_back(*sys, std::move(watch));
        }
      }
    } else {
      sys->sleep_for(pause);
    }
  }
}

}  // namespace

rename_lock::rename_lock(boost::filesystem::path dir, lock_options options)
    : rename_lock(std::move(dir), options, system_os()) {}

rename_lock::rename_lock(boost::filesystem::path dir, lock_options options,
                         std::shared_ptr<detail::os> os)
    : dir_(std::move(dir)), options_(options), os_(os ? std::move(os) : system_os()) {
  auto paths = std::make_shared<lock_paths>();
  if (!make_lock_paths(dir_, *paths)) paths_ = std::move(paths);
  watch_cache_ = std::make_shared<watch_cache>();
}

lock_handle rename_lock::acquire() const {
  lock_handle h;
  bool busy = false;
  run_throwing([&] { return acquire_impl(os_, dir_, paths_, options_, *watch_cache_, true, h, busy); });
  return h;
}

lock_handle rename_lock::acquire(std::error_code& ec) const noexcept {
  lock_handle h;
  bool busy = false;
  run_noexcept(ec, [&] { return acquire_impl(os_, dir_, paths_, options_, *watch_cache_, true, h, busy); });
  return h;
}

std::optional<lock_handle> rename_lock::try_acquire() const {
  lock_handle h;
  bool busy = false;
  failure f = acquire_impl(os_, dir_, paths_, options_, *watch_cache_, false, h, busy);
  if (busy) return std::nullopt;
  if (f) throw_failure(f);
  return std::optional<lock_handle>(std::move(h));
}

std::optional<lock_handle> rename_lock::try_acquire(std::error_code& ec) const noexcept {
  lock_handle h;
  bool busy = false;
  run_noexcept(ec, [&] {
    failure f = acquire_impl(os_, dir_, paths_, options_, *watch_cache_, false, h, busy);
    return busy ? failure{} : f;
  });
  if (ec || busy) return std::nullopt;
  return std::optional<lock_handle>(std::move(h));
}

namespace {

failure held_name(const std::string& dir, const std::string& token) {
  if (classify_name(token) != name_kind::held)
    return make_failure(errc::bad_argument,
                        describe("token", dir,
                                 "\"" + token +
                                     "\" is not a held token (lockfile.<expiry>.<host>-<hash>."
                                     "<pid>.<start>.<nonce>, as printed by tokenlock acquire)",
                                 {}));
  return {};
}

failure not_held(const lock_paths& paths, const std::string& token) {
  return make_failure(errc::lock_lost,
                      describe("token", paths.dir,
                               "the lock does not hold " + token +
                                   ": it was released, refreshed or taken over, or it belongs "
                                   "to another lock",
                               {}));
}

failure adopt_impl(const std::shared_ptr<os>& sys, const boost::filesystem::path& dir,
                   const std::shared_ptr<const lock_paths>& paths, const lock_options& options,
                   const std::string& token, lock_handle& out) {
  if (!paths) {
    lock_paths unused;
    return make_lock_paths(dir, unused);
  }
  if (failure f = held_name(paths->dir, token)) return f;
  file_status st;
  std::error_code ec = sys->status(paths->dir_slash + token, st);
  if (ec == std::errc::no_such_file_or_directory) return not_held(*paths, token);
  if (ec) return os_failure(*sys, *paths, "token", "cannot look at " + token, token, ec);
  held_token t;
  classify_name(token, &t);
  lock_handle_access::fill(out, sys, paths, token, paths->dir_slash + token, t.expiry_us,
                           options.lease);
  return {};
}

failure take_over_impl(const std::shared_ptr<os>& sys, const boost::filesystem::path& dir,
                       const std::shared_ptr<const lock_paths>& paths,
                       const lock_options& options, const std::string& token, bool force,
                       lock_handle& out) {
  if (failure f = validate(options)) return f;
  if (!paths) {
    lock_paths unused;
    return make_lock_paths(dir, unused);
  }
  if (failure f = held_name(paths->dir, token)) return f;
  held_token t;
  classify_name(token, &t);
  observed_token observed{token, t.expiry_us, std::string(t.host_tag), t.pid, t.start_time};
  judgement j = judge(*sys, options, observed);
  file_status st;
  std::error_code ec = sys->status(paths->dir_slash + token, st);
  if (ec == std::errc::no_such_file_or_directory) return not_held(*paths, token);
  if (ec) return os_failure(*sys, *paths, "break", "cannot look at " + token, token, ec);
  if (!j.stale && !force)
    return make_failure(errc::busy, describe("break", paths->dir,
                                             "refusing to take over a token that is not stale: " +
                                                 j.reason,
                                             {}) +
                                        "; force it only if you know its owner is gone");
  const process_identity& me = sys->self();
  const std::int64_t expiry = sys->wall_now_us() + to_us(options.lease);
  std::string mine = make_token(expiry, me.host_tag, me.pid, me.start_time, sys->random_u64());
  std::string mine_path = paths->dir_slash + mine;
  ec = sys->rename(paths->dir_slash + token, mine_path);
  if (ec == std::errc::no_such_file_or_directory) return not_held(*paths, token);
  if (ec) return os_failure(*sys, *paths, "break", "cannot rename " + token, token, ec);
  clear_workspace(*sys, mine_path);
  lock_handle_access::fill(out, sys, paths, std::move(mine), std::move(mine_path), expiry,
                           options.lease);
  return {};
}

failure holder_impl(os& sys, const boost::filesystem::path& dir, const lock_options& options,
                    std::optional<holder_info>& out) {
  out.reset();
  lock_paths paths;
  if (failure f = make_lock_paths(dir, paths)) return f;
  observation obs;
  if (failure f = observe(sys, paths, "status", obs)) return f;
  if (obs.kind != observation::held) return {};
  judgement j = judge(sys, options, obs.token);
  holder_info h;
  h.token = obs.token.name;
  h.path = dir / obs.token.name;
  h.expires = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::microseconds(obs.token.expiry_us)));
  h.host_tag = obs.token.host_tag;
  h.same_host = j.same_host;
  h.pid = obs.token.pid;
  h.start_time = obs.token.start_time;
  h.owner = j.owner;
  h.stale = j.stale;
  h.reason = std::move(j.reason);
  out = std::move(h);
  return {};
}

}  // namespace

lock_handle rename_lock::adopt(const std::string& token) const {
  lock_handle h;
  run_throwing([&] { return adopt_impl(os_, dir_, paths_, options_, token, h); });
  return h;
}

lock_handle rename_lock::adopt(const std::string& token, std::error_code& ec) const noexcept {
  lock_handle h;
  run_noexcept(ec, [&] { return adopt_impl(os_, dir_, paths_, options_, token, h); });
  return h;
}

lock_handle rename_lock::take_over(const std::string& token, bool force) const {
  lock_handle h;
  run_throwing([&] { return take_over_impl(os_, dir_, paths_, options_, token, force, h); });
  return h;
}

lock_handle rename_lock::take_over(const std::string& token, bool force,
                                   std::error_code& ec) const noexcept {
  lock_handle h;
  run_noexcept(ec, [&] { return take_over_impl(os_, dir_, paths_, options_, token, force, h); });
  return h;
}

std::optional<holder_info> rename_lock::holder() const {
  std::optional<holder_info> out;
  run_throwing([&] { return holder_impl(*os_, dir_, options_, out); });
  return out;
}

std::optional<holder_info> rename_lock::holder(std::error_code& ec) const noexcept {
  std::optional<holder_info> out;
  run_noexcept(ec, [&] { return holder_impl(*os_, dir_, options_, out); });
  if (ec) out.reset();
  return out;
}

// ---- lock_handle -----------------------------------------------------------

lock_handle::lock_handle(lock_handle&& other) noexcept
    : os_(std::move(other.os_)),
      paths_(std::move(other.paths_)),
      token_(std::move(other.token_)),
      token_path_(std::move(other.token_path_)),
      expiry_us_(other.expiry_us_),
      lease_(other.lease_),
      fork_generation_(other.fork_generation_),
      cleanup_slot_(other.cleanup_slot_) {
  other.cleanup_slot_ = -1;
  other.forget();
}

lock_handle& lock_handle::operator=(lock_handle&& other) noexcept {
  if (this != &other) {
    if (owns()) {
      std::error_code ignored;
      release(ignored);
    }
    os_ = std::move(other.os_);
    paths_ = std::move(other.paths_);
    token_ = std::move(other.token_);
    token_path_ = std::move(other.token_path_);
    expiry_us_ = other.expiry_us_;
    lease_ = other.lease_;
    fork_generation_ = other.fork_generation_;
    cleanup_untrack(cleanup_slot_);  // an empty or forked-away handle's record
    cleanup_slot_ = other.cleanup_slot_;
    other.cleanup_slot_ = -1;
    other.forget();
  }
  return *this;
}

lock_handle::~lock_handle() {
  if (owns()) {
    std::error_code ignored;
    release(ignored);
  }
}

void lock_handle::forget() noexcept {
  token_.clear();
  token_path_.clear();
  expiry_us_ = 0;
  cleanup_untrack(cleanup_slot_);
  cleanup_slot_ = -1;
}

bool lock_handle::owns() const noexcept {
  return !token_.empty() && os_ && os_->fork_generation() == fork_generation_;
}

const boost::filesystem::path& lock_handle::directory() const noexcept {
  static const boost::filesystem::path none;
  return paths_ ? paths_->dir_path : none;
}

boost::filesystem::path lock_handle::path() const {
  return token_.empty() ? boost::filesystem::path() : directory() / token_;
}

std::chrono::system_clock::time_point lock_handle::expires() const noexcept {
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::microseconds(expiry_us_)));
}

std::string lock_handle::detach() noexcept {
  std::string t;
  t.swap(token_);
  forget();
  return t;
}

namespace {

failure not_owner_failure(const char* step, const std::string& dir, bool forked) {
  return make_failure(
      errc::not_owner,
      describe(step, dir,
               forked ? "this handle was acquired by the parent process before fork(); a "
                        "child never releases or refreshes its parent's lock"
                      : "this handle does not hold a token (released, lost or moved from)",
               {}));
}

failure lost_failure(const char* step, const std::string& dir, const std::string& token,
                     std::int64_t expiry_us) {
  return make_failure(errc::lock_lost,
                      describe(step, dir,
                               "our token " + token +
                                   " is gone: the lock was taken over by another process (our "
                                   "lease ended at " +
                                   format_utc(expiry_us) +
                                   ", or our process was judged dead); the new owner's lock "
                                   "was left alone",
                               {}));
}

}  // namespace

void lock_handle::release() {
  run_throwing([&]() -> failure {
    std::error_code ec;
    release(ec);
    if (!ec) return {};
    return make_failure(ec, last_error_message());
  });
}

void lock_handle::release(std::error_code& ec) noexcept {
  run_noexcept(ec, [&]() -> failure {
    if (token_.empty()) return {};
    if (!os_ || os_->fork_generation() != fork_generation_) {
      forget();
      return not_owner_failure("release", paths_->dir, true);
    }
    std::error_code e = os_->rename(token_path_, paths_->free_path);
    if (!e) {
      forget();
      return {};
    }
    if (e == std::errc::no_such_file_or_directory) {
      failure f = lost_failure("release", paths_->dir, token_, expiry_us_);
      forget();
      return f;
    }
    // Still ours: the caller may retry, and the destructor will.
    return os_failure(*os_, *paths_, "release", "cannot rename " + token_ + " to lockfile", token_, e);
  });
}

void lock_handle::refresh() { refresh(lease_); }

void lock_handle::refresh(std::error_code& ec) noexcept { refresh(lease_, ec); }

void lock_handle::refresh(std::chrono::milliseconds lease) {
  run_throwing([&]() -> failure {
    std::error_code ec;
    refresh(lease, ec);
    if (!ec) return {};
    return make_failure(ec, last_error_message());
  });
}

void lock_handle::refresh(std::chrono::milliseconds lease, std::error_code& ec) noexcept {
  run_noexcept(ec, [&]() -> failure {
    const std::string dir = paths_ ? paths_->dir : std::string();
    if (token_.empty()) return not_owner_failure("refresh", dir, false);
    if (!os_ || os_->fork_generation() != fork_generation_)
      return not_owner_failure("refresh", dir, true);
    if (lease.count() <= 0)
      return make_failure(errc::bad_argument,
                          describe("refresh", dir, "the lease must be positive", {}));
    const std::int64_t expiry = os_->wall_now_us() + to_us(lease);
    std::string next = with_expiry(owner_part(token_), expiry);
    std::string next_path = paths_->dir_slash + next;
    // Recorded before the rename, so that a stop signal in between releases
    // whichever of the two names holds the token.
    cleanup_entry next_record(cleanup_track_token(next_path, paths_->free_path));
    std::error_code e = os_->rename(token_path_, next_path);
    if (e == std::errc::no_such_file_or_directory) {
      // NFS retransmit: the first rename may have happened.
      file_status st;
      if (os_->status(next_path, st)) {
        failure f = lost_failure("refresh", dir, token_, expiry_us_);
        forget();
        return f;
      }
      e.clear();
    }
    if (e)
      return os_failure(*os_, *paths_, "refresh", "cannot rename " + token_ + " to " + next,
                        token_, e);
    cleanup_untrack(cleanup_slot_);
    cleanup_slot_ = next_record.release();
    token_ = std::move(next);
    token_path_ = std::move(next_path);
    expiry_us_ = expiry;
    lease_ = lease;
    return {};
  });
}

}  // namespace tokenlock
