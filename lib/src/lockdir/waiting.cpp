#include "lockdir/waiting.hpp"

#include "lockdir/token_name.hpp"
#include "wait/wait_backoff.hpp"
#include "wait/wait_look.hpp"
#include "wait/wait_place.hpp"
#include "wait/wait_watch.hpp"

namespace tokenlock::detail {

// What the waits of one lock object keep between them.
struct wait_state {
  watch_keeper watches;
  board_keeper boards;
};

std::shared_ptr<wait_state> make_wait_state() { return std::make_shared<wait_state>(); }

board_owners lock_board_site::owners(os& sys) const {
  std::shared_ptr<const open_dir> dir = current_dir(paths_);
  board_owners o;
  o.uid = dir ? dir->uid : sys.self().euid;
  if (dir) o.group = dir->group;
  return o;
}

namespace {

failure wait_failure(const lock_paths& paths, const lock_options& options, bool timed,
                     const lock_attempt& a) {
  if (timed)
    return make_failure(errc::timed_out,
                        describe("acquire", paths.dir,
                                 "timed out after " + std::to_string(options.wait.count()) +
                                     " ms; the lock is " + a.busy_reason(),
                                 {}));
  return make_failure(errc::busy, describe("acquire", paths.dir, "the lock is " + a.busy_reason(), {}));
}

// One wait for a lock: runs rounds of the protocol, and between them asks
// its parts when to look at the holder (look_policy), whether to sleep in
// the line of waiters (place_in_line), how long to pause (backoff,
// wait_budget) and whether a release may cut the pause short
// (release_watch).
class waiter {
 public:
  waiter(os& sys, const lock_paths& paths, const lock_options& options, wait_state& state,
         bool may_wait, lock_attempt& attempt)
      : sys_(sys),
        paths_(paths),
        options_(options),
        attempt_(attempt),
        budget_(sys.steady_now_us(), options, may_wait),
        delay_(options),
        looks_(budget_.waits() && options.queue_waiters),
        board_(paths),
        watch_(sys, state.watches, paths.dir, free_token, options.wake_on_release),
        line_(sys, options, state.boards, board_) {
    // A process that waited on this lock before still has its board; while
    // the line is hungry it joins the line instead of taking the fast path.
    skip_fast_path_ = budget_.waits() && options.queue_waiters &&
                      line_.hungry_line_ahead(sys.steady_now_us());
  }

  failure run(bool& busy);

 private:
  void sleep_in_line(std::uint32_t turn);
  void wait_between_rounds(std::chrono::microseconds pause, std::int64_t now);

  os& sys_;
  const lock_paths& paths_;
  const lock_options& options_;
  lock_attempt& attempt_;
  wait_budget budget_;
  backoff delay_;
  immediate_retries immediate_;
  look_policy looks_;
  bool seen_held_ = false;  // a look found a live holder: this waiter really waits
  bool skip_fast_path_ = false;
  lock_board_site board_;  // before the line, which refers to it
  // Declared before the line, so that the line is left (handing the head's
  // place on) before the watch goes back.
  release_watch watch_;
  place_in_line line_;
};

failure waiter::run(bool& busy) {
  busy = false;
  for (;;) {
    outcome r = outcome::busy;
    const bool look = looks_.due(sys_.steady_now_us(), budget_.deadline());
    if (skip_fast_path_)
      skip_fast_path_ = false;  // a hungry line: r stays busy, straight to the line
    else if (failure f = attempt_.attempt(r, look))
      return f;  // the protocol failed: nothing to wait for
    if (r == outcome::acquired) return {};  // ours
    if (look && r == outcome::busy) {
      if (!seen_held_ && sys_.random_u64() % leftover_sweep_every == 0)
        sweep_creation_leftovers(sys_, paths_, options_);
      seen_held_ = true;
    }
    // The lock moved under us: retry at once, a few times in a row.
    if (immediate_.retry_at_once(r == outcome::again)) continue;
    const std::int64_t now = sys_.steady_now_us();
    if (budget_.spent(now)) {  // out of time: this round's verdict stands
      // Unless no round has looked yet (the first defers its look): then
      // one more round looks, so that the verdict is about the lock as it
      // is (a directory not made yet is created, not reported busy).
      if (!looks_.has_looked()) continue;
      busy = true;
      return wait_failure(paths_, options_, budget_.waits(), attempt_);
    }
    std::chrono::microseconds pause = delay_.next(sys_.random_u64());
    // No line yet, and nobody to judge the holder for us: look now.
    if (!line_.join(seen_held_) && !looks_.has_looked()) continue;
    if (line_.usable()) {
      std::uint32_t turn = 0;
      if (!line_.claim_head(turn)) {  // someone else watches the lock: sleep
        sleep_in_line(turn);
        continue;
      }
      pause = line_.head_pause(now);  // we watch for the line
    }
    wait_between_rounds(pause, now);
  }
}

// Sleeps until the head's place is ours, or until it is time to look for
// ourselves.
void waiter::sleep_in_line(std::uint32_t turn) {
  watch_.put_away();  // only the head watches
  switch (line_.sleep(turn, budget_.deadline())) {
    case wait_line::place::handed_on:
      // The head that handed its place on took the lock (or judged its
      // holder while it looked). A shared waiter looks anyway: the head's
      // share may be one to join, and the next in line is woken only when
      // this one is done.
      if (attempt_.may_join_holders())
        looks_.look_next_round();
      else
        looks_.judged_by_head(sys_.steady_now_us());
      break;
    case wait_line::place::taken: break;
    case wait_line::place::none:
      // The deadline, or this sleeper's own look: a head that never hands
      // on (a board another boot or host wrote, or garbage) can delay it
      // this long and no longer.
      looks_.look_next_round();
      break;
  }
}

void waiter::wait_between_rounds(std::chrono::microseconds pause, std::int64_t now) {
  pause = budget_.cap(pause, now);
  watch_.wake_on(attempt_.wake_name());
  watch_.attach();
  watch_.pause(line_.poll_pause(pause, watch_.attached()));
}

}  // namespace

failure wait_for_lock(os& sys, const lock_paths& paths, const lock_options& options,
                      wait_state& state, bool may_wait, lock_attempt& a, bool& busy) {
  waiter w(sys, paths, options, state, may_wait, a);
  return w.run(busy);
}

}  // namespace tokenlock::detail
