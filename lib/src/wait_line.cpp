#include "wait_line.hpp"

namespace tokenlock::detail {
namespace {

// The board is memory shared with other processes: plain C++ atomics cannot
// be placed on it, so the GCC/Clang builtins act on the words directly.
std::uint32_t load(std::uint32_t* w) noexcept { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }
void store(std::uint32_t* w, std::uint32_t v) noexcept { __atomic_store_n(w, v, __ATOMIC_RELEASE); }
bool exchange_if(std::uint32_t* w, std::uint32_t expected, std::uint32_t desired) noexcept {
  return __atomic_compare_exchange_n(w, &expected, desired, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE);
}

}  // namespace

bool board_is_usable(wait_board& board) noexcept {
  std::uint32_t* magic = board.word(wait_line::magic_word);
  exchange_if(magic, 0, wait_line::board_magic);
  return load(magic) == wait_line::board_magic;
}

wait_line::wait_line(os& sys, std::shared_ptr<wait_board> board,
                     std::chrono::milliseconds stale_after)
    : sys_(sys), board_(std::move(board)), stale_ms_(stale_after.count()) {
  // 0 means "no head"; any other value names this waiter only.
  while (board_ && id_ == 0) id_ = static_cast<std::uint32_t>(sys_.random_u64());
}

wait_line::~wait_line() { leave(); }

std::uint32_t wait_line::now_ms() noexcept {
  return static_cast<std::uint32_t>(sys_.steady_now_us() / 1000);
}

bool wait_line::claim_head(std::uint32_t& turn) noexcept {
  if (!board_) return false;
  std::uint32_t* head = board_->word(head_word);
  std::uint32_t* beat = board_->word(beat_word);
  turn = load(board_->word(turn_word));
  const std::uint32_t now = now_ms();
  const std::uint32_t h = load(head);
  // The beat is a wrapping millisecond count; the difference, read as
  // signed, is right for 24 days either way.
  const bool stale = static_cast<std::int32_t>(now - load(beat)) > stale_ms_;
  head_ = h == id_ || ((h == 0 || stale) && exchange_if(head, h, id_));
  if (head_) store(beat, now);
  return head_;
}

void wait_line::sleep(std::uint32_t turn, std::chrono::microseconds timeout) noexcept {
  if (board_) board_->wait(turn_word, turn, timeout);
}

void wait_line::leave() noexcept {
  if (!board_ || !head_) return;
  head_ = false;
  // Only while the place is still ours: a waiter that replaced us as
  // stale already watches.
  if (!exchange_if(board_->word(head_word), id_, 0)) return;
  __atomic_fetch_add(board_->word(turn_word), 1, __ATOMIC_ACQ_REL);
  board_->wake_one(turn_word);
}

}  // namespace tokenlock::detail
