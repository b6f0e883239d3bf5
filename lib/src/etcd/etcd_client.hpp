// A client of etcd's JSON gateway (/v3/... over HTTP/1.1) through the
// lock's HTTP client (etcd/http_client.hpp, on Boost.Beast): one kept-alive
// connection per member; requests go to the member that last answered and
// fail over to the next when it cannot be reached or has no leader; the
// auth token (user and password) is fetched once and again when it expires.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "etcd/etcd_answer.hpp"
#include "etcd/etcd_url.hpp"
#include "core/failure.hpp"

namespace tokenlock::detail {

class http_connection;

std::string base64_encode(const std::string& in);
bool base64_decode(const std::string& in, std::string& out);

class etcd_client {
 public:
  etcd_client(etcd_url url, std::chrono::milliseconds connect_timeout,
              std::chrono::milliseconds command_timeout);
  ~etcd_client();
  etcd_client(const etcd_client&) = delete;
  etcd_client& operator=(const etcd_client&) = delete;

  // POSTs `body` to `path` ("/v3/kv/txn") and parses the answer into
  // `out`. Tries every member in turn (from the one that last answered),
  // and again while a member says it has no leader, up to a deadline of
  // command_timeout per member. A gRPC error in the answer becomes
  // server_error (or not_found_out = true for code 5, NotFound, when
  // not_found_out is given: a lease that is gone).
  failure call(const char* step, const char* path, const json& body, json& out,
               bool* not_found_out = nullptr);

  // Watches `key` from revision `from_rev` until it is deleted (deleted =
  // true), or `timeout` passes (deleted = false). A watch that etcd
  // cancels (compaction) also sets deleted: the caller looks again.
  failure wait_delete(const std::string& key, long long from_rev,
                      std::chrono::milliseconds timeout, bool& deleted);

  // What a watch waits for: a delete of `key`, or of any key from `key` up
  // to `range_end` when it is given; with `puts`, a put too.
  struct watch_target {
    std::string key, range_end;
    bool puts = false;
  };
  // wait_delete for `target`: `deleted` says that such an event came.
  failure wait_change(const watch_target& target, long long from_rev,
                      std::chrono::milliseconds timeout, bool& deleted);

  // "etcd://host:port,..." without credentials.
  const std::string& server() const noexcept { return display_; }
  std::chrono::milliseconds command_timeout() const noexcept { return command_timeout_; }

  // A descriptor that ends every request at once when it becomes readable
  // (posix::stop_signal_watch::fd()): the request then fails with
  // std::errc::interrupted and goes to no other member. -1: none.
  void set_wake_fd(int fd);

 private:
  using connections = std::vector<std::unique_ptr<http_connection>>;
  http_connection& connection(connections& v, std::size_t m);
  failure authenticate(const char* step);
  bool ask_member(std::size_t m, const char* step, const char* path, const std::string& text,
                  json& out, bool* not_found_out, bool& reauthenticated, failure& last,
                  failure& result);

  etcd_url url_;
  std::string display_;
  std::chrono::milliseconds connect_timeout_, command_timeout_;
  std::size_t current_ = 0;
  int wake_fd_ = -1;
  std::string token_;
  connections requests_;  // per member, kept alive between requests
  connections watches_;   // per member, a watch's own (its answer streams)
};

}  // namespace tokenlock::detail
