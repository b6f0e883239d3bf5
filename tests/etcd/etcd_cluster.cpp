#include "etcd_cluster.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include <curl/curl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.hpp"
#include "ports.hpp"

namespace tokenlock::testing {

namespace {

// The full path of `program` on PATH; empty when it is not there.
std::string find_program(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "";
  std::size_t start = 0;
  while (start <= p.size()) {
    const std::size_t end = p.find(':', start);
    const std::string dir = p.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty() && ::access((dir + "/" + program).c_str(), X_OK) == 0) return dir + "/" + program;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return {};
}


size_t append(char* p, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(p, size * n);
  return size * n;
}

// One HTTP request to a member (GET, or POST when `body` is given); false
// when it did not answer 200.
bool http(const std::string& url, const std::string* body, std::string& answer,
          const std::string& cacert = {}, const std::string& token = {}) {
  CURL* h = curl_easy_init();
  if (!h) return false;
  curl_slist* headers = nullptr;
  if (!token.empty()) {
    headers = curl_slist_append(headers, ("Authorization: " + token).c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  }
  answer.clear();
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 2000L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, append);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &answer);
  if (body) curl_easy_setopt(h, CURLOPT_POSTFIELDS, body->c_str());
  if (!cacert.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, cacert.c_str());
  long status = 0;
  const bool ok = curl_easy_perform(h) == CURLE_OK &&
                  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK && status == 200;
  curl_easy_cleanup(h);
  curl_slist_free_all(headers);
  return ok;
}

void reap(pid_t& pid, int sig) {
  if (pid <= 0) return;
  ::kill(pid, SIGCONT);
  ::kill(pid, sig);
  ::waitpid(pid, nullptr, 0);
  pid = -1;
}

}  // namespace

std::string etcd_cluster::unavailable() {
  if (find_program("etcd").empty()) return "etcd is not installed (scripts/install-deps installs etcd-server)";
  if (find_program("etcdctl").empty()) return "etcdctl is not installed (package etcd-client)";
  if (find_program("openssl").empty()) return "openssl is not installed (scripts/install-deps installs it)";
  return {};
}

etcd_cluster::etcd_cluster(int members, bool tls, std::vector<std::string> flags)
    : tls_(tls), flags_(std::move(flags)) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  if (tls_) make_certificates();
  token_ = "tokenlock-test-" + std::to_string(::getpid()) + "-" +
           std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  for (int i = 0; i < members; ++i)
    members_.push_back(member{"m" + std::to_string(i), reserve_port(), reserve_port(), -1});
  start_all();
}

etcd_cluster::~etcd_cluster() {
  for (auto& m : members_) reap(m.pid, SIGTERM);
}

std::string etcd_cluster::client_url(int i) const {
  return (tls_ ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(members_[i].client_port);
}

std::string etcd_cluster::ca_file() const { return (dir_ / "ca.pem").string(); }

void etcd_cluster::make_certificates() {
  const std::string d = dir_.path().string();
  {
    std::FILE* ext = std::fopen((d + "/ext.cnf").c_str(), "w");
    if (!ext) throw std::runtime_error("cannot write " + d + "/ext.cnf");
    std::fputs("subjectAltName=IP:127.0.0.1\n", ext);
    std::fclose(ext);
  }
  const std::vector<std::vector<std::string>> steps{
      {"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", d + "/ca.key", "-out",
       d + "/ca.pem", "-days", "2", "-subj", "/CN=tokenlock test CA"},
      {"req", "-newkey", "rsa:2048", "-nodes", "-keyout", d + "/server.key", "-out",
       d + "/server.csr", "-subj", "/CN=127.0.0.1"},
      {"x509", "-req", "-in", d + "/server.csr", "-CA", d + "/ca.pem", "-CAkey", d + "/ca.key",
       "-CAcreateserial", "-out", d + "/server.pem", "-days", "2", "-extfile", d + "/ext.cnf"}};
  for (auto argv : steps) {
    argv.insert(argv.begin(), find_program("openssl"));
    const command_result r = run_command(argv);
    if (r.exit_code != 0) throw std::runtime_error("openssl " + argv[1] + " failed: " + r.err);
  }
}

std::string etcd_cluster::url(const std::string& credentials, const std::vector<int>& order) const {
  std::string s = (tls_ ? "etcds://" : "etcd://") + (credentials.empty() ? std::string() : credentials + "@");
  std::vector<int> o = order;
  if (o.empty())
    for (int i = 0; i < size(); ++i) o.push_back(i);
  for (std::size_t k = 0; k < o.size(); ++k)
    s += (k ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(members_[o[k]].client_port);
  return tls_ ? s + "?cacert=" + ca_file() : s;
}

void etcd_cluster::spawn(int i) {
  std::string cluster;
  for (const auto& m : members_)
    cluster += (cluster.empty() ? "" : ",") + m.name + "=http://127.0.0.1:" + std::to_string(m.peer_port);
  const member& m = members_[i];
  const std::string peer = "http://127.0.0.1:" + std::to_string(m.peer_port);
  const std::vector<std::string> argv{
      "etcd", "--name", m.name, "--data-dir", (dir_ / m.name).string(),
      "--listen-client-urls", client_url(i), "--advertise-client-urls", client_url(i),
      "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
      "--initial-cluster", cluster, "--initial-cluster-state", "new",
      "--initial-cluster-token", token_};
  std::vector<std::string> args = argv;
  if (tls_)
    args.insert(args.end(), {"--cert-file", (dir_ / "server.pem").string(), "--key-file",
                             (dir_ / "server.key").string()});
  args.insert(args.end(), flags_.begin(), flags_.end());
  const std::string log = (dir_ / (m.name + ".log")).string();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> cargs;
    for (const auto& a : args) cargs.push_back(const_cast<char*>(a.c_str()));
    cargs.push_back(nullptr);
    ::execvp(cargs[0], cargs.data());
    ::_exit(127);
  }
  members_[i].pid = pid;
}

void etcd_cluster::wait_healthy(int i) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::string answer;
  while (std::chrono::steady_clock::now() < deadline) {
    if (members_[i].pid > 0 && ::waitpid(members_[i].pid, nullptr, WNOHANG) == members_[i].pid)
      throw std::runtime_error("etcd member " + members_[i].name + " exited (see " +
                               (dir_ / (members_[i].name + ".log")).string() + ")");
    if (http(client_url(i) + "/health", nullptr, answer, tls_ ? ca_file() : std::string()) &&
        answer.find("\"true\"") != std::string::npos)
      return;
    // Polling: etcd has no readiness notification for a cluster member
    // that has joined and sees a leader.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("etcd member " + members_[i].name + " not healthy within 30 s: " + answer);
}

void etcd_cluster::start(int i) {
  if (members_[i].pid <= 0) spawn(i);
  wait_healthy(i);
}

void etcd_cluster::start_all() {
  // All at once: a member of a new cluster is healthy only once a
  // majority is up.
  for (int i = 0; i < size(); ++i)
    if (members_[i].pid <= 0) spawn(i);
  for (int i = 0; i < size(); ++i) wait_healthy(i);
}

void etcd_cluster::kill_hard(int i) { reap(members_[i].pid, SIGKILL); }
void etcd_cluster::stop(int i) { reap(members_[i].pid, SIGTERM); }
void etcd_cluster::stop_all() {
  for (int i = 0; i < size(); ++i) stop(i);
}

int etcd_cluster::leader() const {
  const std::string body = "{}";
  for (int i = 0; i < size(); ++i) {
    if (members_[i].pid <= 0) continue;
    std::string answer;
    if (!http(client_url(i) + "/v3/maintenance/status", &body, answer, tls_ ? ca_file() : std::string())) continue;
    const auto j = nlohmann::json::parse(answer, nullptr, false);
    if (j.is_discarded() || !j.contains("leader")) continue;
    const std::string leader = j["leader"].get<std::string>();
    // The leader's own status names itself; ask each member for its id.
    for (int k = 0; k < size(); ++k) {
      if (members_[k].pid <= 0) continue;
      std::string a2;
      if (!http(client_url(k) + "/v3/maintenance/status", &body, a2, tls_ ? ca_file() : std::string())) continue;
      const auto s = nlohmann::json::parse(a2, nullptr, false);
      if (!s.is_discarded() && s["header"].value("member_id", std::string()) == leader) return k;
    }
  }
  return -1;
}

etcd_cluster::ctl_result etcd_cluster::ctl(const std::vector<std::string>& args,
                                           const std::string& user) const {
  std::string endpoints;
  for (int i = 0; i < size(); ++i)
    if (members_[i].pid > 0) endpoints += (endpoints.empty() ? "" : ",") + client_url(i);
  std::vector<std::string> argv{find_program("etcdctl"), "--endpoints=" + endpoints};
  if (!user.empty() || !ctl_user_.empty()) argv.push_back("--user=" + (user.empty() ? ctl_user_ : user));
  if (tls_) argv.push_back("--cacert=" + ca_file());
  argv.insert(argv.end(), args.begin(), args.end());
  const command_result r = run_command(argv);
  return ctl_result{r.exit_code, r.out + r.err};
}

}  // namespace tokenlock::testing

namespace tokenlock::testing {

int etcd_cluster::key_count(const std::string& prefix) const {
  const ctl_result r = ctl({"get", "--prefix", "--keys-only", prefix});
  if (r.status != 0) {
    std::fprintf(stderr, "etcdctl get --prefix %s: exit %d: %s\n", prefix.c_str(), r.status, r.out.c_str());
    return -1;
  }
  int n = 0;
  std::size_t start = 0;
  while (start < r.out.size()) {
    const auto end = r.out.find('\n', start);
    const std::size_t stop = end == std::string::npos ? r.out.size() : end;
    if (stop > start) ++n;
    start = stop + 1;
  }
  return n;
}

bool etcd_cluster::post(int member, const std::string& path, const std::string& body,
                        std::string& answer, const std::string& token) const {
  return http(client_url(member) + path, &body, answer, tls_ ? ca_file() : std::string(), token);
}

}  // namespace tokenlock::testing
