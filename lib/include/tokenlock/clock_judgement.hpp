// tokenlock/clock_judgement.hpp — what a measured clock offset means for
// leases, in words.
//
// Purpose
//   estimate_clock_offset() (clock.hpp) measures how far this host's clock
//   is from the file server's, within an uncertainty. judge_clock_offset()
//   compares that with a skew allowance (lock_options::skew_allowance) and
//   says, for a person, whether leases written by other hosts can be judged
//   safely here, and what to do when they cannot. `tokenlock status` and
//   the doctor (doctor.hpp) report the clock so. seconds_text() words a
//   duration as those sentences do (and as the library's messages about
//   leases do), for a program that prints its own lines beside them.
//
// Calling sequence
//     const tokenlock::clock_offset c = tokenlock::estimate_clock_offset(dir);
//     const tokenlock::clock_judgement j =
//         tokenlock::judge_clock_offset(c, tokenlock::lock_options{}.skew_allowance);
//     if (j.verdict != tokenlock::clock_verdict::within) warn(j.text, j.fix);
//
// Errors
//   None: a pure function of its arguments (std::bad_alloc aside).
//
// Thread safety
//   Safe from any thread.
#pragma once

#include <chrono>
#include <string>

#include "tokenlock/clock.hpp"

namespace tokenlock {

// within: certainly inside the allowance; beyond: certainly outside it, so
// leases from other hosts cannot be judged safely; unclear: the measurement
// is too coarse to tell.
enum class clock_verdict { within, beyond, unclear };

struct clock_judgement {
  clock_verdict verdict = clock_verdict::within;
  std::string text;  // one sentence, no final period
  std::string fix;   // empty when within
};

clock_judgement judge_clock_offset(const clock_offset& c, std::chrono::microseconds allowance);

// A duration as the judgement words it, rounded to the millisecond, with
// no trailing zeros: "1 s", "0.25 s", "-0.004 s". For lines a program
// prints beside a judgement's text (the command's Redis messages do).
std::string seconds_text(std::chrono::microseconds d);

}  // namespace tokenlock
