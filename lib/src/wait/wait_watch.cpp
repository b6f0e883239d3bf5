#include "wait/wait_watch.hpp"

namespace tokenlock::detail {

std::unique_ptr<dir_watch> watch_keeper::take(os& sys, const std::string& dir) {
  std::unique_ptr<dir_watch> w;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (sys.steady_now_us() < poll_until_us_) return nullptr;
    // A watch inherited through fork is never reused: parent and child
    // would read one event queue.
    if (idle_ && fork_generation_ == sys.fork_generation()) w = std::move(idle_);
  }
  if (!w) w = sys.watch_directory(dir);
  if (w && !w->arm()) w.reset();
  return w;
}

void watch_keeper::give_back(os& sys, std::unique_ptr<dir_watch> w) {
  if (!w) return;
  w->disarm();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!idle_ || fork_generation_ != sys.fork_generation()) {
    idle_ = std::move(w);
    fork_generation_ = sys.fork_generation();
  }
}

void watch_keeper::saw_fast_releases(os& sys) {
  std::lock_guard<std::mutex> lock(mutex_);
  poll_until_us_ = sys.steady_now_us() + remember_fast_us;
}

bool fast_release_detector::woke(std::int64_t now) noexcept {
  quick_wakes_ = last_wake_ != 0 && now - last_wake_ < fast_release_us ? quick_wakes_ + 1 : 0;
  last_wake_ = now;
  return quick_wakes_ >= fast_release_wakes;
}

void release_watch::attach() {
  if (!wanted_ || tried_) return;
  tried_ = true;
  watch_ = keeper_.take(sys_, dir_);
}

void release_watch::put_away() {
  if (!watch_) return;
  keeper_.give_back(sys_, std::move(watch_));
  tried_ = false;
}

void release_watch::pause(std::chrono::microseconds pause) {
  if (!watch_) return sys_.sleep_for(pause);
  if (!watch_->wait_for(std::string(freed_), pause)) return;
  if (!releases_.woke(sys_.steady_now_us())) return;
  keeper_.saw_fast_releases(sys_);
  keeper_.give_back(sys_, std::move(watch_));
}

}  // namespace tokenlock::detail
