// The line of an etcd lock read as shared holders and writers see it
// (docs/etcd.md, Shared locks and semaphores). Every process puts one key
// under the lock's prefix; a writer's key is <lease id>, a shared holder's
// <lease id>.s<limit> (limit 0: readers without a limit; N: one of N
// slots). The keys in the order of their create revisions are the line:
//   - a writer holds when its key is the first;
//   - a shared holder holds when every key before it is shared with the
//     same limit, and, with slots N, fewer than N of them.
// So the holders are always a prefix of the line. Pure functions over keys
// already read: no requests here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "etcd/etcd_requests.hpp"

namespace tokenlock::detail {

// What a key in the line is. A key without a shared suffix this version
// reads is a writer's: an old client's, or one of a later form, which is
// waited for and never joined.
struct line_kind {
  enum kind_t { exclusive, shared } kind = exclusive;
  std::uint32_t limit = 0;  // shared: 0 (readers) or the number of slots
};

// ".s<limit>", the suffix of a shared holder's key after its lease id.
std::string shared_suffix(std::uint32_t limit);

// The kind of `key` from the part after `dir` (the lock's prefix).
line_kind kind_of(const std::string& dir, const std::string& key);

// Whether `k` may hold beside shared holders of `limit`.
inline bool joins(const line_kind& k, std::uint32_t limit) {
  return k.kind == line_kind::shared && k.limit == limit;
}

// How many keys at the head of `line` (in create revision order) hold
// the lock: 0 for an empty line, 1 for a writer first.
std::size_t holder_count(const std::string& dir, const std::vector<etcd_kv>& line);

// The first writer's key behind shared holders (it bars newcomers, which
// queue behind it); line.size() when none waits.
std::size_t waiting_writer(const std::string& dir, const std::vector<etcd_kv>& line);

// What a shared holder of `limit` does, from the keys before its own
// (`ahead`, in create revision order):
//   admitted        it holds;
//   blocker         watch ahead[key] until it is deleted: the nearest key
//                   that it may not hold beside (a writer, another limit);
//   first_waiter    a semaphore's first waiter behind N holders: any of
//                   them leaving admits it, so it watches the deletes of
//                   the whole prefix;
//   behind_waiter   a semaphore's later waiter: watch ahead[key], the
//                   waiter just before it, for any change (it is put again
//                   when it is granted, or deleted when it gives up).
struct shared_verdict {
  enum what_t { admitted, blocker, first_waiter, behind_waiter } what = admitted;
  std::size_t key = 0;
};
shared_verdict judge_shared(const std::string& dir, const std::vector<etcd_kv>& ahead,
                            std::uint32_t limit);

}  // namespace tokenlock::detail
