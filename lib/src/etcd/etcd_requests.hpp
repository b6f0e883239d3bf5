// The etcd requests the lock makes, one function each (docs/etcd.md,
// Requests). Every one returns a failure that names the step.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "etcd/etcd_client.hpp"

namespace tokenlock::detail {

// A key as the lock reads it from a range answer.
struct etcd_kv {
  std::string key, value;
  long long create_revision = 0;
  long long lease = 0;
};

// /v3/lease/grant: a new lease of `ttl_s` seconds; `granted_s` is the TTL
// etcd gave (more when below its minimum).
failure lease_grant(etcd_client& c, long long ttl_s, long long& id, long long& granted_s);
// /v3/lease/keepalive: `ttl_s` is the new TTL, 0 when the lease is gone.
failure lease_keepalive(etcd_client& c, const char* step, long long id, long long& ttl_s);
// /v3/lease/revoke: `gone` when there was no such lease (expired).
failure lease_revoke(etcd_client& c, const char* step, long long id, bool& gone);
// /v3/lease/timetolive: the remaining TTL (-1: gone) and the TTL granted.
failure lease_ttl(etcd_client& c, const char* step, long long id, long long& ttl_s,
                  long long& granted_s);

// One Txn: put `key` = `value` attached to `lease` only if absent, and
// read the first key of `dir` by create revision. `created` false when
// the key existed; `revision` is our key's create revision.
failure put_if_absent(etcd_client& c, const std::string& key, const std::string& value,
                      long long lease, const std::string& dir, bool& created,
                      long long& revision, etcd_kv& first, bool& has_first);
// The same, reading the first `limit` keys of the line (0: all of it:
// nothing created after our key can be in it yet).
failure put_if_absent(etcd_client& c, const std::string& key, const std::string& value,
                      long long lease, const std::string& dir, std::size_t limit, bool& created,
                      long long& revision, std::vector<etcd_kv>& line);

// In one read-only Txn (linearizable, as a range is): the key of `dir`
// with the largest create revision below `below` (none: found = false),
// and `own_key` itself (absent: ours = false); `revision` is the store's
// revision of the answer. One round trip where two ranges took two: a
// woken waiter learns at once whether it holds the lock.
//
// With `move`: when no key is ahead of ours, the same Txn also puts our
// key onto `move->lease` (found = false; a waiter on its own short lease
// goes back to the holder's lease without a round trip more).
struct lease_move {
  std::string value;
  long long lease = 0;
};
failure predecessor(etcd_client& c, const std::string& dir, long long below,
                    const std::string& own_key, etcd_kv& pred, bool& found, etcd_kv& mine,
                    bool& ours, long long& revision, const lease_move* move = nullptr);
// The first key of `dir` by create revision.
failure first_key(etcd_client& c, const char* step, const std::string& dir, etcd_kv& first,
                  bool& found);
// Every key of `dir`, in create revision order.
failure line_keys(etcd_client& c, const char* step, const std::string& dir,
                  std::vector<etcd_kv>& line);
// In one read-only Txn: every key of `dir` created before `below`, in
// create revision order, and `own_key` itself (absent: ours = false);
// `revision` is the store's revision of the answer.
failure keys_ahead(etcd_client& c, const std::string& dir, long long below,
                   const std::string& own_key, std::vector<etcd_kv>& ahead, etcd_kv& mine,
                   bool& ours, long long& revision);
// The key itself (found = false when absent).
failure get_key(etcd_client& c, const char* step, const std::string& key, etcd_kv& kv, bool& found);
// One Txn: delete `key` if its create revision is `revision`.
failure delete_if_revision(etcd_client& c, const char* step, const std::string& key,
                           long long revision, bool& deleted);

// One Txn: put `key` = `value` attached to `lease`, if its create revision
// is `revision`: the key keeps its create revision (its place in line)
// under another lease. `moved` false when the key is gone.
failure move_to_lease(etcd_client& c, const std::string& key, long long revision,
                      const std::string& value, long long lease, bool& moved);

// The end of the range of keys that start with `prefix`.
std::string prefix_end(std::string prefix);

}  // namespace tokenlock::detail
