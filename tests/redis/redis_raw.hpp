// Raw commands to a test's redis-server through a client of the test's own
// (hiredis, over the server's unix socket), bytes as they are: for planting
// values the lock never writes.
#pragma once

#include <string>
#include <vector>

#include "redis_server.hpp"

namespace tokenlock::testing {

// Runs one command (AUTH first when `password` is not empty) and returns
// its reply: a string as it is, an integer in decimal, "(nil)", an array
// as its elements joined by newlines, an error as "(error) <text>".
// Throws when the server cannot be reached.
std::string raw(const redis_server& server, const std::vector<std::string>& args,
                const std::string& password = {});

}  // namespace tokenlock::testing
