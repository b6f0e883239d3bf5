// Shared holders and semaphores on a lock directory (docs/protocol.md,
// Shared locks and semaphores), and what a writer does when it finds them.
// rename_lock.cpp keeps the exclusive lock; it calls in here for a shared
// acquisition, for a shared handle's release and refresh, and when its
// writer's look finds a shared name.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/failure.hpp"
#include "lockdir/lock_core.hpp"
#include "lockdir/shared_name.hpp"
#include "tokenlock/lock.hpp"
#include "tokenlock/rename_lock.hpp"

namespace tokenlock::detail {

// Acquires a share (options.mode shared, or options.slots > 0), waiting up
// to the budget when `may_wait`; `busy` as for the exclusive acquire.
failure acquire_shared(const std::shared_ptr<const lock_core>& core, const lock_options& options,
                       bool may_wait, lock_handle& out, bool& busy);

// A shared handle's release and refresh (lock_handle::release, refresh).
failure release_shared(lock_handle& h);
failure refresh_shared(lock_handle& h, std::chrono::milliseconds lease);

// A handle for the share named `id`: a lone share's token name (converted
// since or not) or a member's entry name "s.<...>". lock_lost when no such
// share is held now.
failure adopt_shared(const std::shared_ptr<const lock_core>& core, const lock_options& options,
                     const std::string& id, lock_handle& out);

// A holder_info row for the token (or share entry) `t`, judged as `j`.
holder_info holder_row(const boost::filesystem::path& dir, const observed_token& t,
                       const judgement& j, const lock_options& options);

// Every holder of the lock directory open as `d` (null: missing).
failure list_holders(os& sys, const lock_paths& paths, const open_dir* d,
                     const lock_options& options, std::vector<holder_info>& out);

// Breaks the share named `id` (a member's entry, or a converted lone
// share's copies: removed; the last one out frees the cover). For an
// operator who knows its holder is gone.
failure break_share(const std::shared_ptr<const lock_core>& core, const lock_options& options,
                    const std::string& id);

// What a writer does when its look finds a shared name, and its mark while
// it waits (docs/protocol.md, A writer).
class writer_marks {
 public:
  writer_marks(os& sys, const lock_paths& paths, const lock_options& options) noexcept
      : sys_(sys), paths_(paths), options_(options) {}
  void owner(int pid, std::uint64_t start) noexcept {
    pid_ = pid;
    start_ = start;
  }
  // A writer that will not wait (one attempt) does not mark: it would bar
  // readers only to take its mark back at once.
  void may_mark(bool yes) noexcept { may_mark_ = yes; }

  struct step {
    enum { wait, again, took } what = wait;
    std::string reason;      // wait: who holds
    std::string taken_from;  // took: the name our token was renamed from
  };
  // On the shared name `seen` (read as `s`): marks it, takes it when no
  // share in it is live, or waits. `token`: our exclusive token's name, to
  // rename an empty cover to.
  failure meet(const open_dir& d, const observed_token& seen, const shared_token& s,
               const std::string& token, step& out);
  // Whether `name` is the token our mark was handed over as.
  bool handed_over(const std::string& name) const;
  bool marking() const noexcept { return !mark_.empty(); }
  // At the end of a wait: our mark is taken back (unmarked). Sets `held`
  // to the hand-over's name when the lock became ours meanwhile.
  failure give_up(std::string& held);

 private:
  failure meet_own_mark(const open_dir& d, const observed_token& seen, const shared_token& s,
                        const std::string& token, step& out);
  failure mark(const open_dir& d, const observed_token& seen, const shared_token& s, step& out);
  // Removes the stale share entries of the token `name` (another writer's
  // mark that we wait behind).
  failure remove_stale(const open_dir& d, const std::string& name);
  failure rename_to_mark(const open_dir& d, int tok, const observed_token& seen,
                         const shared_token& s, const std::string& copy, step& out);
  // Whether `seen` is our draining cover, whatever its expiry.
  bool own_mark(const observed_token& seen) const;

  os& sys_;
  const lock_paths& paths_;
  const lock_options& options_;
  int pid_ = 0;
  std::uint64_t start_ = 0;
  std::string mark_;              // our draining cover's name, while we have one
  std::uint64_t mark_nonce_ = 0;  // the nonce it (and the hand-over) carries
  std::int64_t mark_renewed_us_ = 0;
  bool may_mark_ = true;
};

}  // namespace tokenlock::detail
