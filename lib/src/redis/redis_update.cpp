// update_file and increment_counter under a Redis lock, their commit fenced
// by the grant's fencing token through a fence directory beside the target
// (fence_directory.hpp; docs/redis.md, The file fence).
#include "fence_directory.hpp"
#include "tokenlock/keep_alive.hpp"
#include "tokenlock/redis_lock.hpp"

namespace tokenlock {

using namespace detail;

namespace {

failure redis_update_impl(os& sys, const boost::filesystem::path& target, redis_lock& lock,
                          const compute_function& compute, const update_options& options,
                          const read_rules& rules) {
  fenced_lock_steps<redis_lock, redis_handle> steps(sys, lock);
  return update_flow(sys, steps, target, compute, options, rules);
}

}  // namespace

update_result update_file(const boost::filesystem::path& target, redis_lock& lock,
                          const update_function& fn, const update_options& options) {
  failure f = with_user_function(fn, [&](const compute_function& c) {
    return redis_update_impl(*system_os(), target, lock, c, options, update_read_rules(options));
  });
  if (f) throw_failure(f);
  return update_result{};
}

update_result update_file(const boost::filesystem::path& target, redis_lock& lock,
                          const update_function& fn, const update_options& options,
                          std::error_code& ec) {
  with_user_function(fn, [&](const compute_function& c) {
    failure inner;
    run_noexcept(ec, [&] {
      inner = redis_update_impl(*system_os(), target, lock, c, options, update_read_rules(options));
      return inner;
    });
    return inner;
  });
  return update_result{};
}

std::uint64_t increment_counter(const boost::filesystem::path& file, redis_lock& lock,
                                std::uint64_t by, const update_options& options) {
  std::uint64_t value = 0;
  run_throwing([&] {
    return redis_update_impl(*system_os(), file, lock, counter_step(file.string(), by, value),
                             options, counter_update_rules(options));
  });
  return value;
}

std::uint64_t increment_counter(const boost::filesystem::path& file, redis_lock& lock,
                                std::uint64_t by, const update_options& options,
                                std::error_code& ec) noexcept {
  std::uint64_t value = 0;
  run_noexcept(ec, [&] {
    return redis_update_impl(*system_os(), file, lock, counter_step(file.string(), by, value),
                             options, counter_update_rules(options));
  });
  return !ec || ec == errc::dir_sync_failed ? value : 0;
}

}  // namespace tokenlock
