#include "lockdir/shared_name.hpp"

#include <cstdio>

namespace tokenlock::detail {
namespace {

constexpr std::uint64_t mode_floor = 10'000'000'000'000'000'000ULL;  // 10^19
constexpr std::uint64_t start12_bound = 1'000'000'000'000ULL;        // 10^12

std::uint64_t start12_of(std::uint64_t start_time) {
  return start_time < start12_bound ? start_time : 0;
}

}  // namespace

bool read_shared(const observed_token& token, shared_token& out) noexcept {
  if (token.legacy || token.start_time < mode_floor) return false;
  // 1 K LLLLLL SSSSSSSSSSSS: the leading 1 is what makes it >= 10^19.
  const std::uint64_t rest = token.start_time - mode_floor;
  out.start12 = rest % start12_bound;
  out.limit = static_cast<std::uint32_t>((rest / start12_bound) % 1'000'000);
  const std::uint64_t kind = rest / (start12_bound * 1'000'000);
  out.kind = kind <= 2 ? static_cast<share_kind>(kind) : share_kind::reserved;
  return true;
}

std::string flipped_tag(std::string_view host_tag) {
  std::string s(host_tag);
  if (s.size() < 9) return s;
  static const char hex[] = "0123456789abcdef";
  for (std::size_t i = s.size() - 8; i < s.size(); ++i) {
    const char c = s[i];
    const int v = c >= 'a' ? c - 'a' + 10 : c - '0';
    s[i] = hex[(~v) & 0xf];
  }
  return s;
}

std::string make_shared_name(std::int64_t expiry_us, std::string_view host_tag, int pid,
                             share_kind kind, std::uint32_t limit, std::uint64_t start_time,
                             std::uint64_t nonce) {
  const std::uint64_t mode = mode_floor +
                             static_cast<std::uint64_t>(kind) * start12_bound * 1'000'000 +
                             static_cast<std::uint64_t>(limit) * start12_bound +
                             start12_of(start_time);
  return make_token(expiry_us, flipped_tag(host_tag), pid, mode, nonce);
}

std::string make_entry_name(std::int64_t expiry_us, std::string_view host_tag, int pid,
                            std::uint64_t start_time, std::uint64_t nonce) {
  std::string t = make_token(expiry_us, host_tag, pid, start_time, nonce);
  return std::string(entry_prefix) + t.substr(held_prefix.size());
}

std::string copy_of_lone(const observed_token& lone, std::uint64_t maker) {
  shared_token s;
  read_shared(lone, s);
  held_token t;
  classify_name(lone.name, &t);
  const std::uint64_t nonce = (t.nonce & 0xffffffff00000000ULL) | (maker & 0xffffffffULL);
  return make_entry_name(lone.expiry_us, flipped_tag(lone.host_tag), lone.pid, s.start12, nonce);
}

bool is_copy_of(const std::string& name, const observed_token& lone) {
  observed_token e;
  if (!read_entry(name, e)) return false;
  shared_token s;
  held_token lone_t, entry_t;
  if (!read_shared(lone, s) || classify_name(lone.name, &lone_t) != name_kind::held) return false;
  classify_name(std::string(held_prefix) + name.substr(entry_prefix.size()), &entry_t);
  return e.expiry_us == lone.expiry_us && e.host_tag == flipped_tag(lone.host_tag) &&
         e.pid == lone.pid && e.start_time == s.start12 &&
         (entry_t.nonce >> 32) == (lone_t.nonce >> 32);
}

std::string hand_over_name(const observed_token& draining) {
  shared_token s;
  read_shared(draining, s);
  held_token t;
  classify_name(draining.name, &t);
  return make_token(draining.expiry_us, flipped_tag(draining.host_tag), draining.pid, s.start12,
                    t.nonce);
}

bool read_entry(const std::string& name, observed_token& out) {
  if (name.compare(0, entry_prefix.size(), entry_prefix) != 0) return false;
  std::string as_token = std::string(held_prefix) + name.substr(entry_prefix.size());
  held_token t;
  if (classify_name(as_token, &t) != name_kind::held) return false;
  out = observed(as_token, t, name_kind::held);
  out.name = name;
  return true;
}

}  // namespace tokenlock::detail
