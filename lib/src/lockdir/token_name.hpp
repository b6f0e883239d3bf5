// The token name grammar of docs/protocol.md:
//
//   free:  lockfile
//   held:  lockfile.<expiry>.<host>-<hash8>.<pid>.<start>.<nonce>
//   legacy: lockfile<seconds>
//     seconds decimal seconds since the Unix epoch when a script using the
//             widely deployed rename lock took it, 1-12 digits, no leading
//             zero: held, judged by its age alone (docs/protocol.md,
//             Legacy tokens)
//   owner mark, inside a held token (token_mark.hpp):
//          h.<expiry>.<host>-<hash8>.<pid>.<start>.<nonce>
//     expiry  decimal microseconds since the Unix epoch, 1-19 digits, no
//             leading zero, at most INT64_MAX
//     host    1-32 of [A-Za-z0-9_-] (the sanitised host name)
//     hash8   8 lowercase hex digits (boot id, pid namespace, host name)
//     pid     decimal 1..2147483647, no leading zero
//     start   decimal process start time in clock ticks since boot, 1-20
//             digits, 0 when unknown
//     nonce   16 lowercase hex digits, unique per acquisition
//
// Parsing is strict so that a name either is exactly what some tokenlock
// wrote or is reported as corrupt: a lenient parser could judge a foreign
// name stale and take over something that was never a token.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tokenlock::detail {

inline constexpr std::string_view free_token = "lockfile";
inline constexpr std::string_view held_prefix = "lockfile.";
// Every name of the token, for a directory watch (dir_watch::wait_for).
inline constexpr std::string_view any_token = "lockfile*";

struct held_token {
  // For a legacy token: when it was taken (its seconds, in microseconds);
  // it names no owner, so the other fields stay empty.
  std::int64_t expiry_us = 0;
  std::string_view host_tag;  // "<host>-<hash8>", points into the parsed name
  int pid = 0;
  std::uint64_t start_time = 0;
  std::uint64_t nonce = 0;
};

enum class name_kind {
  free,       // "lockfile"
  held,       // a well-formed held token
  legacy,     // "lockfile<seconds>": held by a script using the legacy rename lock
  malformed,  // starts with "lockfile." but breaks the grammar
  other,      // anything else: not part of the protocol
};

// Classifies a directory entry name; fills `out` for held and legacy tokens.
name_kind classify_name(std::string_view name, held_token* out = nullptr) noexcept;

// "lockfile.<expiry>.<host_tag>.<pid>.<start>.<nonce as 16 hex>", built in
// one allocation: it is on the fast path.
std::string make_token(std::int64_t expiry_us, std::string_view host_tag, int pid,
                       std::uint64_t start_time, std::uint64_t nonce);

// The part of a held token after its expiry ("<host_tag>.<pid>.<start>.<nonce>"),
// which stays the same for the life of one acquisition.
std::string_view owner_part(std::string_view held_token_name) noexcept;

// "lockfile.<expiry>.<owner_part>": the token name for a new lease.
std::string with_expiry(std::string_view owner_part, std::int64_t expiry_us);

inline constexpr std::string_view mark_prefix = "h.";

// "h.<token without lockfile.>": the owner mark of a held token.
std::string owner_mark_name(std::string_view held_token_name);

// The held token an owner mark stands for ("h.X" -> "lockfile.X"), and
// whether `name` is a well-formed mark at all (empty when not).
std::string token_of_mark(std::string_view name);

}  // namespace tokenlock::detail
