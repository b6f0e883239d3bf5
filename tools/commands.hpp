// The tokenlock subcommands. Each takes the arguments after its name and
// returns the process's exit status.
#pragma once

#include <string>
#include <vector>

namespace tokenlock::cli {

using args = std::vector<std::string>;

int cmd_run(const args& a);
int cmd_acquire(const args& a);
int cmd_release(const args& a);
int cmd_refresh(const args& a);
int cmd_status(const args& a);
int cmd_break(const args& a);
int cmd_write(const args& a);
int cmd_commit(const args& a);
int cmd_incr(const args& a);
int cmd_doctor(const args& a);

}  // namespace tokenlock::cli
