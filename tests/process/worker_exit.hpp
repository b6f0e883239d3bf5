// How a lock_worker process ended, as the process tests require it.
#pragma once

#include <string>

#include <sys/wait.h>

#include <gtest/gtest.h>

namespace tokenlock::testing {

// Ended by itself with status 0. Exit 3 is lock_worker's canary or counter
// check: two holders were inside at once, or the counter moved under a
// reader.
inline void expect_clean_exit(int status, const std::string& what) {
  ASSERT_TRUE(WIFEXITED(status)) << what << ": killed by signal " << WTERMSIG(status);
  ASSERT_NE(WEXITSTATUS(status), 3)
      << what << ": two holders were inside at once, or the counter moved under a reader";
  ASSERT_EQ(WEXITSTATUS(status), 0) << what;
}

}  // namespace tokenlock::testing
