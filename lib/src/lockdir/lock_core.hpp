// What a rename_lock and its handles share, kept out of the public header
// (tokenlock/rename_lock.hpp names it only as an opaque type).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <boost/filesystem/path.hpp>

#include "lockdir/lock_directory.hpp"
#include "posix/os.hpp"
#include "tokenlock/rename_lock.hpp"
#include "lockdir/waiting.hpp"

namespace tokenlock::detail {

// One lock object's state, shared by its copies and by the handles it gave
// out. Immutable once made, except what its members guard themselves.
struct lock_core {
  std::shared_ptr<os> sys;
  // The strings the fast path renames between, built once; null when the
  // directory's name is unusable (acquire then reports why).
  std::shared_ptr<const lock_paths> paths;
  // What waits keep between them: the directory watch waiters reuse
  // (creating and closing one per wait costs milliseconds in the kernel)
  // and the mapped wait board. Thread-safe.
  std::shared_ptr<wait_state> waits;
};

// The library's way into rename_lock and lock_handle, without widening
// their public interface.
struct lock_access {
  static std::shared_ptr<const lock_core> make_core(const boost::filesystem::path& dir,
                                                    const lock_options& options,
                                                    std::shared_ptr<os> sys);
  // A rename_lock whose system calls go through `sys` (tests: with_os.hpp).
  static rename_lock with_os(boost::filesystem::path dir, lock_options options,
                             std::shared_ptr<os> sys);

  // Fills a handle for a token just acquired, adopted or taken over.
  static void fill(lock_handle& h, std::shared_ptr<const lock_core> core, std::string token,
                   std::string token_path, std::int64_t expiry_us,
                   std::chrono::milliseconds lease);
  // The owner mark the signal cleanup removes with the token, if any.
  static std::string mark_of(const lock_handle& h);
  static bool marked(const lock_handle& h);
  static const lock_core* core_of(const lock_handle& h) { return h.core_.get(); }

  // A shared handle (shared_lock.cpp): its share is `name`, a lone share's
  // token name or a member's entry "s.<...>".
  static void fill_shared(lock_handle& h, std::shared_ptr<const lock_core> core, std::string name,
                          std::int64_t expiry_us, std::chrono::milliseconds lease,
                          std::uint32_t slots);
  // Moves a shared handle to its share's new name (a refresh, a conversion).
  static void move_share(lock_handle& h, std::string name, std::int64_t expiry_us,
                         std::chrono::milliseconds lease);
  static const std::shared_ptr<const lock_core>& core(const lock_handle& h) { return h.core_; }
  static std::int64_t expiry_us(const lock_handle& h) { return h.expiry_us_; }
  static std::uint32_t slots(const lock_handle& h) { return h.slots_; }
  static bool forked(const lock_handle& h);
  static void forget(lock_handle& h) { h.forget(); }
};

}  // namespace tokenlock::detail
