// What the multi-process workers share: the start barrier on fd 3, the
// canary file that finds two holders at once, and a counter file updated
// in place under the lock (so that a lost update shows).
#pragma once

#include <string>

namespace tokenlock::testing {

// Blocks until the parent opens the start barrier (fd 3 reaches EOF).
void wait_for_barrier();

// Creates `canary` with O_EXCL and our pid in it. False on a violation:
// somebody alive is inside (reported on stderr as "<who>[pid]: CANARY
// VIOLATION: pid N is inside too"); a canary left by a killed holder is
// removed and taken. Other errors end the process with status 2.
bool enter_canary(const std::string& canary, const char* who);

// The 20-digit counter at the start of `fd` (0 when empty), and writing it
// back; errors end the process with status 2.
unsigned long long read_counter(int fd, const char* who);
void write_counter(int fd, unsigned long long v, const char* who);

}  // namespace tokenlock::testing
