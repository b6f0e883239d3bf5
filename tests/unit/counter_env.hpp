// counter.cgi's configuration from an environment a test writes.
#pragma once

#include <map>
#include <string>

#include "counter_app.hpp"

namespace counter::testing {

// load_config with `env` as the whole environment.
inline bool configured(const std::map<std::string, std::string>& env, config& c,
                       std::string& error) {
  return load_config(
      [&](const char* name) -> const char* {
        const auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      c, error);
}

}  // namespace counter::testing
