#include "cgi.hpp"

#include <boost/spirit/home/x3.hpp>

namespace cgi {

// The rule of application/x-www-form-urlencoded as a grammar, read by
// Boost.Spirit (in the Boost headers the library already needs). Boost.URL
// has this decoding but came with Boost 1.81, whose Debian 12 packages
// replace the 1.74 the project builds with; Debian's uriparser has no
// static archive, and counter.cgi is one static file (docs/cgi-guide.md).
bool percent_decode(std::string_view in, std::string& out) {
  namespace x3 = boost::spirit::x3;
  const auto escaped = x3::lit('%') >> x3::uint_parser<unsigned char, 16, 2, 2>{};
  const auto space = x3::lit('+') >> x3::attr(' ');
  const auto plain = x3::char_ - x3::lit('%') - x3::lit('+');
  out.clear();
  auto first = in.begin();
  // A NUL, escaped or not, would cut a name short where it reaches C.
  return x3::parse(first, in.end(), *(escaped | space | plain), out) && first == in.end() &&
         out.find('\0') == std::string::npos;
}

bool parse_query(std::string_view query, std::map<std::string, std::string>& out,
                 std::string& reason, const query_limits& limits) {
  out.clear();
  if (query.size() > limits.max_length) {
    reason = "query string too long";
    return false;
  }
  std::size_t start = 0;
  while (start <= query.size()) {
    std::size_t end = query.find('&', start);
    if (end == std::string_view::npos) end = query.size();
    std::string_view piece = query.substr(start, end - start);
    start = end + 1;
    if (piece.empty()) {
      if (end == query.size()) break;
      continue;
    }
    std::size_t eq = piece.find('=');
    std::string name, value;
    if (!percent_decode(piece.substr(0, eq), name) ||
        (eq != std::string_view::npos && !percent_decode(piece.substr(eq + 1), value))) {
      reason = "invalid percent-encoding";
      return false;
    }
    if (name.empty()) {
      reason = "parameter without a name";
      return false;
    }
    if (name.size() > limits.max_name || value.size() > limits.max_value) {
      reason = "parameter too long";
      return false;
    }
    if (out.count(name)) {
      reason = "repeated parameter";
      return false;
    }
    if (out.size() == limits.max_parameters) {
      reason = "too many parameters";
      return false;
    }
    out.emplace(std::move(name), std::move(value));
    if (end == query.size()) break;
  }
  return true;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 405: return "Method Not Allowed";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

void write_response(std::ostream& out, const response& r, bool head_only) {
  out << "Status: " << r.status << ' ' << reason_phrase(r.status) << "\r\n"
      << "Content-Type: " << r.content_type << "\r\n"
      << "Content-Length: " << r.body.size() << "\r\n"
      << "Cache-Control: no-store\r\n"
      // A browser must not guess HTML in a text answer that echoes input.
      << "X-Content-Type-Options: nosniff\r\n";
  for (const auto& [name, value] : r.headers) out << name << ": " << value << "\r\n";
  out << "\r\n";
  if (!head_only) out << r.body;
  out.flush();
}

}  // namespace cgi
