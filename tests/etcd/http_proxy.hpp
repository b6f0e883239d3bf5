// A loopback HTTP/1.1 proxy in front of one etcd member, for the failures
// a real member cannot be made to show on cue: an answer lost after the
// member applied the request (a member that timed out), a request that
// reached the member changed, or an error in a watch stream. Every other
// request goes through unchanged. One request per connection: the proxy
// says "Connection: close" in each answer it passes on.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tokenlock::testing {

class http_proxy {
 public:
  struct request {
    std::string path;  // "/v3/kv/txn"
    std::string body;
  };
  struct action {
    enum kind {
      forward,  // to the member, `body` (when not empty) instead of the request's
      hold,     // forward, then keep the connection open without the answer
      answer,   // answer 200 with `body` ourselves; the member sees nothing
    } what = forward;
    std::string body;
  };
  using rule = std::function<action(const request&)>;

  http_proxy(int member_port, rule r);
  ~http_proxy();  // closes every connection and joins its threads
  http_proxy(const http_proxy&) = delete;
  http_proxy& operator=(const http_proxy&) = delete;

  int port() const { return port_; }
  // How many requests took each kind of action so far.
  int held() const { return held_; }
  int answered() const { return answered_; }

 private:
  void accept_loop();
  void serve(int client);
  bool wait_readable(int fd) const;  // false once the proxy stops

  int member_port_;
  rule rule_;
  int listen_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  int port_ = 0;
  std::atomic<int> held_{0}, answered_{0};
  std::mutex mutex_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

}  // namespace tokenlock::testing
