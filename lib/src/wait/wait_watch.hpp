// Whether a waiter's pause is a sleep or a watch on the lock directory that
// a release cuts short (lock_options::wake_on_release; inotify on Linux).
//
// Three rules keep the watch from costing more than it gains
// (docs/protocol.md, Waiting):
//   - it is armed only while its waiter waits: an armed watch queues an
//     event for every rename in the directory, and the holder pays for that;
//   - the instance is kept, disarmed, between waits (closing one waits for
//     a kernel grace period), and never reused across fork;
//   - when releases follow each other very fast, the lock cycles through
//     near-empty critical sections: the waiter then polls, and the lock
//     remembers that for a while.
// The wake-up is never relied on alone: every pause is bounded by the
// backoff (wait_backoff.hpp), since NFS sends no events and events can be
// missed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "posix/os.hpp"

namespace tokenlock::detail {

// What the waits of one lock object keep between them: one idle watch, and
// how long the lock is remembered to cycle fast. Thread-safe.
class watch_keeper {
 public:
  // How long a lock seen cycling fast is polled from the start of a wait,
  // instead of each wait paying a few wake-ups to find that out again.
  static constexpr std::int64_t remember_fast_us = 100000;

  // An armed watch on `dir`, or nullptr: none available, or the lock was
  // seen cycling fast within remember_fast_us.
  std::unique_ptr<dir_watch> take(os& sys, const std::string& dir);
  // Disarms `w` and keeps it for the next wait (unless one is kept already
  // from this side of a fork).
  void give_back(os& sys, std::unique_ptr<dir_watch> w);
  void saw_fast_releases(os& sys);

 private:
  std::mutex mutex_;
  std::unique_ptr<dir_watch> idle_;
  std::uint64_t fork_generation_ = 0;
  std::int64_t poll_until_us_ = 0;  // steady clock
};

// Whether the releases that woke a waiter come fast enough to poll instead:
// waking every waiter on each release of a lock that cycles through short
// critical sections costs the holder more than prompt hand-offs gain.
class fast_release_detector {
 public:
  // Critical sections of 1 ms release a thousand times slower than this;
  // empty ones ten times faster (docs/benchmarks.md).
  static constexpr std::int64_t fast_release_us = 200;
  static constexpr int fast_release_wakes = 3;

  // A release woke the waiter at `now_us`. True once this many wake-ups in
  // a row each followed the one before within fast_release_us.
  bool woke(std::int64_t now_us) noexcept;

 private:
  int quick_wakes_ = 0;
  std::int64_t last_wake_ = 0;
};

// One wait's use of the watch: taken the first time it pauses, put away
// while the waiter sleeps in the line (only the head watches), given up for
// polling once releases come fast, and given back when the wait ends.
class release_watch {
 public:
  // `freed`: the name that appears in `dir` when the lock is released;
  // `wanted`: lock_options::wake_on_release.
  release_watch(os& sys, watch_keeper& keeper, const std::string& dir, std::string_view freed,
                bool wanted) noexcept
      : sys_(sys), keeper_(keeper), dir_(dir), freed_(freed), wanted_(wanted) {}
  ~release_watch() { keeper_.give_back(sys_, std::move(watch_)); }
  release_watch(const release_watch&) = delete;
  release_watch& operator=(const release_watch&) = delete;

  // Takes the watch, once per wait (again only after put_away).
  void attach();
  bool attached() const noexcept { return watch_ != nullptr; }
  // Gives the watch back while the waiter sleeps in the line; the next
  // attach takes it again.
  void put_away();
  // Waits `pause`, or until a release if watching.
  void pause(std::chrono::microseconds pause);
  // What a release is from now on: the free name, or a prefix and '*' for
  // a waiter that any rename of the lock's token may admit (a shared
  // holder, a writer waiting for its hand-over).
  void wake_on(std::string_view name) noexcept { freed_ = name; }

 private:
  os& sys_;
  watch_keeper& keeper_;
  const std::string& dir_;
  std::string_view freed_;
  bool wanted_;
  bool tried_ = false;
  std::unique_ptr<dir_watch> watch_;
  fast_release_detector releases_;
};

}  // namespace tokenlock::detail
