// Wording shared by the doctor's checks and the clock judgement.
#pragma once

#include <chrono>
#include <string>

namespace tokenlock::detail {

// A duration in seconds, with at most three decimals and no trailing
// zeros: "1 s", "0.25 s", "0.004 s" (as the command prints its options).
std::string seconds_text(std::chrono::microseconds d);

}  // namespace tokenlock::detail
