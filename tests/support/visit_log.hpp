// The log of lock_worker's visit mode, checked after the run: who held the
// lock beside whom, in the one order O_APPEND gave the lines.
//
// Workers append "E KIND PID I" once they hold and "L KIND PID I" before
// they release (so a logged stay lies inside the real one, and an overlap
// in the log is a real overlap), "X PID I" when that turn's release or
// commit found the lock lost (its lease ended: others may have entered
// legitimately, so the turn is not judged), "C VALUE" for a committed
// counter value. The parent appends "D PID" once it killed and reaped a
// worker (a stay open then ends there) and "S PID" when it stops one (the
// stay is judged until the stop only: a stop may outlast the lease).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tokenlock::testing {

struct visit_report {
  std::vector<std::string> violations;  // empty: every promise held
  int most_writers = 0, most_readers = 0, most_slots = 0;  // most inside at once
  long writes = 0, reads = 0, slot_turns = 0;              // judged turns
  long lost = 0;                                           // turns not judged
  std::vector<std::uint64_t> committed;                    // every "C VALUE"
};

// Reads the log at `path` and checks: a writer never beside anybody; a
// reader never beside a writer or a slot holder; never more than `slots`
// slot holders (0: no slot holders expected).
visit_report check_visit_log(const std::string& path, unsigned slots);

// Appends one line to the log (the parent's "D PID" and "S PID").
void note_in_visit_log(const std::string& path, const std::string& line);

}  // namespace tokenlock::testing
