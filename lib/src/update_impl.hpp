// The updater's core, over a given OS, for the public functions and tests.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>

#include "atomic_write_impl.hpp"
#include "failure.hpp"
#include "file_writer.hpp"
#include "posix/os.hpp"
#include "tokenlock/keep_alive.hpp"
#include "tokenlock/update.hpp"

namespace tokenlock::detail {

// Computes the new contents from the current ones, or fails (nothing is
// then written).
using compute_function =
    std::function<failure(const std::optional<std::string>& current, std::string& next)>;

// `rules` bound the read of the target (null: update_read_rules(options));
// a counter's are counter_update_rules(options).
failure update_impl(os& sys, const boost::filesystem::path& target, const rename_lock& lock,
                    const compute_function& compute, const update_options& options,
                    update_result& result, const read_rules* rules = nullptr);

// After a commit (and the release): flushes the target's directory when
// options.write.sync asks for it; a failure is dir_sync_failed, saying the
// update is committed.
failure sync_after_commit(os& sys, const write_target& t, const update_options& options);

// Runs `compute`, refreshing the lease meanwhile when `keep` is set. A
// takeover during the computation fails the update before anything is
// written; other refresh errors are left to the commit's fence to judge.
template <class Handle>
failure compute_keeping(Handle& h, const write_target& t, const compute_function& compute,
                        const std::optional<std::string>& current, std::string& next,
                        bool keep) {
  if (!keep) return compute(current, next);
  std::error_code ec;
  keep_alive keeper(h, {}, ec);
  if (ec)
    return make_failure(ec, describe("keep the lease alive", t.path,
                                     keeper.last_message() + "; nothing was written", {}));
  failure f = compute(current, next);
  keeper.stop();
  if (f) return f;
  if (keeper.lost())
    return make_failure(errc::lock_lost,
                        describe("commit", t.path,
                                 "the lock was taken over while the update function ran (" +
                                     keeper.last_message() +
                                     "); nothing was written and the new owner's data is intact",
                                 {}));
  return {};
}

// The step of increment_counter: parses the counter (a missing file is 0),
// adds `by` (EOVERFLOW past 64 bits) and stores the new value in `out`.
compute_function counter_step(const std::string& path, std::uint64_t by, std::uint64_t& out);

// Runs an update whose function is the caller's: an exception it throws is
// carried past the lock's release and rethrown.
template <class Run>
failure with_user_function(const update_function& fn, Run run) {
  std::exception_ptr thrown;
  compute_function compute = [&](const std::optional<std::string>& current,
                                 std::string& next) -> failure {
    try {
      next = fn(current);
    } catch (...) {
      thrown = std::current_exception();
      return make_failure(errc::bad_argument, "tokenlock: the update function threw");
    }
    return {};
  };
  failure f = run(compute);
  if (thrown) std::rethrow_exception(thrown);
  return f;
}

// One unsigned 64-bit decimal and a newline, canonical (no sign, no leading
// zero); a missing file (std::nullopt) is no value. Anything else is
// corrupt_data.
failure parse_counter(const std::string& path, const std::optional<std::string>& text,
                      std::optional<std::uint64_t>& value);

}  // namespace tokenlock::detail
