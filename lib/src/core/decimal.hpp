// The one parser of unsigned decimals for the names and files tokenlock
// reads and the numbers the command takes (token fields, counters, --by):
// public (tokenlock/decimal.hpp), and known here by its internal name.
#pragma once

#include "tokenlock/decimal.hpp"

namespace tokenlock::detail {

using tokenlock::parse_decimal;

}  // namespace tokenlock::detail
