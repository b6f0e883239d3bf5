// The updater's core, over a given OS, for the public functions and tests.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "failure.hpp"
#include "posix/os.hpp"
#include "tokenlock/update.hpp"

namespace tokenlock::detail {

// Computes the new contents from the current ones, or fails (nothing is
// then written).
using compute_function =
    std::function<failure(const std::optional<std::string>& current, std::string& next)>;

failure update_impl(os& sys, const boost::filesystem::path& target, const rename_lock& lock,
                    const compute_function& compute, const update_options& options,
                    update_result& result);

// One unsigned 64-bit decimal and a newline, canonical (no sign, no leading
// zero); a missing file (std::nullopt) is no value. Anything else is
// corrupt_data.
failure parse_counter(const std::string& path, const std::optional<std::string>& text,
                      std::optional<std::uint64_t>& value);

}  // namespace tokenlock::detail
