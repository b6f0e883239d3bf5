#include "etcd/etcd_client.hpp"

#include <cstring>
#include <thread>

#include "etcd/etcd_answer.hpp"
#include "etcd/etcd_wait_stats.hpp"
#include "etcd/http_client.hpp"

namespace tokenlock::detail {

namespace {

constexpr char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::error_code transport_code(io_status s) {
  switch (s) {
    case io_status::refused: return std::make_error_code(std::errc::connection_refused);
    case io_status::timed_out: return std::make_error_code(std::errc::timed_out);
    case io_status::unresolved: return std::make_error_code(std::errc::host_unreachable);
    default: return std::make_error_code(std::errc::protocol_error);
  }
}

std::string transport_advice(io_status s, bool tls) {
  switch (s) {
    case io_status::refused: return "is etcd running there, and is the client port right?";
    case io_status::timed_out: return "no answer in time: is the member stopped or overloaded?";
    case io_status::unresolved: return "the host name does not resolve: name it by address";
    case io_status::cert_untrusted:
      return "the member's certificate is not signed by a CA we trust, or not for this host: name "
             "the CA bundle with ?cacert=PATH";
    default:
      return tls ? "is the member serving HTTPS (etcds://) on that port?"
                 : "is the member serving plain HTTP (etcd://) on that port, not HTTPS (etcds://)?";
  }
}

bool retry_elsewhere(int code, const std::string& m) {
  return code == 14 || m.find("no leader") != std::string::npos ||
         m.find("leader changed") != std::string::npos ||
         m.find("timed out") != std::string::npos ||
         m.find("too many requests") != std::string::npos;
}

std::string server_advice(const std::string& m) {
  if (m.find("invalid user ID or password") != std::string::npos)
    return "wrong user or password: correct the credentials in the URL";
  if (m.find("user name is empty") != std::string::npos ||
      m.find("user name not found") != std::string::npos)
    return "the cluster has authentication on: give user:password@ in the URL";
  if (m.find("permission denied") != std::string::npos)
    return "the user's roles do not allow this: grant it readwrite on the lock's key prefix";
  if (m.find("authentication is not enabled") != std::string::npos)
    return "the cluster has authentication off: remove user:password@ from the URL";
  return "see the member's log";
}

}  // namespace

std::string base64_encode(const std::string& in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) |
                       (static_cast<unsigned char>(in[i + 1]) << 8) | static_cast<unsigned char>(in[i + 2]);
    out += b64chars[v >> 18];
    out += b64chars[(v >> 12) & 63];
    out += b64chars[(v >> 6) & 63];
    out += b64chars[v & 63];
  }
  if (i < in.size()) {
    unsigned v = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
    out += b64chars[v >> 18];
    out += b64chars[(v >> 12) & 63];
    out += i + 1 < in.size() ? b64chars[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

bool base64_decode(const std::string& in, std::string& out) {
  out.clear();
  unsigned v = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const char* p = std::strchr(b64chars, c);
    if (!p || c == '\0') return false;
    v = (v << 6) | static_cast<unsigned>(p - b64chars);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((v >> bits) & 0xff);
    }
  }
  return true;
}

etcd_client::etcd_client(etcd_url url, std::chrono::milliseconds connect_timeout,
                         std::chrono::milliseconds command_timeout)
    : url_(std::move(url)), display_(url_.display()), connect_timeout_(connect_timeout),
      command_timeout_(command_timeout) {}

etcd_client::~etcd_client() = default;

http_connection& etcd_client::connection(connections& v, std::size_t m) {
  if (v.size() != url_.members.size()) v.resize(url_.members.size());
  if (!v[m]) v[m] = std::make_unique<http_connection>(url_.members[m], url_.cacert);
  v[m]->set_wake_fd(wake_fd_);
  return *v[m];
}

void etcd_client::set_wake_fd(int fd) {
  wake_fd_ = fd;
  for (connections* v : {&requests_, &watches_})
    for (auto& conn : *v)
      if (conn) conn->set_wake_fd(fd);
}

namespace {

// The outcome of a request that failed in transport, for the next member.
failure transport_failure(const std::string& member, const http_outcome& a, bool tls) {
  if (a.bad_answer)
    return make_failure(std::make_error_code(std::errc::protocol_error),
                        member + ": the answer is not HTTP as etcd speaks it (" + a.detail + "; " +
                            transport_advice(io_status::failed, tls) + ")");
  return make_failure(transport_code(a.status),
                      member + ": " + a.detail + " (" + transport_advice(a.status, tls) + ")");
}

failure interrupted(const std::string& step, const std::string& member, const char* path) {
  return make_failure(std::make_error_code(std::errc::interrupted),
                      "tokenlock: " + step + " " + member + " (" + path +
                          "): a stop signal (SIGTERM, SIGINT or SIGHUP) arrived; the request was "
                          "abandoned");
}

// The moment `d` from now.
io_deadline after(std::chrono::milliseconds d) {
  return std::chrono::steady_clock::now() + std::max(d, std::chrono::milliseconds(1));
}

}  // namespace

failure etcd_client::authenticate(const char* step) {
  token_.clear();
  json out;
  const std::string user = std::move(url_.user);  // no token while asking for one
  url_.user.clear();
  failure f = call(step, "/v3/auth/authenticate", json{{"name", user}, {"password", url_.password}}, out);
  url_.user = user;
  if (f) return f;
  const auto t = out.find("token");
  if (t != out.end() && t->is_string()) token_ = t->get<std::string>();
  if (token_.empty())
    return make_failure(errc::server_error, "tokenlock: " + std::string(step) + " " + display_ +
                                                ": authenticate as " + user +
                                                ": the answer holds no token");
  return {};
}

// One request to member `m`: true when it settled the call (`result` is
// then its outcome), false to go on to the next member (`last` says why).
bool etcd_client::ask_member(std::size_t m, const char* step, const char* path,
                             const std::string& text, json& out, bool* not_found_out,
                             bool& reauthenticated, failure& last, failure& result) {
  const std::string& member = url_.members[m];
  http_outcome a = connection(requests_, m).post(path, text, token_, after(connect_timeout_),
                                                 after(command_timeout_));
  if (a.status == io_status::interrupted) {
    result = interrupted(step, member, path);
    return true;
  }
  if (a.status == io_status::closed && a.answer_started) {
    // The member read the request and began to answer: it may have applied
    // it (a Txn is not idempotent), so it does not go to the next member.
    result = make_failure(std::make_error_code(std::errc::protocol_error),
                          "tokenlock: " + std::string(step) + " " + member + " (" + path +
                              "): the connection closed in the middle of the answer (" + a.detail +
                              "); the request may have been applied: look at the lock's state "
                              "before repeating it");
    return true;
  }
  if (!a.ok()) {
    last = transport_failure(member, a, url_.tls);
    return false;
  }
  if (const auto& hook = this_thread_etcd_wait_stats().on_answer) hook();
  json j = first_answer_object(a.body);
  int code = 0;
  std::string message;
  const bool is_error = !j.is_discarded() && grpc_error(j, code, message);
  if (j.is_discarded() || !j.is_object() || (a.http_status != 200 && !is_error)) {
    last = make_failure(std::make_error_code(std::errc::protocol_error),
                        member + ": HTTP " + std::to_string(a.http_status) +
                            " with an answer that is not etcd's JSON: is this an etcd client port? (" +
                            transport_advice(io_status::failed, url_.tls) + ")");
    return false;
  }
  if (!is_error || (code == 5 && not_found_out)) {
    if (is_error) *not_found_out = true;
    current_ = m;
    out = std::move(j);
    result = {};
    return true;
  }
  if (retry_elsewhere(code, message)) {
    last = make_failure(errc::server_error, member + ": " + message);
    return false;
  }
  if (!token_.empty() && !reauthenticated && message.find("invalid auth token") != std::string::npos) {
    reauthenticated = true;
    result = authenticate(step);
    return result ? true : ask_member(m, step, path, text, out, not_found_out, reauthenticated, last, result);
  }
  result = make_failure(errc::server_error, "tokenlock: " + std::string(step) + " " + member + " (" +
                                                path + "): " + message + ": " + server_advice(message));
  return true;
}

failure etcd_client::call(const char* step, const char* path, const json& body, json& out,
                          bool* not_found_out) {
  if (!url_.user.empty() && token_.empty())
    if (failure f = authenticate(step)) return f;
  std::string text;
  try {
    text = body.dump();
  } catch (const json::exception&) {
    return make_failure(errc::bad_argument, "tokenlock: " + std::string(step) + " " + display_ +
                                                ": a name, value or credential that is not valid "
                                                "UTF-8: etcd's JSON gateway takes UTF-8 only");
  }
  const std::size_t n = url_.members.size();
  const auto deadline = std::chrono::steady_clock::now() + command_timeout_ * static_cast<int>(n);
  failure last, result;
  bool reauthenticated = false;
  for (;;) {
    for (std::size_t i = 0; i < n; ++i)
      if (ask_member((current_ + i) % n, step, path, text, out, not_found_out, reauthenticated, last,
                     result))
        return result;
    if (std::chrono::steady_clock::now() + std::chrono::milliseconds(100) >= deadline) break;
    // Every member failed: a leader election takes about one election
    // timeout (1 s by default); try the round again after a pause.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return make_failure(last.code, "tokenlock: " + std::string(step) + " " + display_ +
                                     ": no member answered (last: " + last.message + ")");
}

failure etcd_client::wait_delete(const std::string& key, long long from_rev,
                                 std::chrono::milliseconds timeout, bool& deleted) {
  return wait_change(watch_target{key, {}, false}, from_rev, timeout, deleted);
}

failure etcd_client::wait_change(const watch_target& target, long long from_rev,
                                 std::chrono::milliseconds timeout, bool& deleted) {
  deleted = false;
  if (!url_.user.empty() && token_.empty())
    if (failure f = authenticate("wait")) return f;
  json create{{"key", base64_encode(target.key)}, {"start_revision", std::to_string(from_rev)}};
  if (!target.range_end.empty()) create["range_end"] = base64_encode(target.range_end);
  if (!target.puts) create["filters"] = json::array({"NOPUT"});
  const std::string body = json{{"create_request", create}}.dump();
  const std::size_t n = url_.members.size();
  failure last;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t m = (current_ + i) % n;
    const std::string& member = url_.members[m];
    watch_reader w;
    http_connection& conn = connection(watches_, m);
    const http_outcome a = conn.post("/v3/watch", body, token_, after(connect_timeout_), after(timeout),
                                     [&](const char* p, std::size_t len) { return w.feed(p, len); });
    conn.close();  // the watch's answer never ends: its connection is not reused
    if (w.deleted()) return deleted = true, failure{};
    if (a.status == io_status::interrupted) return interrupted("wait", member, "/v3/watch");
    if (!w.server_message().empty())
      return make_failure(errc::server_error, "tokenlock: wait " + member + " (/v3/watch): " +
                                                  w.server_message() + ": " + server_advice(w.server_message()));
    if (w.malformed())
      return make_failure(std::make_error_code(std::errc::protocol_error),
                          "tokenlock: wait " + member + " (/v3/watch): the watch's answer is not "
                          "etcd's JSON: is this an etcd client port?");
    // The watch ran its time: nothing was deleted. (A member that stopped
    // answering is found by the caller's next request, which fails over.)
    if (a.status == io_status::timed_out) return {};
    last = a.ok() ? make_failure(std::make_error_code(std::errc::connection_reset),
                                 member + ": the watch ended early")
                  : transport_failure(member, a, url_.tls);
  }
  return make_failure(last.code, "tokenlock: wait " + display_ +
                                     ": no member kept a watch (last: " + last.message + ")");
}

}  // namespace tokenlock::detail
