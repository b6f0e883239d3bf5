#include "waiting.hpp"

#include <algorithm>
#include <mutex>
#include <optional>

#include "token_name.hpp"
#include "wait_line.hpp"

namespace tokenlock::detail {

// One idle directory watch, kept between waits. Closing an inotify instance
// waits for an SRCU grace period in the kernel (milliseconds), which made
// a per-wait watch cost more than it saved. A watch inherited through fork
// is never reused: parent and child would read one event queue.
//
// It also remembers, for a while, that the lock was seen cycling fast, so
// that the following waits poll from their start instead of each paying a
// few wake-ups to find that out again.
struct wait_state {
  static constexpr std::int64_t remember_fast_us = 100000;

  std::mutex mutex;
  std::unique_ptr<dir_watch> idle;
  std::uint64_t fork_generation = 0;
  std::int64_t poll_until_us = 0;  // steady clock
  // The wait board, mapped once per lock object and shared by its threads;
  // a mapping stays valid across fork.
  std::shared_ptr<wait_board> board;
  bool board_settled = false;  // mapped, or known to be unusable

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

  void give_back(os& sys, std::unique_ptr<dir_watch> w) {
    if (!w) return;
    w->disarm();
    std::lock_guard<std::mutex> lock(mutex);
    if (!idle || fork_generation != sys.fork_generation()) {
      idle = std::move(w);
      fork_generation = sys.fork_generation();
    }
  }

  // The board if an earlier wait mapped it, without opening it.
  std::shared_ptr<wait_board> mapped_board() {
    std::lock_guard<std::mutex> lock(mutex);
    drop_broken_board();
    return board;
  }

  // A board whose file was truncated under its mapping is dropped, and the
  // file opened afresh by the next wait that needs it. Called locked.
  void drop_broken_board() {
    if (board && !board->intact()) {
      board.reset();
      board_settled = false;
    }
  }

  // The board, mapping it on first use. With `create` false an absent board
  // stays absent (and may be created by a later call): only a waiter that
  // has seen the lock held creates one, so a lock that was never contended
  // leaves no file beside it. Sets `settled` when the answer is final.
  std::shared_ptr<wait_board> board_for(os& sys, const lock_paths& paths, unsigned dir_mode,
                                        bool create, bool& settled) {
    std::lock_guard<std::mutex> lock(mutex);
    drop_broken_board();
    if (!board_settled) {
      std::unique_ptr<wait_board> b;
      std::error_code ec = sys.open_wait_board(paths.board_path, dir_mode & 0666, create, b);
      if (!ec && b && board_is_usable(*b)) board = std::move(b);
      board_settled = create || ec != std::errc::no_such_file_or_directory;
    }
    settled = board_settled;
    return board;
  }
};

std::shared_ptr<wait_state> make_wait_state() { return std::make_shared<wait_state>(); }

namespace {

std::int64_t to_us(std::chrono::milliseconds ms) { return ms.count() * 1000; }

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
    const std::int64_t jitter =
        spread > 0
            ? static_cast<std::int64_t>(sys.random_u64() % static_cast<std::uint64_t>(spread + 1))
            : 0;
    return std::chrono::microseconds(base - base / 4 + jitter);
  }

 private:
  std::int64_t current_;
  std::int64_t max_;
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

failure wait_failure(const lock_paths& paths, const lock_options& options, bool may_wait,
                     const lock_attempt& a) {
  if (may_wait && options.wait.count() > 0)
    return make_failure(errc::timed_out,
                        describe("acquire", paths.dir,
                                 "timed out after " + std::to_string(options.wait.count()) +
                                     " ms; the lock is " + a.busy_reason(),
                                 {}));
  return make_failure(errc::busy, describe("acquire", paths.dir, "the lock is " + a.busy_reason(), {}));
}

}  // namespace

std::chrono::milliseconds stale_head_after(const lock_options& o) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(2 * o.backoff_max) +
         std::chrono::milliseconds(10);
}

std::chrono::milliseconds sleeper_look_interval(const lock_options& o) {
  return 4 * stale_head_after(o);
}

failure wait_for_lock(os& sys, const lock_paths& paths, const lock_options& options,
                      wait_state& state, bool may_wait, lock_attempt& a, bool& busy) {
  busy = false;
  const std::int64_t start = sys.steady_now_us();
  const std::int64_t deadline = start + (may_wait ? to_us(options.wait) : 0);
  backoff delay(options);
  std::unique_ptr<dir_watch> watch;
  bool watch_tried = false;
  struct return_watch {
    wait_state& state;
    os& sys;
    std::unique_ptr<dir_watch>& w;
    ~return_watch() { state.give_back(sys, std::move(w)); }
  } returner{state, sys, watch};
  int immediate = 0;
  std::int64_t last_look = 0;
  bool looked = false;
  bool seen_held = false;  // a look found a live holder: this waiter really waits
  // The first round looks at once unless this waiter will line up: then a
  // head of the line, if there is one, judges the holder anyway, and a
  // waiter that finds no line looks on its next round, at once.
  bool defer_look = may_wait && options.wait.count() > 0 && options.queue_waiters;
  // A process that waited on this lock before still has its board; while
  // the line is hungry it joins the line instead of taking the fast path.
  bool skip_fast_path = false;
  if (defer_look)
    if (std::shared_ptr<wait_board> b = state.mapped_board())
      skip_fast_path = wait_line::hungry(*b, static_cast<std::uint32_t>(start / 1000),
                                         stale_head_after(options).count());
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
    const std::int64_t before = sys.steady_now_us();
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
    else if (failure f = a.attempt(r, look))
      return f;
    if (r == outcome::acquired) return {};
    if (look && r == outcome::busy) seen_held = true;
    if (r == outcome::again && ++immediate < max_immediate_rounds) continue;
    immediate = 0;
    const std::int64_t now = sys.steady_now_us();
    if (now >= deadline) {
      busy = true;
      return wait_failure(paths, options, may_wait, a);
    }
    std::chrono::microseconds pause = delay.next(sys);
    if (options.queue_waiters && !line) {
      bool settled = false;
      std::shared_ptr<wait_board> b =
          state.board_for(sys, paths, options.dir_mode, seen_held, settled);
      if (b || settled) {
        line.emplace(sys, std::move(b), stale_head_after(options));
      } else if (!looked) {
        // No line yet and nobody to judge the holder for us: look now.
        continue;
      }
    }
    if (line && line->usable()) {
      std::uint32_t turn = 0;
      if (!line->claim_head(turn)) {
        // Someone else watches the lock: sleep until the place is ours, or
        // until it is time to look for ourselves.
        head_delay.reset();
        hungry = false;
        if (watch) {
          state.give_back(sys, std::move(watch));
          watch_tried = false;
        }
        const std::int64_t look_by = sys.steady_now_us() + to_us(sleeper_look_interval(options));
        switch (line->wait_for_place(turn, std::min(deadline, look_by))) {
          case wait_line::place::handed_on:
            // The head that handed its place on took the lock (or judged
            // its holder while it looked): the holder needs judging only a
            // look interval from now.
            looked = true;
            last_look = sys.steady_now_us();
            break;
          case wait_line::place::taken: break;
          case wait_line::place::none:
            // The deadline, or this sleeper's own look: a head that never
            // hands on (a board another boot or host wrote, or garbage) can
            // delay it this long and no longer.
            last_look = 0;
            break;
        }
        continue;
      }
      // A new head of the line starts looking quickly again: the lock may
      // be released any moment, and only the head is looking.
      if (!head_delay) {
        head_delay.emplace(options);
        head_since = now;
      }
      pause = head_delay->next(sys);
      if (now - head_since >= head_patience_us) {
        line->mark_hungry();
        hungry = true;
      }
    }
    pause = std::min(pause, std::chrono::microseconds(deadline - now));
    if (options.wake_on_release && !watch_tried) {
      watch_tried = true;
      watch = state.take(sys, paths.dir);
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
        const std::int64_t woke = sys.steady_now_us();
        quick_wakes = last_wake != 0 && woke - last_wake < fast_release_us ? quick_wakes + 1 : 0;
        last_wake = woke;
        if (quick_wakes >= fast_release_wakes) {
          state.saw_fast_releases(sys);
          state.give_back(sys, std::move(watch));
        }
      }
    } else {
      sys.sleep_for(pause);
    }
  }
}

}  // namespace tokenlock::detail
