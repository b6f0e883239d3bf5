// What install_signal_cleanup()'s handler acts on: held tokens (their
// owner marks removed, then renamed back to lockfile) and temporary files
// (removed). Registering does nothing, and costs one atomic load, until the
// cleanup is installed.
#pragma once

#include <string>

namespace tokenlock::detail {

// A slot number, or -1 when not installed, full, or the path is too long.
// `mark`: the token's owner mark (token_mark.hpp), removed before the
// rename; empty when it has none.
int cleanup_track_token(const std::string& token_path, const std::string& free_path,
                        const std::string& mark = {}) noexcept;
int cleanup_track_file(const std::string& path) noexcept;
void cleanup_untrack(int slot) noexcept;  // -1: nothing
// How many slots are in use (for tests: a slot that outlives its token or
// file is a leak that would fill the table and turn tracking off silently).
int cleanup_tracked_count() noexcept;

// A tracked temporary file: untracked when it goes away.
class cleanup_entry {
 public:
  cleanup_entry() noexcept = default;
  explicit cleanup_entry(int slot) noexcept : slot_(slot) {}
  cleanup_entry(cleanup_entry&& o) noexcept : slot_(o.slot_) { o.slot_ = -1; }
  cleanup_entry& operator=(cleanup_entry&& o) noexcept {
    if (this != &o) {
      reset();
      slot_ = o.slot_;
      o.slot_ = -1;
    }
    return *this;
  }
  cleanup_entry(const cleanup_entry&) = delete;
  cleanup_entry& operator=(const cleanup_entry&) = delete;
  ~cleanup_entry() { reset(); }
  void reset() noexcept {
    cleanup_untrack(slot_);
    slot_ = -1;
  }
  int release() noexcept {  // hands the slot to the caller
    const int s = slot_;
    slot_ = -1;
    return s;
  }

 private:
  int slot_ = -1;
};

}  // namespace tokenlock::detail
