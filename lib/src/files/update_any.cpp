// update_file, increment_counter and commit_file under any tokenlock::lock
// (tokenlock/update.hpp): a lock directory's through its token, as the
// rename_lock forms in update.cpp; a lock server's grant through the fence
// directory (fence_directory.hpp).
#include "tokenlock/update.hpp"

#include "files/fence_directory.hpp"
#include "files/update_impl.hpp"

namespace tokenlock {

using namespace detail;

namespace {

// The lock directory behind the interface, or null. A dynamic_cast rather
// than a virtual call on tokenlock::lock: how a commit is fenced is the
// file updater's business, not the lock's. A virtual would make every
// backend, and any lock a program derives itself, answer for file updates,
// and tie lock.hpp to the updater. Only the lock directory needs its
// concrete type (its options, its token's path); every other lock is
// reached through handle::fence() alone.
const rename_lock* lock_directory(const lock& l) noexcept {
  return dynamic_cast<const rename_lock*>(&l);
}

failure fenced_counter(const boost::filesystem::path& file, lock& l, std::uint64_t by,
                       const update_options& options, std::uint64_t& value) {
  return fenced_update(*system_os(), file, l, counter_step(file.string(), by, value), options,
                       counter_update_rules(options));
}

}  // namespace

update_result update_file(const boost::filesystem::path& target, lock& lock,
                          const update_function& fn, const update_options& options) {
  if (const rename_lock* dir = lock_directory(lock)) return update_file(target, *dir, fn, options);
  failure f = with_user_function(fn, [&](const compute_function& c) {
    return fenced_update(*system_os(), target, lock, c, options, update_read_rules(options));
  });
  if (f) throw_failure(f);
  return update_result{};
}

update_result update_file(const boost::filesystem::path& target, lock& lock,
                          const update_function& fn, const update_options& options,
                          std::error_code& ec) {
  if (const rename_lock* dir = lock_directory(lock))
    return update_file(target, *dir, fn, options, ec);
  with_user_function(fn, [&](const compute_function& c) {
    failure inner;
    run_noexcept(ec, [&] {
      inner = fenced_update(*system_os(), target, lock, c, options, update_read_rules(options));
      return inner;
    });
    return inner;
  });
  return update_result{};
}

std::uint64_t increment_counter(const boost::filesystem::path& file, lock& lock,
                                std::uint64_t by, const update_options& options) {
  if (const rename_lock* dir = lock_directory(lock))
    return increment_counter(file, *dir, by, options);
  std::uint64_t value = 0;
  run_throwing([&] { return fenced_counter(file, lock, by, options, value); });
  return value;
}

std::uint64_t increment_counter(const boost::filesystem::path& file, lock& lock,
                                std::uint64_t by, const update_options& options,
                                std::error_code& ec) noexcept {
  if (const rename_lock* dir = lock_directory(lock))
    return increment_counter(file, *dir, by, options, ec);
  std::uint64_t value = 0;
  run_noexcept(ec, [&] { return fenced_counter(file, lock, by, options, value); });
  // After dir_sync_failed the new value is committed: hand it out too.
  return !ec || ec == errc::dir_sync_failed ? value : 0;
}

void commit_file(const handle& lock, const boost::filesystem::path& target,
                 std::string_view contents, const write_options& options) {
  if (const lock_handle* dir = lock.as<lock_handle>())
    return commit_file(*dir, target, contents, options);
  run_throwing([&] { return fenced_commit_file(*system_os(), lock, target, contents, options); });
}

void commit_file(const handle& lock, const boost::filesystem::path& target,
                 std::string_view contents, const write_options& options,
                 std::error_code& ec) noexcept {
  if (const lock_handle* dir = lock.as<lock_handle>())
    return commit_file(*dir, target, contents, options, ec);
  run_noexcept(ec, [&] { return fenced_commit_file(*system_os(), lock, target, contents, options); });
}

}  // namespace tokenlock
