#include "wait/wait_line.hpp"

#include <algorithm>

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

// The beat is a wrapping millisecond count of the steady clock of whoever
// wrote it; the difference, read as signed, is right for 24 days either
// way. A beat ahead of our clock was not written by a live head on this
// boot of this host (the board outlived a reboot, or another host's
// client wrote it over a network filesystem): it is as stale as an old
// one, or such a board would hold its sleepers for the difference.
std::int32_t age_of(std::uint32_t now, std::uint32_t beat) noexcept {
  return static_cast<std::int32_t>(now - beat);
}
bool stale_beat(std::uint32_t now, std::uint32_t beat, std::int64_t stale_ms) noexcept {
  const std::int32_t age = age_of(now, beat);
  return age > stale_ms || age < -stale_ms;
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
  const bool stale = stale_beat(now, load(beat), stale_ms_);
  if (h == id_) {
    head_ = true;
  } else if (h == 0 || stale) {
    // The beat before the place: a waiter that sees us at the head must
    // not find the old head's stale beat beside us and take the place
    // again. If someone else wins the place, the beat is fresh for it.
    store(beat, now);
    head_ = exchange_if(head, h, id_);
  } else {
    head_ = false;
  }
  if (head_) store(beat, now);
  return head_;
}

wait_line::place wait_line::wait_for_place(std::uint32_t turn, std::int64_t deadline_us) noexcept {
  if (!board_) return place::none;
  const std::uint32_t first = turn;
  for (;;) {
    const std::int64_t left = deadline_us - sys_.steady_now_us();
    if (left <= 0) return place::none;
    // Until the head's beat would be stale, and a millisecond more: at most
    // twice stale_after, for a beat up to stale_after in the future.
    const std::int32_t age = age_of(now_ms(), load(board_->word(beat_word)));
    const std::int64_t nap_ms =
        std::max<std::int64_t>(1, std::min<std::int64_t>(stale_ms_, stale_ms_ - age) + 1);
    board_->wait(turn_word, turn, std::chrono::microseconds(std::min(left, nap_ms * 1000)));
    if (claim_head(turn)) return turn != first ? place::handed_on : place::taken;
  }
}

void wait_line::mark_hungry() noexcept {
  if (board_ && head_) store(board_->word(hungry_word), 1);
}

bool wait_line::hungry(wait_board& board, std::uint32_t now_ms, std::int64_t stale_ms) noexcept {
  return load(board.word(hungry_word)) != 0 && load(board.word(head_word)) != 0 &&
         !stale_beat(now_ms, load(board.word(beat_word)), stale_ms);
}

void wait_line::leave() noexcept {
  if (!board_ || !head_) return;
  head_ = false;
  // Only a head can be hungry; the next head starts with patience. If a
  // waiter replaced us as stale, the mark is its own to clear.
  if (load(board_->word(head_word)) == id_) store(board_->word(hungry_word), 0);
  // Only while the place is still ours: a waiter that replaced us as
  // stale already watches.
  if (!exchange_if(board_->word(head_word), id_, 0)) return;
  __atomic_fetch_add(board_->word(turn_word), 1, __ATOMIC_ACQ_REL);
  board_->wake_one(turn_word);
}

}  // namespace tokenlock::detail
