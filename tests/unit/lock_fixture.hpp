// What the tests of the rename-token lock and of its waiting share: a lock
// directory in a temporary directory, processes played by fake_os in one
// fake_world, and readers of what a played process did.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>

#include <boost/filesystem.hpp>

#include "fake_os.hpp"
#include "temp_dir.hpp"
#include "lockdir/token_name.hpp"
#include "tokenlock/tokenlock.hpp"
#include "with_os.hpp"

namespace tokenlock::testing {

inline constexpr const char* other_host = "elsewhere-12345678";

class RenameLockTest : public ::testing::Test {
 protected:
  temp_dir tmp;
  boost::filesystem::path dir = tmp / "data.lock";
  std::shared_ptr<fake_world> world = std::make_shared<fake_world>();

  std::shared_ptr<fake_os> process(int pid, const std::string& host = "testhost-0000abcd") {
    return std::make_shared<fake_os>(world, pid, 5000 + static_cast<std::uint64_t>(pid), host);
  }
  static lock_options options(std::chrono::milliseconds lease = std::chrono::seconds(10),
                              std::chrono::milliseconds wait = std::chrono::milliseconds(0)) {
    lock_options o;
    o.lease = lease;
    o.wait = wait;
    o.skew_allowance = std::chrono::milliseconds(100);
    return o;
  }
  rename_lock lock_for(const std::shared_ptr<fake_os>& p, lock_options o = options()) {
    return tokenlock::detail::with_os::lock(dir, o, p);
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (auto& e : boost::filesystem::directory_iterator(dir))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  // Entries beside the lock directory that creation may leave behind.
  std::vector<std::string> init_leftovers() const {
    std::vector<std::string> out;
    for (auto& e : boost::filesystem::directory_iterator(tmp.path()))
      if (e.path().filename().string().find(".init.") != std::string::npos)
        out.push_back(e.path().string());
    return out;
  }
  std::string token_name(std::int64_t expiry_us, const std::string& host, int pid,
                         std::uint64_t start, std::uint64_t nonce = 0x1234) {
    return tokenlock::detail::make_token(expiry_us, host, pid, start, nonce);
  }
  void plant(const std::string& name) { boost::filesystem::create_directories(dir / name); }
};

// What a throwing call threw: its code and message (empty when it did not).
struct caught {
  std::error_code code;
  std::string message;
};

template <class F>
caught catch_of(F f) {
  try {
    f();
  } catch (const lock_error& e) {
    return {e.code(), e.what()};
  }
  return {};
}

template <class F>
std::error_code code_of(F f) {
  return catch_of(f).code;
}

template <class F>
std::string message_of(F f) {
  return catch_of(f).message;
}

// The durations (µs) a played process slept, in order.
inline std::vector<long> sleeps_of(const fake_os& p) {
  std::vector<long> out;
  for (auto& c : p.calls)
    if (c.rfind("sleep_for ", 0) == 0) out.push_back(std::stol(c.substr(10)));
  return out;
}

// How many calls a played process made that start with `prefix`.
inline int count_calls(const fake_os& p, const std::string& prefix) {
  int n = 0;
  for (auto& c : p.calls) n += c.rfind(prefix, 0) == 0;
  return n;
}

inline int count_exact_calls(const fake_os& p, const std::string& call) {
  return static_cast<int>(std::count(p.calls.begin(), p.calls.end(), call));
}

}  // namespace tokenlock::testing
