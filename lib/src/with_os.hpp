// The public objects over another OS seam (posix/os.hpp): what tests use to
// inject faults, drive the clocks and play several processes. Kept out of
// the installed headers, so that the public interface has no test hooks.
#pragma once

#include <memory>

#include <boost/filesystem/path.hpp>

#include "files/atomic_write_impl.hpp"
#include "lockdir/lock_core.hpp"
#include "posix/os.hpp"
#include "tokenlock/atomic_write.hpp"
#include "tokenlock/rename_lock.hpp"

namespace tokenlock::detail {

struct with_os {
  // A rename_lock whose system calls go through `os`.
  static rename_lock lock(boost::filesystem::path dir, lock_options options,
                          std::shared_ptr<os> sys) {
    return lock_access::with_os(std::move(dir), std::move(options), std::move(sys));
  }
  // An atomic_file whose system calls go through `os`; throws as the public
  // constructor does.
  static atomic_file file(const boost::filesystem::path& target, const write_options& options,
                          std::shared_ptr<os> sys) {
    return file_access::with_os(target, options, std::move(sys));
  }
};

}  // namespace tokenlock::detail
