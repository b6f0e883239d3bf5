#include "etcd/etcd_line.hpp"

#include "tokenlock/lock_options.hpp"

namespace tokenlock::detail {

std::string shared_suffix(std::uint32_t limit) { return ".s" + std::to_string(limit); }

line_kind kind_of(const std::string& dir, const std::string& key) {
  line_kind k;
  if (key.size() <= dir.size()) return k;
  const std::string rest = key.substr(dir.size());
  const std::size_t at = rest.rfind(".s");
  if (at == std::string::npos || at == 0) return k;
  const std::string digits = rest.substr(at + 2);
  // Written as std::to_string writes it: no sign, no leading zero, no
  // more digits than max_slots has. Anything else is not ours to join.
  if (digits.empty() || digits.size() > 6 || (digits.size() > 1 && digits[0] == '0')) return k;
  std::uint32_t limit = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return k;
    limit = limit * 10 + static_cast<std::uint32_t>(c - '0');
  }
  if (limit > max_slots) return k;
  k.kind = line_kind::shared;
  k.limit = limit;
  return k;
}

std::size_t holder_count(const std::string& dir, const std::vector<etcd_kv>& line) {
  if (line.empty()) return 0;
  const line_kind first = kind_of(dir, line[0].key);
  if (first.kind == line_kind::exclusive) return 1;
  std::size_t n = 1;
  while (n < line.size() && (first.limit == 0 || n < first.limit) &&
         joins(kind_of(dir, line[n].key), first.limit))
    ++n;
  return n;
}

std::size_t waiting_writer(const std::string& dir, const std::vector<etcd_kv>& line) {
  const std::size_t held = holder_count(dir, line);
  if (held == 0 || kind_of(dir, line[0].key).kind == line_kind::exclusive) return line.size();
  for (std::size_t i = held; i < line.size(); ++i)
    if (kind_of(dir, line[i].key).kind == line_kind::exclusive) return i;
  return line.size();
}

shared_verdict judge_shared(const std::string& dir, const std::vector<etcd_kv>& ahead,
                            std::uint32_t limit) {
  for (std::size_t i = ahead.size(); i-- > 0;)
    if (!joins(kind_of(dir, ahead[i].key), limit)) return {shared_verdict::blocker, i};
  const std::size_t n = ahead.size();
  if (limit == 0 || n < limit) return {shared_verdict::admitted, 0};
  if (n == limit) return {shared_verdict::first_waiter, 0};
  return {shared_verdict::behind_waiter, n - 1};
}

}  // namespace tokenlock::detail
