#include "etcd/etcd_requests.hpp"

namespace tokenlock::detail {

namespace {

failure unexpected(const etcd_client& c, const char* step, const char* what) {
  return make_failure(std::make_error_code(std::errc::protocol_error),
                      "tokenlock: " + std::string(step) + " " + c.server() +
                          ": the answer does not hold " + what + ": is this etcd 3.4 or newer?");
}

// Reads an answer with `read` (false: a field is missing). Fields of the
// wrong JSON type (a string where a number or a boolean is due, an object
// where an array is) make nlohmann throw: the same protocol_error, never
// an exception that would skip giving a lease back.
template <class Read>
failure reading(const etcd_client& c, const char* step, const char* what, Read&& read) {
  try {
    if (read()) return {};
  } catch (const json::exception&) {
  }
  return unexpected(c, step, what);
}

bool read_kv(const json& j, etcd_kv& kv) {
  if (!j.is_object() || !base64_decode(j.value("key", std::string()), kv.key) ||
      !base64_decode(j.value("value", std::string()), kv.value))
    return false;
  kv.create_revision = json_int(j, "create_revision");
  kv.lease = json_int(j, "lease");
  return !kv.key.empty() && kv.create_revision > 0;
}

// Every kv of a range answer, in its order.
bool all_kvs(const json& range, std::vector<etcd_kv>& kvs) {
  kvs.clear();
  if (!range.is_object()) return false;
  if (!range.contains("kvs")) return true;  // empty: omitted
  const json& arr = range["kvs"];
  if (!arr.is_array()) return false;
  for (const json& j : arr) {
    kvs.emplace_back();
    if (!read_kv(j, kvs.back())) return false;
  }
  return true;
}

// The first kv of a range answer (found = false when none).
bool first_kv(const json& range, etcd_kv& kv, bool& found) {
  std::vector<etcd_kv> kvs;
  if (!all_kvs(range, kvs)) return false;
  found = !kvs.empty();
  if (found) kv = std::move(kvs[0]);
  return true;
}

// The keys of `dir` in create revision order; at most `limit` (0: all),
// none created after `max_create` when it is given.
json range_request(const std::string& dir, const char* order, long long max_create = 0,
                   std::size_t limit = 1) {
  json r{{"key", base64_encode(dir)},
         {"range_end", base64_encode(prefix_end(dir))},
         {"sort_order", order},
         {"sort_target", "CREATE"}};
  if (limit > 0) r["limit"] = std::to_string(limit);
  if (max_create > 0) r["max_create_revision"] = std::to_string(max_create);
  return r;
}

}  // namespace

std::string prefix_end(std::string prefix) {
  while (!prefix.empty()) {
    auto& b = reinterpret_cast<unsigned char&>(prefix.back());
    if (b < 0xff) {
      ++b;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

failure lease_grant(etcd_client& c, long long ttl_s, long long& id, long long& granted_s) {
  json out;
  if (failure f = c.call("acquire", "/v3/lease/grant", json{{"TTL", std::to_string(ttl_s)}}, out))
    return f;
  return reading(c, "acquire", "a lease ID and TTL", [&] {
    id = json_int(out, "ID");
    granted_s = json_int(out, "TTL");
    return id != 0 && granted_s > 0;
  });
}

failure lease_keepalive(etcd_client& c, const char* step, long long id, long long& ttl_s) {
  json out;
  if (failure f = c.call(step, "/v3/lease/keepalive", json{{"ID", std::to_string(id)}}, out))
    return f;
  return reading(c, step, "a TTL", [&] {
    ttl_s = json_int(out.contains("result") ? out["result"] : out, "TTL");
    return true;
  });
}

failure lease_revoke(etcd_client& c, const char* step, long long id, bool& gone) {
  json out;
  gone = false;
  return c.call(step, "/v3/lease/revoke", json{{"ID", std::to_string(id)}}, out, &gone);
}

failure lease_ttl(etcd_client& c, const char* step, long long id, long long& ttl_s,
                  long long& granted_s) {
  json out;
  if (failure f = c.call(step, "/v3/lease/timetolive", json{{"ID", std::to_string(id)}}, out))
    return f;
  return reading(c, step, "a TTL", [&] {
    ttl_s = out.contains("TTL") ? json_int(out, "TTL") : -1;
    granted_s = json_int(out, "grantedTTL");
    return true;
  });
}

failure put_if_absent(etcd_client& c, const std::string& key, const std::string& value,
                      long long lease, const std::string& dir, bool& created,
                      long long& revision, etcd_kv& first, bool& has_first) {
  std::vector<etcd_kv> line;
  if (failure f = put_if_absent(c, key, value, lease, dir, 1, created, revision, line)) return f;
  has_first = !line.empty();
  if (has_first) first = std::move(line[0]);
  return {};
}

failure put_if_absent(etcd_client& c, const std::string& key, const std::string& value,
                      long long lease, const std::string& dir, std::size_t limit, bool& created,
                      long long& revision, std::vector<etcd_kv>& line) {
  const std::string k = base64_encode(key);
  const json txn{
      {"compare",
       json::array({{{"key", k}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}}})},
      {"success",
       json::array({{{"request_put",
                      {{"key", k}, {"value", base64_encode(value)}, {"lease", std::to_string(lease)}}}},
                    {{"request_range", range_request(dir, "ASCEND", 0, limit)}}})}};
  json out;
  if (failure f = c.call("acquire", "/v3/kv/txn", txn, out)) return f;
  return reading(c, "acquire", "the put and the range of the Txn", [&] {
    created = out.value("succeeded", false);
    revision = json_int(out.value("header", json::object()), "revision");
    if (!created) return true;
    const json& responses = out.contains("responses") ? out["responses"] : json();
    return responses.is_array() && responses.size() == 2 && revision > 0 &&
           all_kvs(responses[1].value("response_range", json::object()), line);
  });
}

failure predecessor(etcd_client& c, const std::string& dir, long long below,
                    const std::string& own_key, etcd_kv& pred, bool& found, etcd_kv& mine,
                    bool& ours, long long& revision, const lease_move* move) {
  const json ranges = json::array({{{"request_range", range_request(dir, "DESCEND", below - 1)}},
                                   {{"request_range", {{"key", base64_encode(own_key)}}}}});
  json txn{{"success", ranges}};
  if (move) {
    // Every key of the line created at our revision or later (ours first),
    // and ours still there: then ours goes onto the holder's lease in the
    // same round trip; otherwise the ranges, as without it.
    const std::string k = base64_encode(own_key);
    txn = json{{"compare", json::array({{{"key", base64_encode(dir)},
                                         {"range_end", base64_encode(prefix_end(dir))},
                                         {"target", "CREATE"},
                                         {"result", "GREATER"},
                                         {"create_revision", std::to_string(below - 1)}},
                                        {{"key", k},
                                         {"target", "CREATE"},
                                         {"result", "EQUAL"},
                                         {"create_revision", std::to_string(below)}}})},
               {"success", json::array({{{"request_put",
                                          {{"key", k},
                                           {"value", base64_encode(move->value)},
                                           {"lease", std::to_string(move->lease)}}}}})},
               {"failure", ranges}};
  }
  json out;
  if (failure f = c.call("acquire", "/v3/kv/txn", txn, out)) return f;
  return reading(c, "acquire", "the keys waiting before ours, and ours", [&] {
    revision = json_int(out.value("header", json::object()), "revision");
    if (move && out.value("succeeded", false)) {
      found = false;
      ours = true;
      mine.key = own_key;
      mine.create_revision = below;
      mine.lease = move->lease;
      return revision > 0;
    }
    const json& responses = out.contains("responses") ? out["responses"] : json();
    return responses.is_array() && responses.size() == 2 && revision > 0 &&
           first_kv(responses[0].value("response_range", json::object()), pred, found) &&
           first_kv(responses[1].value("response_range", json::object()), mine, ours);
  });
}

failure first_key(etcd_client& c, const char* step, const std::string& dir, etcd_kv& first,
                  bool& found) {
  json out;
  if (failure f = c.call(step, "/v3/kv/range", range_request(dir, "ASCEND"), out)) return f;
  return reading(c, step, "the lock's first key", [&] { return first_kv(out, first, found); });
}

failure line_keys(etcd_client& c, const char* step, const std::string& dir,
                  std::vector<etcd_kv>& line) {
  json out;
  if (failure f = c.call(step, "/v3/kv/range", range_request(dir, "ASCEND", 0, 0), out)) return f;
  return reading(c, step, "the lock's keys", [&] { return all_kvs(out, line); });
}

failure keys_ahead(etcd_client& c, const std::string& dir, long long below,
                   const std::string& own_key, std::vector<etcd_kv>& ahead, etcd_kv& mine,
                   bool& ours, long long& revision) {
  const json txn{
      {"success", json::array({{{"request_range", range_request(dir, "ASCEND", below - 1, 0)}},
                               {{"request_range", {{"key", base64_encode(own_key)}}}}})}};
  json out;
  if (failure f = c.call("acquire", "/v3/kv/txn", txn, out)) return f;
  return reading(c, "acquire", "the keys waiting before ours, and ours", [&] {
    revision = json_int(out.value("header", json::object()), "revision");
    const json& responses = out.contains("responses") ? out["responses"] : json();
    return responses.is_array() && responses.size() == 2 && revision > 0 &&
           all_kvs(responses[0].value("response_range", json::object()), ahead) &&
           first_kv(responses[1].value("response_range", json::object()), mine, ours);
  });
}

failure get_key(etcd_client& c, const char* step, const std::string& key, etcd_kv& kv, bool& found) {
  json out;
  if (failure f = c.call(step, "/v3/kv/range", json{{"key", base64_encode(key)}}, out)) return f;
  return reading(c, step, "the key", [&] { return first_kv(out, kv, found); });
}

failure delete_if_revision(etcd_client& c, const char* step, const std::string& key,
                           long long revision, bool& deleted) {
  const std::string k = base64_encode(key);
  const json txn{{"compare", json::array({{{"key", k},
                                           {"target", "CREATE"},
                                           {"result", "EQUAL"},
                                           {"create_revision", std::to_string(revision)}}})},
                 {"success", json::array({{{"request_delete_range", {{"key", k}}}}})}};
  json out;
  if (failure f = c.call(step, "/v3/kv/txn", txn, out)) return f;
  return reading(c, step, "whether the delete succeeded", [&] {
    deleted = out.value("succeeded", false);
    return true;
  });
}

failure move_to_lease(etcd_client& c, const std::string& key, long long revision,
                      const std::string& value, long long lease, bool& moved) {
  const std::string k = base64_encode(key);
  const json txn{{"compare", json::array({{{"key", k},
                                           {"target", "CREATE"},
                                           {"result", "EQUAL"},
                                           {"create_revision", std::to_string(revision)}}})},
                 {"success", json::array({{{"request_put",
                                            {{"key", k},
                                             {"value", base64_encode(value)},
                                             {"lease", std::to_string(lease)}}}}})}};
  json out;
  if (failure f = c.call("acquire", "/v3/kv/txn", txn, out)) return f;
  return reading(c, "acquire", "whether the put succeeded", [&] {
    moved = out.value("succeeded", false);
    return true;
  });
}

}  // namespace tokenlock::detail
