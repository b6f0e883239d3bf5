// Bytes that come from outside (what a lock server holds, a name that goes
// into a key) made fit for a one-line message.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tokenlock::detail {

// Control bytes, bytes from 0x7f on and the backslash as \xNN, so that the
// text is one line and says exactly what is there; cut after `limit` bytes.
std::string escaped(std::string_view s, std::size_t limit = 64);

// escaped(s, limit), and when s is longer, "... (N bytes)" after it: a
// hostile value can neither break a message's line nor make it huge.
std::string shown_bytes(std::string_view s, std::size_t limit = 64);

}  // namespace tokenlock::detail
