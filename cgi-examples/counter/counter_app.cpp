#include "counter_app.hpp"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenlock/open_lock.hpp"
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
    // An id is letters, digits, '_' and '-' (valid_id): UTF-8 always.
    // Should that change, a byte that is not UTF-8 shows as U+FFFD instead
    // of the answer failing.
    using json = nlohmann::ordered_json;
    r.body = json{{"id", id}, {"count", value}}.dump(-1, ' ', false, json::error_handler_t::replace) +
             "\n";
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

// The spec of the lock directory <base>/<id>.count.lock. A relative path
// that looks like a URL ("data://x") is written ./data://x (open_lock.hpp).
std::string directory_spec(const std::string& base, const std::string& id) {
  const std::string path = base + "/" + id + ".count.lock";
  return path.find("://") != std::string::npos && path.front() != '/' ? "./" + path : path;
}

// The spec of counter `id`'s lock (config::lock).
std::string lock_spec_of(const config& cfg, const std::string& id) {
  if (cfg.backend != tokenlock::lock_backend::directory) return cfg.lock + "#counter:" + id;
  return directory_spec(cfg.lock.empty() ? cfg.dir : cfg.lock, id);
}

tokenlock::open_options open_options_of(const config& cfg) {
  tokenlock::open_options o;
  o.wait = cfg.wait;
  o.lease = cfg.lease;
  o.directory.dir_mode = cfg.dir_mode;
  o.directory.group = cfg.group;
  // Waiters line up (lock_options::queue_waiters), so at most one of
  // them watches the lock. An update that flushes to disk holds the lock
  // for milliseconds: the watcher then takes it within tens of
  // microseconds of its release instead of hundreds. Without flushing it
  // is held for microseconds, and waking the watcher on every release
  // costs more CPU, which starting processes need, than it saves; the
  // head polls instead. The 10 ms cap bounds how long a waiter sleeps
  // when the head of the line is gone. Measured in docs/cgi-guide.md.
  o.directory.wake_on_release = cfg.sync != tokenlock::durability::none;
  o.directory.backoff_max = std::chrono::milliseconds(10);
  return o;
}

// Adds the hit under the counter's lock (config::lock).
std::uint64_t count_hit(const std::string& file, const std::string& id, const config& cfg,
                        std::error_code& ec) {
  const std::unique_ptr<tokenlock::lock> lock =
      tokenlock::open_lock(lock_spec_of(cfg, id), open_options_of(cfg), ec);
  if (ec) return 0;
  tokenlock::update_options uo;
  uo.write.sync = cfg.sync;
  // Lock directories beside the counters share their filesystem, and every
  // commit is fenced. Placed elsewhere by the spec, one on another
  // filesystem would commit without the fence: refused instead (500).
  uo.require_fence = !cfg.lock.empty();
  return tokenlock::increment_counter(file, *lock, 1, uo, ec);
}

// The variables that say where the locks are: the current name first,
// then the older ones, each of which names a server of one backend.
struct lock_variable {
  const char* name;
  std::optional<tokenlock::lock_backend> only;
  const char* backend;  // `only` in words
  const char* server;   // what its URL names, and the schemes it takes
};
const lock_variable lock_variables[] = {
    {"TOKENLOCK_COUNTER_LOCK", std::nullopt, "", ""},
    {"TOKENLOCK_COUNTER_REDIS", tokenlock::lock_backend::redis, "Redis",
     "a Redis server (redis://, rediss:// or unix://)"},
    {"TOKENLOCK_COUNTER_ETCD", tokenlock::lock_backend::etcd, "etcd",
     "an etcd cluster (etcd:// or etcds://)"},
};

// Into `set`, the one lock variable that is set (nullptr: none); false,
// with the reason, when more than one is: no silent choice between places.
bool find_lock_variable(const std::function<const char*(const char*)>& getenv,
                        const lock_variable*& set, std::string& error) {
  set = nullptr;
  std::vector<std::string> names;
  for (const lock_variable& v : lock_variables) {
    const char* value = getenv(v.name);
    if (!value || !*value) continue;
    if (!set) set = &v;
    names.push_back(v.name);
  }
  if (names.size() < 2) return true;
  error = names.size() == 2 ? names[0] + " and " + names[1] + " are both set"
                            : names[0] + ", " + names[1] + " and " + names[2] + " are all set";
  error += ": a counter's lock must be in one place; set TOKENLOCK_COUNTER_LOCK only "
           "(TOKENLOCK_COUNTER_REDIS=URL and TOKENLOCK_COUNTER_ETCD=URL are older names for "
           "TOKENLOCK_COUNTER_LOCK=URL)";
  return false;
}

// `spec`, the value of `var`, into out.lock, out.backend and out.lease,
// checked by opening a lock by it, which connects to nothing. Messages
// show a URL only as the library masks it.
bool read_lock_spec(const lock_variable& var, const std::string& spec, config& out,
                    std::string& error) {
  const std::string name = var.name;
  std::error_code ec;
  // A server URL needs a lock's name after '#' to be a spec; to a path
  // the same characters are more of it, and nothing looks at it.
  const std::unique_ptr<tokenlock::lock> probe = tokenlock::open_lock(spec + "#counter:", {}, ec);
  if (ec == tokenlock::errc::backend_unavailable) {
    error = name + (var.only ? " is set, but this counter.cgi was built without the " +
                                   std::string(var.backend) + " backend: "
                             : " names a lock server whose backend this counter.cgi was built "
                               "without: ") +
            tokenlock::last_error_message() +
            "; a counter.cgi linked statically also needs the backend's archives (libhiredis.a for "
            "Redis, libssl.a and libcrypto.a for etcd)";
    return false;
  }
  if (ec) {
    error = name + " is neither a directory's path nor a lock server's URL (without #NAME: the "
            "counter adds #counter:ID): " + tokenlock::last_error_message();
    return false;
  }
  const tokenlock::lock_backend backend = probe->backend();
  if (var.only && backend != *var.only) {
    error = name + " must be the URL of " + var.server + "; it reads as a spec of the " +
            tokenlock::backend_name(backend) + " backend (TOKENLOCK_COUNTER_LOCK takes any backend's)";
    return false;
  }
  if (backend != tokenlock::lock_backend::directory && spec.find('#') != std::string::npos) {
    error = name + ": a lock server's URL here ends before any '#': the counter names each "
            "counter's lock counter:ID itself (a '#' in a password is written %23)";
    return false;
  }
  out.lock = spec;
  out.backend = backend;
  out.lease = backend == tokenlock::lock_backend::directory ? directory_lease : server_lease;
  return true;
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
  const lock_variable* lock = nullptr;
  if (!find_lock_variable(getenv, lock, error)) return false;
  if (lock && !read_lock_spec(*lock, getenv(lock->name), out, error)) return false;
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

// The answer to a count or read that failed with `ec`; the details go to
// `log`, the server's error log.
cgi::response failure_response(const std::error_code& ec, const std::string& file,
                               std::ostream& log) {
  log << "counter.cgi: " << tokenlock::last_error_message();
  // The server's file size limit (RLIMIT_FSIZE) stopped the write; the
  // counter was left as it was and its lock released.
  if (ec == std::errc::file_too_large)
    log << "; " << file << ": file too large: the server's file size limit for CGI programs "
        << "(ulimit -f, RLIMIT_FSIZE) is below what writing the counter needs: raise it";
  log << "\n";
  // stale_data: a network client's cache served an old version and did not
  // let go in time; nothing was written, and a retry will likely succeed.
  if (ec == tokenlock::errc::busy || ec == tokenlock::errc::timed_out ||
      ec == tokenlock::errc::stale_data) {
    cgi::response r = text(503, "the counter is busy; try again");
    r.headers.emplace_back("Retry-After", "1");
    return r;
  }
  // The lock server (config::lock) is down or refuses: a retry may find it
  // back.
  if (ec == tokenlock::errc::server_error || ec == std::errc::connection_refused ||
      ec == std::errc::timed_out || ec == std::errc::connection_reset ||
      ec == std::errc::host_unreachable || ec == std::errc::network_unreachable ||
      ec == std::errc::protocol_error) {
    cgi::response r = text(503, "the lock server is unavailable; try again");
    r.headers.emplace_back("Retry-After", "5");
    return r;
  }
  if (ec == tokenlock::errc::corrupt_data)
    return text(500, "the counter file is corrupt; it was left as it is");
  return text(500, "internal error; see the server's error log");
}

}  // namespace

cgi::response handle(const request& req, const config& cfg, std::ostream& log) {
  counter_query query;
  if (std::optional<cgi::response> refused = read_query(req, query)) return *refused;
  const std::string file = cfg.dir + "/" + query.id + ".count";
  std::error_code ec;
  const bool look_only = query.peek == "1" || req.method == "HEAD";
  const std::uint64_t value = look_only ? tokenlock::read_counter(file, ec).value_or(0)
                                        : count_hit(file, query.id, cfg, ec);
  if (ec == tokenlock::errc::dir_sync_failed) {
    // The hit is counted; only its durability is in doubt.
    log << "counter.cgi: " << tokenlock::last_error_message() << "\n";
    ec.clear();
  }
  if (ec) return failure_response(ec, file, log);
  return value_response(query.id, query.format, value);
}

}  // namespace counter
