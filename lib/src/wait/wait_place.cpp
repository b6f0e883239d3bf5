#include "wait/wait_place.hpp"

#include <algorithm>

namespace tokenlock::detail {

std::chrono::milliseconds stale_head_after(const lock_options& o) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(2 * o.backoff_max) +
         std::chrono::milliseconds(10);
}

std::chrono::milliseconds sleeper_look_interval(const lock_options& o) {
  return 4 * stale_head_after(o);
}

std::shared_ptr<wait_board> board_keeper::mapped() {
  std::lock_guard<std::mutex> lock(mutex_);
  drop_broken_board();
  return board_;
}

void board_keeper::drop_broken_board() {
  if (board_ && !board_->intact()) {
    board_.reset();
    settled_ = false;
  }
}

std::shared_ptr<wait_board> board_keeper::board_for(os& sys, const board_site& site,
                                                     bool create, bool& settled) {
  std::lock_guard<std::mutex> lock(mutex_);
  drop_broken_board();
  if (!settled_) {
    std::unique_ptr<wait_board> b;
    std::error_code ec = sys.open_wait_board(site.board_path(), site.dir_mode() & 0666, create,
                                             site.owners(sys), b);
    if (!ec && b && board_is_usable(*b)) board_ = std::move(b);
    settled_ = create || ec != std::errc::no_such_file_or_directory;
  }
  settled = settled_;
  return board_;
}

bool place_in_line::hungry_line_ahead(std::int64_t now_us) {
  std::shared_ptr<wait_board> b = boards_.mapped();
  return b && wait_line::hungry(*b, static_cast<std::uint32_t>(now_us / 1000),
                                stale_head_after(options_).count());
}

bool place_in_line::join(bool create) {
  if (!options_.queue_waiters || line_) return true;
  bool settled = false;
  std::shared_ptr<wait_board> b =
      boards_.board_for(sys_, site_, create, settled);
  if (!b && !settled) return false;
  line_.emplace(sys_, std::move(b), stale_head_after(options_));
  return true;
}

std::chrono::microseconds place_in_line::head_pause(std::int64_t now_us) {
  if (!head_delay_) {
    head_delay_.emplace(options_);
    head_since_ = now_us;
  }
  const std::chrono::microseconds pause = head_delay_->next(sys_.random_u64());
  if (now_us - head_since_ >= head_patience_us) {
    line_->mark_hungry();
    hungry_ = true;
  }
  return pause;
}

std::chrono::microseconds place_in_line::poll_pause(std::chrono::microseconds pause,
                                                    bool watching) const {
  if (hungry_ && !watching) return std::min<std::chrono::microseconds>(pause, options_.backoff_min);
  return pause;
}

wait_line::place place_in_line::sleep(std::uint32_t turn, std::int64_t deadline_us) {
  // A sleeper is no head: if it heads the line again, it starts afresh.
  head_delay_.reset();
  hungry_ = false;
  const std::int64_t look_by =
      sys_.steady_now_us() +
      std::chrono::duration_cast<std::chrono::microseconds>(sleeper_look_interval(options_)).count();
  return line_->wait_for_place(turn, std::min(deadline_us, look_by));
}

}  // namespace tokenlock::detail
