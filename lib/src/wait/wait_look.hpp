// When a waiter looks at the lock's holder.
//
// Every round retries the fast-path rename (a lookup first, after the first
// round), but only a round that looks lists the lock directory and judges
// the holder: taking over a stale token, creating a missing directory, and
// naming the holder in the busy and timed_out messages. This part decides
// which rounds look; nothing else.
#pragma once

#include <cstdint>

namespace tokenlock::detail {

class look_policy {
 public:
  // A waiter retries the fast-path rename on every round but lists the
  // directory and judges the holder at most this often: under contention
  // the look (a listing, kill(2), /proc) costs ten system calls that compete
  // with the holder for the CPU, while a dead holder is still noticed well
  // within 100 ms. See docs/benchmarks.md.
  static constexpr std::int64_t interval_us = 10000;

  // `defer_first`: the waiter will line up, so its first round does not
  // look; a head of the line, if there is one, judges the holder anyway,
  // and a waiter that finds no line looks on its next round, at once.
  explicit look_policy(bool defer_first) noexcept : defer_first_(defer_first) {}

  // Whether the round that starts at `now_us` looks, and records it if so:
  // the first round unless deferred, then once per interval, and always the
  // last round before `deadline_us`, so that a verdict is never stale.
  bool due(std::int64_t now_us, std::int64_t deadline_us) noexcept;
  // Whether any round has looked yet (or a head looked for this waiter).
  bool has_looked() const noexcept { return looked_; }
  // The head that handed its place on to this waiter has just taken the
  // lock, or judged its holder while it watched: the holder needs judging
  // only an interval from `now_us`.
  void judged_by_head(std::int64_t now_us) noexcept;
  // The next round looks, whenever the last look was.
  void look_next_round() noexcept { last_ = 0; }

 private:
  bool defer_first_;
  bool looked_ = false;
  std::int64_t last_ = 0;
};

}  // namespace tokenlock::detail
