// What the etcd lock's transport costs a short-lived process, side by side
// in one run (docs/etcd.md, Transport).
//
//   etcd_transport [--rounds N] [--cycles N] [--grpc-probe PATH] URL
//
// Each round measures every workload once, in an order that changes from
// round to round, `cycles` times each; the program prints each workload's
// median time per cycle over the rounds and the ratios that decide the
// transport and check the targets:
//   process_floor   fork + exec of this program, which exits at once: what
//                   any per-request process costs before it locks
//   lock_cold       a fresh process: etcd_lock acquire + release (connects,
//                   then grant, Txn, delete Txn, revoke)
//   raw_cold        a fresh process: the same four requests sent bare by the
//                   same client over one new connection
//   curl_raw_cold   the same through libcurl (the transport the library
//                   used before its HTTP client on Boost.Beast), a fresh process
//   lock_warm       acquire + release in this process, connection kept
//   raw_warm        the four bare requests in this process, connection kept
//   curl_raw_warm   the same through libcurl, its connection kept
//   etcdctl_lock    `etcdctl lock NAME true`: etcd's own (gRPC) client, one
//                   process per cycle
//   range_cold      a fresh process: one Range through the library's client
//                   (connect, POST /v3/kv/range)
//   grpc_range_cold a fresh process: the same Range through gRPC C++
//                   (etcd_grpc_probe: channel, HTTP/2 set-up, one
//                   unary call); only when the probe is built (gRPC C++
//                   found) or named by --grpc-probe ("" leaves it out)
// The cold workloads' children's peak RSS is printed after the times.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef TOKENLOCK_BENCH_CURL
#include <curl/curl.h>
#endif

#include "etcd/etcd_client.hpp"
#include "etcd/etcd_requests.hpp"
#include "etcd_bench_support.hpp"
#include "tokenlock/etcd_lock.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using tokenlock::bench::etcdctl_endpoints;
using tokenlock::bench::median;
using tokenlock::bench::run_process;
using tokenlock::bench::run_rounds;
using tokenlock::detail::etcd_client;
using tokenlock::detail::failure;

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "etcd_transport: %s\n", m.c_str());
  std::exit(2);
}

using tokenlock::detail::json;

tokenlock::detail::etcd_url parse_url(const std::string& url) {
  tokenlock::detail::etcd_url u;
  if (failure f = tokenlock::detail::parse_etcd_url(url, u)) die(f.message);
  return u;
}

// One way of POSTing a request to the gateway and parsing its answer, so
// that the same bare requests run over either transport.
class transport {
 public:
  virtual ~transport() = default;
  virtual json post(const char* path, const json& body) = 0;  // dies on failure
};

// The library's HTTP client, on Boost.Beast (through etcd_client, as the
// lock uses it).
class own_transport : public transport {
 public:
  explicit own_transport(const std::string& url)
      : c_(parse_url(url), std::chrono::seconds(2), std::chrono::seconds(2)) {}
  json post(const char* path, const json& body) override {
    json out;
    if (failure f = c_.call("bench", path, body, out)) die(f.message);
    return out;
  }

 private:
  etcd_client c_;
};

#ifdef TOKENLOCK_BENCH_CURL
// libcurl, as the library called it before it had its own client: one
// easy handle (its connection kept alive) to the URL's first member.
class curl_transport : public transport {
 public:
  explicit curl_transport(const std::string& url) : member_(parse_url(url).members.at(0)) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    h_ = curl_easy_init();
    if (!h_) die("curl_easy_init failed");
    headers_ = curl_slist_append(nullptr, "Content-Type: application/json");
  }
  ~curl_transport() override {
    curl_slist_free_all(headers_);
    curl_easy_cleanup(h_);
  }
  json post(const char* path, const json& body) override {
    const std::string target = member_ + path, text = body.dump();
    std::string answer;
    curl_easy_setopt(h_, CURLOPT_URL, target.c_str());
    curl_easy_setopt(h_, CURLOPT_POST, 1L);
    curl_easy_setopt(h_, CURLOPT_POSTFIELDS, text.c_str());
    curl_easy_setopt(h_, CURLOPT_POSTFIELDSIZE, static_cast<long>(text.size()));
    curl_easy_setopt(h_, CURLOPT_HTTPHEADER, headers_);
    curl_easy_setopt(h_, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h_, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
    curl_easy_setopt(h_, CURLOPT_TIMEOUT_MS, 2000L);
    curl_easy_setopt(h_, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h_, CURLOPT_WRITEDATA, &answer);
    curl_easy_setopt(h_, CURLOPT_TCP_NODELAY, 1L);
    const CURLcode rc = curl_easy_perform(h_);
    if (rc != CURLE_OK) die(member_ + path + ": " + curl_easy_strerror(rc));
    json out = json::parse(answer, nullptr, false);
    if (out.is_discarded() || out.contains("error")) die(member_ + path + ": " + answer);
    return out;
  }

 private:
  static size_t on_write(char* p, size_t size, size_t n, void* user) {
    static_cast<std::string*>(user)->append(p, size * n);
    return size * n;
  }
  std::string member_;
  CURL* h_ = nullptr;
  curl_slist* headers_ = nullptr;
};
#endif

std::unique_ptr<transport> make_transport(const std::string& kind, const std::string& url) {
#ifdef TOKENLOCK_BENCH_CURL
  if (kind == "curl") return std::make_unique<curl_transport>(url);
#endif
  if (kind == "own") return std::make_unique<own_transport>(url);
  die("unknown transport " + kind);
}

// The lock's four requests (etcd_requests.cpp: lease_grant, put_if_absent,
// delete_if_revision, lease_revoke), sent bare with the same bodies: the
// floor an acquire + release is compared with.
void raw_cycle(transport& t, const std::string& dir) {
  using tokenlock::detail::base64_encode;
  const json grant = t.post("/v3/lease/grant", json{{"TTL", "60"}});
  const std::string id = grant.value("ID", std::string());
  const std::string k = base64_encode(dir + id);
  const json range{{"key", base64_encode(dir)},
                   {"range_end", base64_encode(tokenlock::detail::prefix_end(dir))},
                   {"limit", "1"},
                   {"sort_order", "ASCEND"},
                   {"sort_target", "CREATE"}};
  const json put = t.post(
      "/v3/kv/txn",
      json{{"compare", json::array({{{"key", k}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}}})},
           {"success", json::array({{{"request_put", {{"key", k}, {"value", base64_encode("bench")}, {"lease", id}}}},
                                    {{"request_range", range}}})}});
  const std::string rev = put.value("header", json::object()).value("revision", std::string());
  const json del = t.post(
      "/v3/kv/txn",
      json{{"compare", json::array({{{"key", k}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", rev}}})},
           {"success", json::array({{{"request_delete_range", {{"key", k}}}}})}});
  t.post("/v3/lease/revoke", json{{"ID", id}});
  if (id.empty() || !put.value("succeeded", false) || !del.value("succeeded", false))
    die("raw cycle failed: " + put.dump() + " " + del.dump());
}

// The key both Range workloads read (absent: the answer is a header only).
const std::string range_key = "tokenlock/bench-range";

// The gRPC probe's HOST:PORT: the URL's first member, which must be plain
// http (the probe has no TLS).
std::string grpc_endpoint(const std::string& url) {
  const std::string member = parse_url(url).members.at(0), scheme = "http://";
  if (member.rfind(scheme, 0) != 0)
    die(member + ": grpc_range_cold needs a plain etcd:// member (the probe has no TLS); "
        "run it against etcd://, or leave it out with --grpc-probe \"\"");
  return member.substr(scheme.size());
}

void lock_cycle(tokenlock::etcd_lock& lock) { lock.acquire().release(); }

int child_main(const std::string& mode, const std::string& url) {
  if (mode == "noop") return 0;
  if (mode == "lock") {
    tokenlock::etcd_lock lock(url, "bench-lock-cold");
    lock_cycle(lock);
    return 0;
  }
  if (mode == "own" || mode == "curl") {
    raw_cycle(*make_transport(mode, url), "tokenlock/bench-raw-cold/");
    return 0;
  }
  if (mode == "range") {
    const json r = make_transport("own", url)->post(
        "/v3/kv/range", json{{"key", tokenlock::detail::base64_encode(range_key)}});
    if (!r.contains("header")) die("/v3/kv/range: no header in " + r.dump());
    return 0;
  }
  die("unknown child mode " + mode);
}

#ifdef TOKENLOCK_BENCH_GRPC_PROBE
const char* const default_grpc_probe = TOKENLOCK_BENCH_GRPC_PROBE;
#else
const char* const default_grpc_probe = "";
#endif

struct options {
  int rounds = 31, cycles = 20;
  std::string url, grpc_probe = default_grpc_probe;
};

options parse_args(int argc, char** argv) {
  const char* usage = "usage: etcd_transport [--rounds N] [--cycles N] [--grpc-probe PATH] etcd://host:port[,...]";
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) o.rounds = std::atoi(argv[++i]);
    else if (a == "--cycles" && i + 1 < argc) o.cycles = std::atoi(argv[++i]);
    else if (a == "--grpc-probe" && i + 1 < argc) o.grpc_probe = argv[++i];
    else if (a.rfind("etcd", 0) == 0) o.url = a;
    else die(usage);
  }
  if (o.url.empty() || o.rounds < 1 || o.cycles < 1) die(usage);
  return o;
}

using samples = std::map<std::string, std::vector<double>>;

void print_results(const samples& us, const std::map<std::string, long>& peak_kb, const options& o) {
  std::printf("# %d rounds of %d cycles; median microseconds per cycle\n", o.rounds, o.cycles);
  for (const auto& w : us) std::printf("%-16s %10.1f\n", w.first.c_str(), median(w.second));
  const auto m = [&](const char* n) { return median(us.at(n)); };
  const auto over_floor = [&](const char* a, const char* b) {
    return (m(a) - m("process_floor")) / (m(b) - m("process_floor"));
  };
  std::printf("ratio lock_warm/raw_warm          %.3f\n", m("lock_warm") / m("raw_warm"));
  std::printf("ratio (lock_cold-floor)/(raw_cold-floor) %.3f\n", over_floor("lock_cold", "raw_cold"));
  std::printf("ratio etcdctl_lock/lock_cold      %.3f\n", m("etcdctl_lock") / m("lock_cold"));
  if (us.count("curl_raw_cold")) {
    std::printf("ratio raw_warm/curl_raw_warm      %.3f\n", m("raw_warm") / m("curl_raw_warm"));
    std::printf("ratio (raw_cold-floor)/(curl_raw_cold-floor) %.3f\n", over_floor("raw_cold", "curl_raw_cold"));
  }
  if (us.count("grpc_range_cold"))
    std::printf("ratio (grpc_range_cold-floor)/(range_cold-floor) %.3f\n",
                over_floor("grpc_range_cold", "range_cold"));
  std::printf("# peak RSS of one child process, KiB (the largest seen)\n");
  for (const auto& p : peak_kb) std::printf("peak_rss_kb %-16s %8ld\n", p.first.c_str(), p.second);
}
}  // namespace

namespace {

int run(int argc, char** argv) {
  const options o = parse_args(argc, argv);
  const std::string self = argv[0], url = o.url, endpoints = etcdctl_endpoints(url);
  tokenlock::etcd_lock warm_lock(url, "bench-lock-warm");
  auto warm_own = make_transport("own", url);
  std::map<std::string, long> peak_kb;
  const auto cold = [&](const std::string& name, std::vector<std::string> args) {
    return [&peak_kb, name, args] {
      const long kb = run_process(args);
      peak_kb[name] = std::max(peak_kb[name], kb);
    };
  };
  std::map<std::string, std::function<void()>> workloads{
      {"process_floor", cold("process_floor", {self, "--child", "noop", url})},
      {"lock_cold", cold("lock_cold", {self, "--child", "lock", url})},
      {"raw_cold", cold("raw_cold", {self, "--child", "own", url})},
      {"range_cold", cold("range_cold", {self, "--child", "range", url})},
      {"lock_warm", [&] { lock_cycle(warm_lock); }},
      {"raw_warm", [&] { raw_cycle(*warm_own, "tokenlock/bench-raw-warm/"); }},
      {"etcdctl_lock",
       cold("etcdctl_lock", {"etcdctl", "--endpoints=" + endpoints, "lock", "bench-etcdctl", "true"})},
  };
  if (!o.grpc_probe.empty())
    workloads["grpc_range_cold"] = cold("grpc_range_cold", {o.grpc_probe, grpc_endpoint(url), range_key});
#ifdef TOKENLOCK_BENCH_CURL
  auto warm_curl = make_transport("curl", url);
  workloads["curl_raw_cold"] = cold("curl_raw_cold", {self, "--child", "curl", url});
  workloads["curl_raw_warm"] = [&] { raw_cycle(*warm_curl, "tokenlock/bench-curl-warm/"); };
#endif
  print_results(run_rounds(workloads, o.rounds, o.cycles), peak_kb, o);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--child") return child_main(argv[2], argv[3]);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    die(e.what());
  }
}
