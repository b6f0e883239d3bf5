// The etcd client against a hostile server: one that floods a watch or an
// answer without end (the deadline must hold while bytes keep arriving),
// and one that answers with the wrong JSON types (a clean protocol_error,
// and the lease given back). Fake servers on loopback (fake_server.hpp),
// and a proxy in front of a real member where the lease must be checked
// in etcd itself.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <chrono>
#include <string>
#include <vector>

#include <csignal>
#include <cstdlib>
#include <thread>

#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "child.hpp"
#include "temp_dir.hpp"

#include "etcd/etcd_client.hpp"
#include "etcd/etcd_url.hpp"
#include "etcd_test_base.hpp"
#include "fake_server.hpp"
#include "http_proxy.hpp"
#include "tokenlock/etcd_lock.hpp"

namespace {

using namespace std::chrono_literals;
using fake::fake_server;
using fake::read_request;
using fake::send_text;
using tokenlock::detail::etcd_client;
using tokenlock::detail::failure;
using tokenlock::detail::json;
using tokenlock::testing::http_proxy;
using tokenlock::testing::shared_cluster;
using tokenlock::testing::child;
using clock_type = std::chrono::steady_clock;

// How long a flooding server goes on at most: the figure the unbounded
// client reaches, and the test's own bound if the client never stops.
constexpr auto flood_cap = 15s;

std::unique_ptr<etcd_client> client_for(const std::string& url, std::chrono::milliseconds timeout) {
  tokenlock::detail::etcd_url u;
  EXPECT_FALSE(tokenlock::detail::parse_etcd_url(url, u));
  return std::make_unique<etcd_client>(u, timeout, timeout);
}

// Sends `piece` again and again until the client closes or flood_cap
// passes.
void flood(int fd, const std::string& head, const std::string& one) {
  send_text(fd, head);
  // Many at a time: the client must never find the socket empty.
  std::string piece;
  while (piece.size() < 256 * 1024) piece += one;
  const auto end = clock_type::now() + flood_cap;
  while (clock_type::now() < end)
    if (::send(fd, piece.data(), piece.size(), MSG_NOSIGNAL) <= 0) return;
}

std::string chunk(const std::string& s) {
  char size[16];
  std::snprintf(size, sizeof size, "%zx\r\n", s.size());
  return size + s + "\r\n";
}

// A watch whose member sends progress notices without end: the waiter
// must give up after its wait and the command timeout, not when the
// member stops.
TEST(EtcdHostile, AFloodingWatchHoldsTheWaiterNoLongerThanItsWaitAndTheCommandTimeout) {
  fake_server s([](int fd, int) {
    if (read_request(fd).empty()) return;
    flood(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
          chunk(R"({"result":{"header":{"revision":"9"}}})"));
  });
  auto c = client_for(s.url(), 500ms);
  bool deleted = true;
  const auto t0 = clock_type::now();
  const failure f = c->wait_delete("k", 1, 1000ms, deleted);
  const auto took = clock_type::now() - t0;
  c.reset();
  s.stop();
  EXPECT_FALSE(deleted);
  RecordProperty("took_ms",
                 static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  // 1 s of wait and 0.5 s of command timeout, with room for a loaded machine.
  EXPECT_LT(took, 3s) << "held for " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                      << " ms: " << f.message;
}

// An ordinary request whose answer never ends: interim "100 Continue"
// answers sent without pause (each complete, none the real one).
TEST(EtcdHostile, AnAnswerThatNeverEndsFailsWithinTheCommandTimeout) {
  fake_server s([](int fd, int) {
    if (read_request(fd).empty()) return;
    flood(fd, "", "HTTP/1.1 100 Continue\r\n\r\n");
  });
  auto c = client_for(s.url(), 500ms);
  json out;
  const auto t0 = clock_type::now();
  const failure f = c->call("acquire", "/v3/kv/range", json{{"key", "a"}}, out);
  const auto took = clock_type::now() - t0;
  c.reset();
  s.stop();
  EXPECT_TRUE(f);
  EXPECT_EQ(f.code, std::make_error_code(std::errc::timed_out)) << f.message;
  EXPECT_LT(took, 3s) << "held for " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                      << " ms: " << f.message;
}

// The command that waits in line: this build's, or the one named by
// TOKENLOCK_TEST_CLI (to run the same attack against another build).
std::string cli_path() {
  const char* other = std::getenv("TOKENLOCK_TEST_CLI");
  return other && *other ? other : TOKENLOCK_CLI_PATH;
}

// A fake etcd member enough for an acquire that finds the lock held and
// waits: it grants leases, answers the put with another holder first in
// line and every look at the line with that holder still ahead, and
// floods every watch. Each answer closes its connection, so that the one
// thread serves the requests and the watch in turn.
class flooding_member {
 public:
  flooding_member()
      : server_([this](int fd, int) { serve(fd); }) {}
  std::string url() const { return server_.url(); }
  void stop() { server_.stop(); }

 private:
  static std::string b64(const std::string& s) { return tokenlock::detail::base64_encode(s); }
  static json kv(const std::string& key, long long rev) {
    return json{{"key", b64(key)}, {"value", b64("someone")}, {"create_revision", std::to_string(rev)},
                {"lease", "7"}};
  }
  void answer(int fd, const json& body) {
    const std::string text = body.dump();
    send_text(fd,
              "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: " +
                  std::to_string(text.size()) + "\r\n\r\n" + text);
  }
  json txn_answer(const json& txn) {
    const bool put = txn.contains("success") && txn["success"][0].contains("request_put");
    if (put && !txn.contains("failure") &&
        txn["compare"][0].value("create_revision", "") == "0") {  // the first try
      tokenlock::detail::base64_decode(txn["success"][0]["request_put"].value("key", ""), mine_);
      const std::string dir = mine_.substr(0, mine_.rfind('/') + 1);
      holder_ = dir + "0000000000000007";
      return {{"header", {{"revision", "10"}}},
              {"succeeded", true},
              {"responses", json::array({json::object(),
                                         {{"response_range", {{"kvs", json::array({kv(holder_, 5)})}}}}})}};
    }
    if (txn.contains("failure") || !put)  // a look at the line: the holder is still ahead
      return {{"header", {{"revision", "11"}}}, {"succeeded", false},
              {"responses", json::array({{{"response_range", {{"kvs", json::array({kv(holder_, 5)})}}}},
                                         {{"response_range", {{"kvs", json::array({kv(mine_, 10)})}}}}})}};
    return {{"header", {{"revision", "12"}}}, {"succeeded", true}};
  }
  void serve(int fd) {
    const std::string r = read_request(fd);
    if (r.empty()) return;
    const std::string path = r.substr(5, r.find(' ', 5) - 5);
    const json body = json::parse(r.substr(r.find("\r\n\r\n") + 4), nullptr, false);
    if (path == "/v3/watch")
      flood(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            chunk(R"({"result":{"header":{"revision":"11"}}})"));
    else if (path == "/v3/lease/grant")
      answer(fd, {{"ID", std::to_string(++leases_ + 100)}, {"TTL", body.value("TTL", "60")}});
    else if (path == "/v3/lease/keepalive")
      answer(fd, {{"result", {{"TTL", "60"}}}});
    else if (path == "/v3/kv/txn")
      answer(fd, txn_answer(body));
    else
      answer(fd, json::object());
  }

  std::string mine_, holder_;
  int leases_ = 0;
  fake_server server_;
};

// The command's acquire -w 3 against a member that floods every watch:
// it gives up within its wait and a command timeout or two (the look at
// the line, the revokes), not when the member stops.
TEST(EtcdHostile, AnAcquireWaitingOnAFloodingMemberEndsWithinItsWait) {
  flooding_member m;
  const auto t0 = clock_type::now();
  const auto r = tokenlock::testing::run_command(
      {cli_path(), "acquire", "--etcd", m.url(), "-w", "3", "flooded"});
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t0);
  m.stop();
  std::printf("acquire -w 3 against a flooding member: exit %d after %lld ms: %s\n", r.exit_code,
              static_cast<long long>(took.count()), r.err.c_str());
  EXPECT_EQ(r.exit_code, 1) << r.err;  // busy: waited out
  EXPECT_LT(took, 3s + 2 * 2s + 1s);
}

// Answers of the right shape with the wrong JSON types, for the acquire's
// put Txn: each a protocol_error, never an exception.
const std::vector<std::string> wrong_txn_answers = {
    R"({"header":{"revision":"5"},"succeeded":"yes"})",
    R"({"header":"five","succeeded":true})",
    R"({"header":{"revision":"5"},"succeeded":true,"responses":{"a":1}})",
    R"({"header":{"revision":"5"},"succeeded":true,"responses":[{},{"response_range":[1]}]})",
    R"({"header":{"revision":"5"},"succeeded":true,"responses":[{},{"response_range":{"kvs":[{"key":7,"create_revision":"5"}]}}]})",
    R"({"header":{"revision":"5"},"succeeded":true,"responses":[{},{"response_range":{"kvs":{"key":"a"}}}]})",
    R"({"header":{"revision":"5"},"succeeded":true,"responses":[{},7]})",
};

// Malformed URLs, each with a password: no message shows it.
TEST(EtcdHostile, AMalformedUrlNeverShowsItsPassword) {
  for (const char* url :
       {"etcdx://root:S3cr3t@127.0.0.1:2379", "etcd:/root:S3cr3t@127.0.0.1:2379",
        "etcd//root:S3cr3t@127.0.0.1", "http://root:S3cr3t@127.0.0.1:2379",
        "etcd://root:S3cr3t127.0.0.1:2379", "etcd://root:S3c?r3t@127.0.0.1:2379",
        "etcd://root:S3c/r3t@127.0.0.1:1", "etcd://root:S3cr3t@127.0.0.1:99999",
        "etcd://root:S3c%zzr3t@127.0.0.1", "etcd://root:S3cr3t@@127.0.0.1:1",
        "etcd://root:S3c#r3t@127.0.0.1:1", "etcd://root:S3c,r3t@127.0.0.1:1",
        "etcd://rootS3cr3t@127.0.0.1", "etcd://root:S3cr3t@127.0.0.1,,127.0.0.2",
        "etcd://root:S3cr3t@127.0.0.1?cacert", "ETCD://root:S3cr3t@127.0.0.1", "S3cr3t@127.0.0.1",
        "etcd://root:S3c r3t@127.0.0.1:1", "etcd://root:S3c:r3t127.0.0.1:2379"}) {
    tokenlock::detail::etcd_url u;
    const failure f = tokenlock::detail::parse_etcd_url(url, u);
    // Some are valid URLs whose server is not there (a password may hold
    // '/', '@', '#', ',' or a space as they stand, the last '@' ending it):
    // refused either way.
    EXPECT_EQ(f.message.find("S3c"), std::string::npos) << url << ": " << f.message;
    EXPECT_EQ(f.message.find("r3t"), std::string::npos) << url << ": " << f.message;
    tokenlock::etcd_lock_options o;
    o.command_timeout = 200ms;
    tokenlock::etcd_lock lock(url, "name", o);
    std::error_code ec;
    lock.try_acquire(ec);
    const std::string m = tokenlock::last_error_message();
    EXPECT_TRUE(ec) << url;
    EXPECT_EQ(m.find("S3c"), std::string::npos) << url << ": " << m;
    EXPECT_EQ(m.find("r3t"), std::string::npos) << url << ": " << m;
  }
}

class EtcdHostileCluster : public tokenlock::testing::etcd_test {
 public:
  using etcd_test::base64;
  using etcd_test::dir;
  using etcd_test::keys;
  using etcd_test::name;
  using etcd_test::wait_for_line;
};

// The wrong types come from a proxy in front of a real member, which
// grants the lease: the acquire fails with protocol_error and etcd has no
// lease of it left.
TEST_F(EtcdHostileCluster, WrongJsonTypesAreAProtocolErrorAndTheLeaseIsGivenBack) {
  auto& c = shared_cluster();
  for (const std::string& answer : wrong_txn_answers) {
    std::string lease;
    http_proxy proxy(std::stoi(c.client_url(0).substr(c.client_url(0).rfind(':') + 1)),
                     [&](const http_proxy::request& r) {
                       http_proxy::action a;
                       if (r.path == "/v3/kv/txn" && r.body.find("request_put") != std::string::npos) {
                         lease = json::parse(r.body)["success"][0]["request_put"].value("lease", "");
                         a.what = http_proxy::action::answer;
                         a.body = answer;
                       }
                       return a;
                     });
    tokenlock::etcd_lock lock("etcd://127.0.0.1:" + std::to_string(proxy.port()), name());
    std::error_code ec;
    lock.acquire(ec);
    EXPECT_EQ(ec, std::make_error_code(std::errc::protocol_error))
        << answer << ": " << tokenlock::last_error_message();
    ASSERT_FALSE(lease.empty()) << answer;
    EXPECT_FALSE(lease_exists(c, std::stoll(lease))) << answer;
    EXPECT_EQ(keys(c, name()), 0);
  }
}

// The keys of the lock's line in order, with the lease each is on.
std::vector<std::pair<std::string, long long>> line_of(const tokenlock::testing::etcd_cluster& c,
                                                       const std::string& dir) {
  std::string answer;
  const json body{{"key", EtcdHostileCluster::base64(dir)},
                  {"range_end", EtcdHostileCluster::base64(dir.substr(0, dir.size() - 1) + "0")},
                  {"sort_target", "CREATE"},
                  {"sort_order", "ASCEND"}};
  std::vector<std::pair<std::string, long long>> line;
  if (!c.post(0, "/v3/kv/range", body.dump(), answer)) return line;
  const json j = json::parse(answer, nullptr, false);
  if (!j.is_object() || !j.contains("kvs")) return line;
  for (const json& kv : j["kvs"]) {
    std::string key;
    tokenlock::detail::base64_decode(kv.value("key", ""), key);
    line.emplace_back(key, std::stoll(kv.value("lease", "0")));
  }
  return line;
}

// A waiter (`argv`: the command's acquire or run with a 20 s lease, or
// counter.cgi with its 10 s one) killed by `sig` while it waits behind a
// holder of lock `lock`: how long the next acquirer waits after the holder
// releases.
std::chrono::milliseconds line_held_after_waiter_killed(EtcdHostileCluster& t, int sig,
                                                        const std::vector<std::string>& argv,
                                                        const std::string& lock) {
  auto& c = shared_cluster();
  const std::string dir = "tokenlock/" + lock + "/";
  tokenlock::etcd_lock_options ho;
  ho.lease = 60s;
  tokenlock::etcd_lock holder(c.url(), lock, ho);
  tokenlock::etcd_handle h = holder.acquire();
  child waiter(argv);
  t.wait_for_line(c, lock, 2);
  // Until the waiter's key is on a lease of its own (not the one its name
  // was made from): then it is past the first try and watches for stop
  // signals. A waiter that never moves (another build) is killed after 5 s.
  const auto moved_by = clock_type::now() + 5s;
  for (;;) {
    const auto line = line_of(c, dir);
    if (line.size() == 2 && line[1].second != std::stoll(line[1].first.substr(dir.size()), nullptr, 16))
      break;
    if (clock_type::now() > moved_by) break;
    std::this_thread::sleep_for(20ms);
  }
  waiter.signal(sig);
  const int status = waiter.wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "status " << status;
  if (sig != SIGKILL) {
    EXPECT_EQ(t.keys(c, lock), 1) << "the waiter's key is still in line";
  }
  const auto released = clock_type::now();
  h.release();
  tokenlock::etcd_lock_options o;
  o.wait = 60s;
  tokenlock::etcd_lock next(c.url(), lock, o);
  tokenlock::etcd_handle n = next.acquire();
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - released);
  std::printf("after a waiter killed by signal %d, the next waited %lld ms\n", sig,
              static_cast<long long>(took.count()));
  n.release();
  EXPECT_EQ(t.keys(c, lock), 0);
  return took;
}

std::chrono::milliseconds command_waiter_killed(EtcdHostileCluster& t, int sig,
                                                const char* command = "acquire") {
  std::vector<std::string> argv = {cli_path(), command, "--etcd", shared_cluster().url(), "-w", "60",
                                   "--lease", "20", t.name()};
  if (std::string(command) == "run") argv.insert(argv.end(), {"--", "true"});
  return line_held_after_waiter_killed(t, sig, argv, t.name());
}

// The same in the waiter's look at the line: protocol_error, and both of
// its leases (its own long one and its short one) revoked.
TEST_F(EtcdHostileCluster, WrongJsonTypesWhileWaitingAreAProtocolErrorAndBothLeasesAreGivenBack) {
  auto& c = shared_cluster();
  tokenlock::etcd_lock holder(c.url(), name());
  tokenlock::etcd_handle h = holder.acquire();
  std::mutex m;
  std::vector<std::string> leases;
  http_proxy proxy(std::stoi(c.client_url(0).substr(c.client_url(0).rfind(':') + 1)),
                   [&](const http_proxy::request& r) {
                     http_proxy::action a;
                     if (r.path != "/v3/kv/txn") return a;
                     const json txn = json::parse(r.body);
                     const json& first = txn["success"][0];
                     if (first.contains("request_put") && !txn.contains("failure")) {
                       std::lock_guard<std::mutex> g(m);
                       leases.push_back(first["request_put"].value("lease", ""));
                     }
                     if (txn.contains("failure")) {  // the look at the line
                       a.what = http_proxy::action::answer;
                       a.body = R"({"header":{"revision":"9"},"succeeded":"no"})";
                     }
                     return a;
                   });
  tokenlock::etcd_lock_options o;
  o.wait = 10s;
  tokenlock::etcd_lock waiter("etcd://127.0.0.1:" + std::to_string(proxy.port()), name(), o);
  std::error_code ec;
  waiter.acquire(ec);
  EXPECT_EQ(ec, std::make_error_code(std::errc::protocol_error)) << tokenlock::last_error_message();
  std::lock_guard<std::mutex> g(m);
  ASSERT_EQ(leases.size(), 2u) << "the put, and the move onto the short lease";
  for (const std::string& lease : leases) EXPECT_FALSE(lease_exists(c, std::stoll(lease))) << lease;
  EXPECT_EQ(keys(c, name()), 1);
  h.release();
  EXPECT_EQ(keys(c, name()), 0);
}

// The waiter's key goes onto its short lease while it waits and back onto
// its own long lease when granted (in the Txn that finds it first: no
// round trip more); the handle's lease is the long one, still running.
TEST_F(EtcdHostileCluster, AWaiterWaitsOnAShortLeaseAndHoldsOnItsOwn) {
  auto& c = shared_cluster();
  tokenlock::etcd_lock holder(c.url(), name());
  tokenlock::etcd_handle h = holder.acquire();
  tokenlock::etcd_lock_options o;
  o.wait = 30s;
  o.lease = 60s;
  tokenlock::etcd_handle granted;
  std::thread waiter([&] { granted = tokenlock::etcd_lock(c.url(), name(), o).acquire(); });
  wait_for_line(c, name(), 2);
  const auto by = clock_type::now() + 10s;
  long long short_lease = 0;
  while (short_lease == 0 && clock_type::now() < by) {
    const auto line = line_of(c, dir());
    if (line.size() == 2 &&
        line[1].second != std::stoll(line[1].first.substr(dir().size()), nullptr, 16))
      short_lease = line[1].second;
    else
      std::this_thread::sleep_for(20ms);
  }
  ASSERT_NE(short_lease, 0) << "the waiter's key never moved to a lease of its own";
  std::string ttl;
  ASSERT_TRUE(c.post(0, "/v3/lease/timetolive", json{{"ID", std::to_string(short_lease)}}.dump(), ttl));
  EXPECT_LE(std::stoll(json::parse(ttl).value("grantedTTL", "0")), 3) << ttl;
  h.release();
  waiter.join();
  ASSERT_TRUE(granted.owns());
  const auto line = line_of(c, dir());
  ASSERT_EQ(line.size(), 1u);
  EXPECT_EQ(line[0].second, granted.lease_id());
  EXPECT_EQ(std::to_string(granted.lease_id()),
            std::to_string(std::stoll(line[0].first.substr(dir().size()), nullptr, 16)));
  EXPECT_EQ(granted.lease(), 60s);
  granted.refresh();
  granted.release();
  EXPECT_EQ(keys(c, name()), 0);
}

// SIGTERM (as an administrator's kill, or Apache's timeout): the waiter
// gives its place back before it dies, so the line moves at once.
TEST_F(EtcdHostileCluster, AWaiterEndedBySigtermLeavesTheLineAtOnce) {
  EXPECT_LT(command_waiter_killed(*this, SIGTERM), 2s);
}

TEST_F(EtcdHostileCluster, AWaiterEndedBySigintLeavesTheLineAtOnce) {
  EXPECT_LT(command_waiter_killed(*this, SIGINT), 2s);
}

// run, ended by SIGHUP (its terminal closed) while it waits: the same.
TEST_F(EtcdHostileCluster, ARunWaitingEndedBySighupLeavesTheLineAtOnce) {
  EXPECT_LT(command_waiter_killed(*this, SIGHUP, "run"), 2s);
}

// incr --etcd, ended by SIGTERM while it waits for the counter's lock.
TEST_F(EtcdHostileCluster, AnIncrWaitingEndedBySigtermLeavesTheLineAtOnce) {
  tokenlock::testing::temp_dir files;
  const std::vector<std::string> argv = {cli_path(), "incr", "--etcd", shared_cluster().url(), "--lock",
                                         name(), "-w", "60", (files / "n.count").string()};
  EXPECT_LT(line_held_after_waiter_killed(*this, SIGTERM, argv, name()), 2s);
  EXPECT_FALSE(boost::filesystem::exists(files / "n.count")) << "the killed incr counted";
}

// kill -9: nothing runs in the waiter; its key goes with its short lease
// (3 s, kept alive at a third of it): docs/etcd.md gives the bound.
TEST_F(EtcdHostileCluster, AWaiterKilledBySigkillHoldsTheLineForItsShortLeaseOnly) {
  EXPECT_LT(command_waiter_killed(*this, SIGKILL), 5s);
}

#ifdef COUNTER_CGI_PATH
// This build's counter.cgi, or the one named by TOKENLOCK_TEST_COUNTER_CGI.
std::string counter_cgi_path() {
  const char* other = std::getenv("TOKENLOCK_TEST_COUNTER_CGI");
  return other && *other ? other : COUNTER_CGI_PATH;
}

// counter.cgi waiting for its counter's lock when the web server gives up
// on it (Apache's timeout: SIGTERM). Its own handler
// (install_signal_cleanup) runs after the place is given back. The cluster
// named by TOKENLOCK_COUNTER_LOCK and by its older name: the same lock.
TEST_F(EtcdHostileCluster, ACounterCgiEndedBySigtermLeavesTheLineAtOnce) {
  for (const std::string variable : {"TOKENLOCK_COUNTER_LOCK", "TOKENLOCK_COUNTER_ETCD"}) {
    tokenlock::testing::temp_dir files;
    const std::string id = "hostile" + std::to_string(::getpid());
    const std::vector<std::string> argv = {
        "/usr/bin/env", "-i", "REQUEST_METHOD=GET", "QUERY_STRING=id=" + id,
        "TOKENLOCK_COUNTER_DIR=" + files.path().string(), variable + "=" + shared_cluster().url(),
        "TOKENLOCK_COUNTER_WAIT_MS=60000", counter_cgi_path()};
    EXPECT_LT(line_held_after_waiter_killed(*this, SIGTERM, argv, "counter:" + id), 2s) << variable;
    EXPECT_FALSE(boost::filesystem::exists(files / (id + ".count"))) << variable << ": it counted";
  }
}
#endif

}  // namespace
