#include "counter_app.hpp"

#if COUNTER_HAVE_REDIS
#include "tokenlock/redis_lock.hpp"
#endif
#if COUNTER_HAVE_ETCD
#include "tokenlock/etcd_lock.hpp"
#endif

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>

#include "tokenlock/tokenlock.hpp"

namespace counter {
namespace {

bool valid_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-'))
      return false;
  return true;
}

// `value` (from the query string or the environment) as it may be shown in
// a response or the server's log: printable ASCII as it is, every other
// byte as \xNN, at most 64 bytes of it, so that it can neither drive a
// terminal, forge a log line, nor become markup.
std::string shown(const std::string& value) {
  std::string out;
  for (std::size_t i = 0; i < value.size() && i < 64; ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (std::isalnum(c) || std::strchr(" _-.,:/=+@%", c)) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (value.size() > 64) out += "...";
  return out;
}

cgi::response text(int status, const std::string& body) {
  cgi::response r;
  r.status = status;
  r.body = body + "\n";
  return r;
}

std::string svg(std::uint64_t value) {
  // Zero-padded to six digits so that the image keeps its size as the
  // count grows, until it has more digits.
  std::string digits = std::to_string(value);
  if (digits.size() < 6) digits.insert(0, 6 - digits.size(), '0');
  const std::size_t width = 12 + 11 * digits.size();
  const std::string w = std::to_string(width);
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
         "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + w + "\" height=\"24\" viewBox=\"0 0 " +
         w + " 24\" role=\"img\" aria-label=\"" + std::to_string(value) + " hits\">\n"
         "<title>" + std::to_string(value) + " hits</title>\n"
         "<rect width=\"" + w + "\" height=\"24\" rx=\"3\" fill=\"#1d1f21\"/>\n"
         "<text x=\"" + std::to_string(width / 2) + "\" y=\"17\" fill=\"#b5f566\" font-size=\"16\" "
         "font-family=\"DejaVu Sans Mono, Menlo, Consolas, monospace\" text-anchor=\"middle\" "
         "letter-spacing=\"1\">" + digits + "</text>\n"
         "</svg>\n";
}

cgi::response value_response(const std::string& id, const std::string& format, std::uint64_t value) {
  cgi::response r;
  if (format == "json") {
    r.content_type = "application/json";
    r.body = "{\"id\":\"" + id + "\",\"count\":" + std::to_string(value) + "}\n";
  } else if (format == "svg") {
    r.content_type = "image/svg+xml";
    r.body = svg(value);
  } else {
    r.body = std::to_string(value) + "\n";
  }
  return r;
}

// TOKENLOCK_COUNTER_DIR_MODE, by the rule of tokenlock's --dir-mode: octal,
// the owner may read, write and search, nobody outside the group may write
// (a lock directory writable by others is refused: docs/security.md), and
// not sticky (its users would lock each other out).
bool parse_dir_mode(const char* text, unsigned& mode, std::string& error) {
  const std::string prefix = std::string("TOKENLOCK_COUNTER_DIR_MODE must be ");
  mode = 0;
  for (const char* p = text; *p; ++p) {
    if (*p < '0' || *p > '7' || mode > 0777) {
      error = prefix + "an octal mode such as 0775, not \"" + shown(text) + "\"";
      return false;
    }
    mode = mode * 8 + static_cast<unsigned>(*p - '0');
  }
  if ((mode & 0700) != 0700 || (mode & 01002) != 0) {
    error = prefix + "a mode that gives the owner read, write and search permission and is "
            "neither writable by others nor sticky (0755, or 0775 to share with a group), not " +
            shown(text);
    return false;
  }
  return true;
}

// Adds the hit under the counter's lock: a lock directory beside the file,
// or the name "counter:<id>" in Redis or etcd.
std::uint64_t count_hit(const std::string& file, const std::string& id, const config& cfg,
                        std::error_code& ec) {
  tokenlock::update_options uo;
  uo.write.sync = cfg.sync;
  // A CGI holds its lock for milliseconds; a short lease frees a killed
  // one's lock soon on a lock server.
  constexpr std::chrono::seconds server_lease(10);
#if COUNTER_HAVE_REDIS
  if (!cfg.redis.empty()) {
    tokenlock::redis_lock_options ro;
    ro.wait = cfg.wait;
    ro.lease = server_lease;
    tokenlock::redis_lock lock(cfg.redis, "counter:" + id, ro);
    return tokenlock::increment_counter(file, lock, 1, uo, ec);
  }
#endif
#if COUNTER_HAVE_ETCD
  if (!cfg.etcd.empty()) {
    tokenlock::etcd_lock_options eo;
    eo.wait = cfg.wait;
    eo.lease = server_lease;
    tokenlock::etcd_lock lock(cfg.etcd, "counter:" + id, eo);
    return tokenlock::increment_counter(file, lock, 1, uo, ec);
  }
#endif
  tokenlock::lock_options lo;
  lo.wait = cfg.wait;
  lo.dir_mode = cfg.dir_mode;
  lo.group = cfg.group;
  // Waiters line up (lock_options::queue_waiters), so at most one of
  // them watches the lock. An update that flushes to disk holds the lock
  // for milliseconds: the watcher then takes it within tens of
  // microseconds of its release instead of hundreds. Without flushing it
  // is held for microseconds, and waking the watcher on every release
  // costs more CPU, which starting processes need, than it saves; the
  // head polls instead. The 10 ms cap bounds how long a waiter sleeps
  // when the head of the line is gone. Measured in docs/cgi-guide.md.
  lo.wake_on_release = cfg.sync != tokenlock::durability::none;
  lo.backoff_max = std::chrono::milliseconds(10);
  return tokenlock::increment_counter(file, tokenlock::rename_lock(file + ".lock", lo), 1, uo, ec);
}

}  // namespace

bool load_config(const std::function<const char*(const char*)>& getenv, config& out,
                 std::string& error) {
  out = config{};
  if (const char* dir = getenv("TOKENLOCK_COUNTER_DIR"); dir && *dir) out.dir = dir;
  if (const char* wait = getenv("TOKENLOCK_COUNTER_WAIT_MS"); wait && *wait) {
    // strtol's reading (leading blanks and a sign allowed), which the Perl,
    // PHP and Python counters reproduce: one rule for all four.
    char* end = nullptr;
    long ms = std::strtol(wait, &end, 10);
    if (*end != '\0' || ms < 0 || ms > 600000) {
      error = "TOKENLOCK_COUNTER_WAIT_MS must be 0 to 600000 milliseconds, not \"" + shown(wait) + "\"";
      return false;
    }
    out.wait = std::chrono::milliseconds(ms);
  }
  if (const char* redis = getenv("TOKENLOCK_COUNTER_REDIS"); redis && *redis) {
#if COUNTER_HAVE_REDIS
    out.redis = redis;
#else
    error = "TOKENLOCK_COUNTER_REDIS is set, but this counter.cgi was built without the Redis "
            "backend (install libhiredis-dev and rebuild)";
    return false;
#endif
  }
  if (const char* etcd = getenv("TOKENLOCK_COUNTER_ETCD"); etcd && *etcd) {
#if COUNTER_HAVE_ETCD
    out.etcd = etcd;
#else
    error = "TOKENLOCK_COUNTER_ETCD is set, but this counter.cgi was built without the etcd "
            "backend (install nlohmann-json3-dev and libssl-dev, and rebuild)";
    return false;
#endif
  }
  if (!out.redis.empty() && !out.etcd.empty()) {
    error = "TOKENLOCK_COUNTER_REDIS and TOKENLOCK_COUNTER_ETCD are both set: a counter's lock "
            "must be in one place; unset one";
    return false;
  }
  if (const char* mode = getenv("TOKENLOCK_COUNTER_DIR_MODE"); mode && *mode) {
    if (!parse_dir_mode(mode, out.dir_mode, error)) return false;
  }
  if (const char* group = getenv("TOKENLOCK_COUNTER_GROUP"); group && *group) out.group = group;
  if (const char* sync = getenv("TOKENLOCK_COUNTER_SYNC"); sync && *sync) {
    const std::optional<tokenlock::durability> level = tokenlock::durability_from_name(sync);
    if (!level) {
      error = "TOKENLOCK_COUNTER_SYNC must be none, file or file_and_dir, not \"" + shown(sync) +
              "\"";
      return false;
    }
    out.sync = *level;
  }
  return true;
}

namespace {

struct counter_query {
  std::string id = "default";
  std::string format = "text";
  std::string peek = "0";
};

// The request's method and query, read into `out`; the answer to give
// instead (405, 400 with a short reason) when they are not usable.
std::optional<cgi::response> read_query(const request& req, counter_query& out) {
  if (req.method != "GET" && req.method != "HEAD") {
    cgi::response r = text(405, "only GET and HEAD are allowed");
    r.headers.emplace_back("Allow", "GET, HEAD");
    return r;
  }
  std::map<std::string, std::string> q;
  std::string reason;
  if (!cgi::parse_query(req.query, q, reason)) return text(400, reason);
  for (const auto& [name, value] : q)
    if (name != "id" && name != "format" && name != "peek") return text(400, "unknown parameter " + shown(name));
  if (q.count("id")) out.id = q["id"];
  if (!valid_id(out.id)) return text(400, "id must be 1 to 64 letters, digits, '_' or '-'");
  if (q.count("format")) out.format = q["format"];
  if (out.format != "text" && out.format != "json" && out.format != "svg")
    return text(400, "format must be text, json or svg");
  if (q.count("peek")) out.peek = q["peek"];
  if (out.peek != "0" && out.peek != "1") return text(400, "peek must be 0 or 1");
  return std::nullopt;
}

}  // namespace

cgi::response handle(const request& req, const config& cfg, std::ostream& log) {
  counter_query query;
  if (std::optional<cgi::response> refused = read_query(req, query)) return *refused;
  const std::string& id = query.id;
  const std::string& format = query.format;
  const std::string& peek = query.peek;

  const std::string file = cfg.dir + "/" + id + ".count";
  std::error_code ec;
  std::uint64_t value = 0;
  if (peek == "1" || req.method == "HEAD") {
    value = tokenlock::read_counter(file, ec).value_or(0);
  } else {
    value = count_hit(file, id, cfg, ec);
  }
  // stale_data: a network client's cache served an old version and did not
  // let go in time; nothing was written, and a retry will likely succeed.
  if (ec == tokenlock::errc::busy || ec == tokenlock::errc::timed_out ||
      ec == tokenlock::errc::stale_data) {
    log << "counter.cgi: " << tokenlock::last_error_message() << "\n";
    cgi::response r = text(503, "the counter is busy; try again");
    r.headers.emplace_back("Retry-After", "1");
    return r;
  }
  // The lock server (TOKENLOCK_COUNTER_REDIS or _ETCD) is down or refuses: a retry
  // may find it back.
  if (ec == tokenlock::errc::server_error || ec == std::errc::connection_refused ||
      ec == std::errc::timed_out || ec == std::errc::connection_reset ||
      ec == std::errc::host_unreachable || ec == std::errc::network_unreachable ||
      ec == std::errc::protocol_error) {
    log << "counter.cgi: " << tokenlock::last_error_message() << "\n";
    cgi::response r = text(503, "the lock server is unavailable; try again");
    r.headers.emplace_back("Retry-After", "5");
    return r;
  }
  if (ec == tokenlock::errc::dir_sync_failed) {
    // The hit is counted; only its durability is in doubt.
    log << "counter.cgi: " << tokenlock::last_error_message() << "\n";
    ec.clear();
  }
  if (ec == tokenlock::errc::corrupt_data) {
    log << "counter.cgi: " << tokenlock::last_error_message() << "\n";
    return text(500, "the counter file is corrupt; it was left as it is");
  }
  if (ec == std::errc::file_too_large) {
    // The server's file size limit (RLIMIT_FSIZE) stopped the write; the
    // counter was left as it was and its lock released.
    log << "counter.cgi: " << tokenlock::last_error_message() << "; " << file
        << ": file too large: the server's file size limit for CGI programs (ulimit -f, "
           "RLIMIT_FSIZE) is below what writing the counter needs: raise it\n";
    return text(500, "internal error; see the server's error log");
  }
  if (ec) {
    log << "counter.cgi: " << tokenlock::last_error_message() << "\n";
    return text(500, "internal error; see the server's error log");
  }
  return value_response(id, format, value);
}

}  // namespace counter
