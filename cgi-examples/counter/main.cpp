// counter.cgi: a hit counter for any web server that runs CGI programs.
// docs/cgi-guide.md describes deployment.
#include <cstdlib>
#include <iostream>

#include "counter_app.hpp"

int main() {
  std::ios::sync_with_stdio(false);
  auto env = [](const char* name) -> const char* { return std::getenv(name); };
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
