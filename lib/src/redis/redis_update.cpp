// update_file and increment_counter under a Redis lock, their commit fenced
// by the grant's fencing token through a fence directory beside the target
// (fence_directory.hpp; docs/redis.md, The file fence).
#include "files/fence_directory.hpp"
#include "tokenlock/redis_lock.hpp"

namespace tokenlock {

using updates = detail::fenced_update<redis_lock, redis_handle>;

update_result update_file(const boost::filesystem::path& target, redis_lock& lock,
                          const update_function& fn, const update_options& options) {
  return updates::file(target, lock, fn, options);
}

update_result update_file(const boost::filesystem::path& target, redis_lock& lock,
                          const update_function& fn, const update_options& options,
                          std::error_code& ec) {
  return updates::file(target, lock, fn, options, ec);
}

std::uint64_t increment_counter(const boost::filesystem::path& file, redis_lock& lock,
                                std::uint64_t by, const update_options& options) {
  return updates::counter(file, lock, by, options);
}

std::uint64_t increment_counter(const boost::filesystem::path& file, redis_lock& lock,
                                std::uint64_t by, const update_options& options,
                                std::error_code& ec) noexcept {
  return updates::counter(file, lock, by, options, ec);
}

}  // namespace tokenlock
