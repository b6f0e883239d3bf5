// The names of shared holders (docs/protocol.md, Shared locks and
// semaphores): a token name whose start field is a 20-digit mode, and the
// share entries "s.<...>" inside the token directory.
//
//   shared  = "lockfile." expiry "." host "-" stag "." pid "." mode "." nonce
//   stag    = hash8 XOR 0xffffffff (8 lowercase hex digits)
//   mode    = "1" kind limit start12          (20 digits)
//   kind    = 0 lone share | 1 group cover | 2 draining cover (3-8 reserved)
//   limit   = 6 digits: 000000 for readers, else the slot count
//   start12 = 12 digits: the named process's start time, 0 when unknown
//   entry   = "s." expiry "." host "-" hash8 "." pid "." start "." nonce
//
// Every shared name is a held token of the exclusive grammar (token_name.hpp),
// so an implementation that knows only that one sees a held token of a
// foreign host (stag is never anybody's hash8 on its own host) and judges
// it by its lease alone.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lockdir/lock_directory.hpp"

namespace tokenlock::detail {

enum class share_kind { lone = 0, group = 1, draining = 2, reserved = 3 };

// A held token's name read as a shared name.
struct shared_token {
  share_kind kind = share_kind::lone;
  std::uint32_t limit = 0;
  std::uint64_t start12 = 0;
};

// Whether the observed held token is a shared name, and its fields.
bool read_shared(const observed_token& token, shared_token& out) noexcept;

// The host tag with its hash flipped (the shared names' tag): "h-0000ffff" <->
// "h-ffff0000". Its own inverse.
std::string flipped_tag(std::string_view host_tag);

// A shared name for a holder of `host_tag` (the real one; flipped here).
std::string make_shared_name(std::int64_t expiry_us, std::string_view host_tag, int pid,
                             share_kind kind, std::uint32_t limit, std::uint64_t start_time,
                             std::uint64_t nonce);

inline constexpr std::string_view entry_prefix = "s.";

// "s.<expiry>.<host_tag>.<pid>.<start>.<nonce>": a group member's entry.
std::string make_entry_name(std::int64_t expiry_us, std::string_view host_tag, int pid,
                            std::uint64_t start_time, std::uint64_t nonce);

// A copy of the lone share `lone`: the entry a converter (or a marking
// writer) makes for the lone holder, with the lone share's expiry, real
// host tag, pid and start time, and a nonce whose upper half is the lone
// share's and whose lower half is `maker`'s: one name per maker, so that
// a maker that loses the race removes exactly its own.
std::string copy_of_lone(const observed_token& lone, std::uint64_t maker);

// Whether the entry `name` is a copy of the lone share `lone` (any maker's).
bool is_copy_of(const std::string& name, const observed_token& lone);

// Whether `name` is a lone share's token name ("lockfile.") rather than a
// member's entry ("s.").
inline bool is_lone_name(const std::string& name) {
  return name.compare(0, held_prefix.size(), held_prefix) == 0;
}

// The exclusive token a draining cover is handed over as: the cover's
// expiry, the waiting writer's real host tag, pid, start time and nonce.
std::string hand_over_name(const observed_token& draining);

// An entry name read as a token ("s.X" as "lockfile.X"); false when it breaks
// the grammar.
bool read_entry(const std::string& name, observed_token& out);

}  // namespace tokenlock::detail
