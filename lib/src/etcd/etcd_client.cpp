#include "etcd/etcd_client.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include <curl/curl.h>

namespace tokenlock::detail {

namespace {

constexpr char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Splits a stream of JSON objects (the gateway's streaming answers put one
// object per message) at the end of each top-level object.
class object_splitter {
 public:
  // Feeds bytes; calls `on_object` with every complete object, stopping
  // (false) when it returns false.
  template <class F>
  bool feed(const char* p, std::size_t n, F&& on_object) {
    for (std::size_t i = 0; i < n; ++i) {
      const char c = p[i];
      if (depth_ > 0) buf_ += c;
      if (in_string_) {
        if (escaped_) escaped_ = false;
        else if (c == '\\') escaped_ = true;
        else if (c == '"') in_string_ = false;
        continue;
      }
      if (c == '"' && depth_ > 0) in_string_ = true;
      else if (c == '{') {
        if (depth_++ == 0) buf_ = "{";
      } else if (c == '}' && depth_ > 0 && --depth_ == 0) {
        if (!on_object(buf_)) return false;
        buf_.clear();
      }
    }
    return true;
  }

 private:
  std::string buf_;
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false;
};

struct request_state {
  std::string answer;
  object_splitter splitter;
  std::function<bool(const std::string&)> on_object;  // streaming: abort when false
};

size_t on_write(char* p, size_t size, size_t n, void* user) {
  auto* st = static_cast<request_state*>(user);
  const std::size_t len = size * n;
  if (!st->on_object) {
    st->answer.append(p, len);
    return len;
  }
  return st->splitter.feed(p, len, st->on_object) ? len : 0;
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::error_code transport_code(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_CONNECT: return std::make_error_code(std::errc::connection_refused);
    case CURLE_OPERATION_TIMEDOUT: return std::make_error_code(std::errc::timed_out);
    case CURLE_COULDNT_RESOLVE_HOST: return std::make_error_code(std::errc::host_unreachable);
    default: return std::make_error_code(std::errc::protocol_error);
  }
}

std::string transport_advice(CURLcode rc, bool tls) {
  switch (rc) {
    case CURLE_COULDNT_CONNECT: return "is etcd running there, and is the client port right?";
    case CURLE_OPERATION_TIMEDOUT: return "no answer in time: is the member stopped or overloaded?";
    case CURLE_COULDNT_RESOLVE_HOST: return "the host name does not resolve: name it by address";
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
      return "the member's certificate is not signed by a CA we trust: name the CA bundle with "
             "?cacert=PATH";
    default:
      return tls ? "is the member serving HTTPS (etcds://) on that port?"
                 : "is the member serving plain HTTP (etcd://) on that port, not HTTPS (etcds://)?";
  }
}

// The gRPC code and message of an error answer (two shapes: unary calls
// and streams); false when `j` is not one.
bool grpc_error(const json& j, int& code, std::string& message) {
  if (!j.is_object() || !j.contains("error")) return false;
  const json& e = j["error"];
  if (e.is_object()) {
    code = e.value("grpc_code", 2);
    message = e.value("message", std::string("unknown error"));
  } else {
    code = j.value("code", 2);
    message = j.value("message", e.is_string() ? e.get<std::string>() : std::string("unknown"));
  }
  return true;
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

long long json_int(const json& j, const char* field) {
  if (!j.is_object()) return 0;
  const auto it = j.find(field);
  if (it == j.end()) return 0;
  if (it->is_number_integer()) return it->get<long long>();
  if (it->is_string()) {
    try {
      return std::stoll(it->get<std::string>());
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;
}

etcd_client::etcd_client(etcd_url url, std::chrono::milliseconds connect_timeout,
                         std::chrono::milliseconds command_timeout)
    : url_(std::move(url)), display_(url_.display()), connect_timeout_(connect_timeout),
      command_timeout_(command_timeout) {
  global_init();
}

etcd_client::~etcd_client() {
  if (curl_) curl_easy_cleanup(static_cast<CURL*>(curl_));
  if (watch_curl_) curl_easy_cleanup(static_cast<CURL*>(watch_curl_));
}

namespace {

// One POST on `handle` (made on first use, then reused: libcurl keeps the
// connection to a member open between requests).
CURLcode perform(void*& handle, const etcd_url& url, const std::string& member, const char* path,
                 const std::string& body, const std::string& token,
                 std::chrono::milliseconds connect_timeout, std::chrono::milliseconds timeout,
                 request_state& st, long& status) {
  if (!handle) handle = curl_easy_init();
  CURL* h = static_cast<CURL*>(handle);
  if (!h) return CURLE_OUT_OF_MEMORY;
  const std::string target = member + path;
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  if (!token.empty()) headers = curl_slist_append(headers, ("Authorization: " + token).c_str());
  curl_easy_setopt(h, CURLOPT_URL, target.c_str());
  curl_easy_setopt(h, CURLOPT_POST, 1L);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(connect_timeout.count()));
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<long long>(1, timeout.count())));
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &st);
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  if (!url.cacert.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, url.cacert.c_str());
  const CURLcode rc = curl_easy_perform(h);
  status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
  curl_slist_free_all(headers);
  return rc;
}

std::string first_object(const std::string& answer) {
  object_splitter s;
  std::string first;
  s.feed(answer.data(), answer.size(), [&](const std::string& o) {
    first = o;
    return false;
  });
  return first;
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
  token_ = out.value("token", std::string());
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
  request_state st;
  long status = 0;
  const CURLcode rc = perform(curl_, url_, url_.members[m], path, text, token_, connect_timeout_,
                              command_timeout_, st, status);
  if (rc != CURLE_OK) {
    last = make_failure(transport_code(rc), url_.members[m] + ": " + curl_easy_strerror(rc) + " (" +
                                                transport_advice(rc, url_.tls) + ")");
    return false;
  }
  json j = json::parse(first_object(st.answer), nullptr, false);
  int code = 0;
  std::string message;
  const bool is_error = !j.is_discarded() && grpc_error(j, code, message);
  if (j.is_discarded() || (status != 200 && !is_error)) {
    last = make_failure(std::make_error_code(std::errc::protocol_error),
                        url_.members[m] + ": HTTP " + std::to_string(status) +
                            " with an answer that is not etcd's JSON: is this an etcd client port?");
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
    last = make_failure(errc::server_error, url_.members[m] + ": " + message);
    return false;
  }
  if (!token_.empty() && !reauthenticated && message.find("invalid auth token") != std::string::npos) {
    reauthenticated = true;
    result = authenticate(step);
    return result ? true : ask_member(m, step, path, text, out, not_found_out, reauthenticated, last, result);
  }
  result = make_failure(errc::server_error, "tokenlock: " + std::string(step) + " " + url_.members[m] +
                                                " (" + path + "): " + message + ": " +
                                                server_advice(message));
  return true;
}

failure etcd_client::call(const char* step, const char* path, const json& body, json& out,
                          bool* not_found_out) {
  if (!url_.user.empty() && token_.empty())
    if (failure f = authenticate(step)) return f;
  const std::string text = body.dump();
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
  deleted = false;
  if (!url_.user.empty() && token_.empty())
    if (failure f = authenticate("wait")) return f;
  const std::string body =
      json{{"create_request",
            {{"key", base64_encode(key)},
             {"start_revision", std::to_string(from_rev)},
             {"filters", json::array({"NOPUT"})}}}}
          .dump();
  const std::size_t n = url_.members.size();
  std::string errors, server_message;
  std::error_code last_code;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t m = (current_ + i) % n;
    request_state st;
    st.on_object = [&](const std::string& o) {
      const json j = json::parse(o, nullptr, false);
      int code = 0;
      if (j.is_discarded() || grpc_error(j, code, server_message)) return false;
      const json& r = j.contains("result") ? j["result"] : j;
      if (r.value("canceled", false) || (r.contains("events") && !r["events"].empty())) {
        deleted = true;
        return false;
      }
      return true;
    };
    long status = 0;
    const CURLcode rc = perform(watch_curl_, url_, url_.members[m], "/v3/watch", body, token_,
                                connect_timeout_, timeout, st, status);
    if (deleted) return {};
    if (!server_message.empty())
      return make_failure(errc::server_error, "tokenlock: wait " + url_.members[m] +
                                                  " (/v3/watch): " + server_message + ": " +
                                                  server_advice(server_message));
    // The watch ran its time: nothing was deleted. (A member that stopped
    // answering is found by the caller's next request, which fails over.)
    if (rc == CURLE_OPERATION_TIMEDOUT) return {};
    last_code = rc == CURLE_OK ? std::make_error_code(std::errc::connection_reset) : transport_code(rc);
    errors = url_.members[m] + ": " +
             (rc == CURLE_OK ? std::string("the watch ended early") : curl_easy_strerror(rc));
  }
  return make_failure(last_code, "tokenlock: wait " + display_ +
                                     ": no member kept a watch (last: " + errors + ")");
}

}  // namespace tokenlock::detail
