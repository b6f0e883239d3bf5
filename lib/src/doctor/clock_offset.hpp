// The clock offset estimate of <tokenlock/clock.hpp> over the OS seam, so
// that tests can play the file server's clock and inject faults.
#pragma once

#include <string>
#include <string_view>

#include "core/failure.hpp"
#include "posix/os.hpp"
#include "tokenlock/clock.hpp"

namespace tokenlock::detail {

// The probe file is "<prefix><16 hex digits>": a dot file, so listings by
// people skip it, and nothing else tokenlock makes or sweeps starts so.
inline constexpr std::string_view clock_probe_prefix = ".tokenlock-clock.";

// Fills `out`; on failure leaves no probe file behind (or names it in the
// message when even its removal failed).
failure estimate_clock_offset(os& sys, const std::string& dir, const clock_offset_options& options,
                              clock_offset& out);

}  // namespace tokenlock::detail
