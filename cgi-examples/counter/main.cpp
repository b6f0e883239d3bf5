// counter.cgi: a hit counter for any web server that runs CGI programs.
// docs/cgi-guide.md describes deployment.
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <system_error>

#include "counter_app.hpp"
#include "tokenlock/signal_cleanup.hpp"

namespace {

// A request body is never used, but it is read (up to a bound) before the
// response: a CGI that exits while the server still writes the body to its
// standard input makes Apache reset the connection instead of answering.
void drain_request_body(const char* content_length) {
  if (!content_length) return;
  long long left = std::atoll(content_length);
  if (left > (1 << 20)) left = 1 << 20;
  char buf[4096];
  while (left > 0 && std::cin.read(buf, std::min<long long>(left, sizeof buf)))
    left -= std::cin.gcount();
}

}  // namespace

int main() {
  std::ios::sync_with_stdio(false);
  // A server that gives up on a slow request sends SIGTERM: the lock is
  // then released at once instead of when the next process finds us dead.
  std::error_code ignored;
  tokenlock::install_signal_cleanup(ignored);
  // A write past the server's file size limit (RLIMIT_FSIZE) then fails
  // with EFBIG and is answered 500, the counter left as it was and its lock
  // released, instead of killing the CGI with a temporary file left behind.
  std::signal(SIGXFSZ, SIG_IGN);
  auto env = [](const char* name) -> const char* { return std::getenv(name); };
  drain_request_body(env("CONTENT_LENGTH"));
  const char* method = env("REQUEST_METHOD");
  counter::config cfg;
  std::string error;
  if (!counter::load_config(env, cfg, error)) {
    std::cerr << "counter.cgi: misconfigured: " << error << "\n";
    cgi::response r;
    r.status = 500;
    r.body = "the counter is misconfigured; see the server's error log\n";
    cgi::write_response(std::cout, r, method && std::string(method) == "HEAD");
    return 0;
  }
  counter::request req{method ? method : "", env("QUERY_STRING") ? env("QUERY_STRING") : ""};
  cgi::write_response(std::cout, counter::handle(req, cfg, std::cerr), req.method == "HEAD");
  return 0;
}
