// What a call on a lock threw: its code and message, or nothing.
#pragma once

#include <string>
#include <system_error>
#include <utility>

#include "tokenlock/errors.hpp"

namespace tokenlock::testing {

template <class F>
std::pair<std::error_code, std::string> error_of(F f) {
  try {
    f();
  } catch (const lock_error& e) {
    return {e.code(), e.what()};
  }
  return {};
}

}  // namespace tokenlock::testing
