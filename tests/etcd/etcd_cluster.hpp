// A real etcd cluster for the tests: N members (three by default) on free
// 127.0.0.1 ports, data directories in a temporary directory, each member
// waited for by polling its /health endpoint until it answers healthy (no
// fixed sleep), and stopped by its pid: gently (SIGTERM), hard (SIGKILL,
// for "the leader crashed"), or all of them and started again on the same
// data (a whole-cluster restart).
#pragma once

#include <string>
#include <vector>

#include <sys/types.h>

#include "temp_dir.hpp"

namespace tokenlock::testing {

class etcd_cluster {
 public:
  // Empty when etcd can be run here; otherwise why not (the test is then
  // skipped with that reason).
  static std::string unavailable();

  // With `tls`, the members serve their clients over HTTPS with a
  // certificate for 127.0.0.1 signed by a CA made for the test (openssl);
  // url() is then etcds://...?cacert=<that CA>.
  // `flags` go to every member's command line (e.g. --auth-token-ttl 1).
  explicit etcd_cluster(int members = 3, bool tls = false, std::vector<std::string> flags = {});
  ~etcd_cluster();  // SIGCONT + SIGTERM to each member still running, then reaps
  etcd_cluster(const etcd_cluster&) = delete;
  etcd_cluster& operator=(const etcd_cluster&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  // etcd://127.0.0.1:P1,127.0.0.1:P2,... (members in `order`, default all
  // in index order), with "user:password@" when given.
  std::string url(const std::string& credentials = {}, const std::vector<int>& order = {}) const;
  std::string client_url(int member) const;  // http(s)://127.0.0.1:P
  std::string ca_file() const;                // the test CA (tls only)
  pid_t pid(int member) const { return members_[member].pid; }
  bool running(int member) const { return members_[member].pid > 0; }

  // The index of the member that is the leader now (asks the running
  // members' /v3/maintenance/status); -1 when none says it knows.
  int leader() const;

  void kill_hard(int member);      // SIGKILL and reap
  void stop(int member);           // SIGTERM and reap
  void start(int member);          // again, on its data directory; waits for health
  void stop_all();
  void start_all();                // every stopped member, then waits for all to be healthy
  // Waits (polling /health) until `member` answers healthy; throws after 30 s.
  void wait_healthy(int member) const;

  // etcdctl against the cluster: its exit status and output.
  struct ctl_result {
    int status = -1;
    std::string out;
  };
  // How many keys start with `prefix` (etcdctl get --prefix --keys-only);
  // -1 when etcdctl fails.
  int key_count(const std::string& prefix) const;
  ctl_result ctl(const std::vector<std::string>& args, const std::string& user = {}) const;
  // The user:password every later ctl() (and key_count) uses when it is
  // given none: for a cluster with auth on.
  void ctl_user(const std::string& user) { ctl_user_ = user; }

  // A POST of `body` to `path` ("/v3/kv/range") on `member`, with the
  // auth token when given; false when it did not answer 200.
  bool post(int member, const std::string& path, const std::string& body, std::string& answer,
            const std::string& token = {}) const;

 private:
  struct member {
    std::string name;
    int client_port = 0, peer_port = 0;
    pid_t pid = -1;
  };
  void spawn(int member);
  void make_certificates();
  temp_dir dir_;
  bool tls_ = false;
  std::string token_;
  std::vector<std::string> flags_;
  std::string ctl_user_;
  std::vector<member> members_;
};

}  // namespace tokenlock::testing
