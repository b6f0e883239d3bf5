// A small, strict CGI helper: parsing QUERY_STRING and writing responses.
//
// Strict on purpose: a counter id comes from the URL and becomes part of a
// file name, so anything unexpected is refused with a reason instead of
// being guessed at: invalid percent-encoding, a repeated or unknown
// parameter, over-long input, NUL bytes.
#pragma once

#include <cstddef>
#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace cgi {

struct query_limits {
  std::size_t max_length = 2048;     // of the whole QUERY_STRING
  std::size_t max_parameters = 16;
  std::size_t max_name = 32;         // decoded
  std::size_t max_value = 256;       // decoded
};

// Parses "a=1&b=x%20y" into name -> value. Both are percent-decoded ('+' is
// a space). A parameter without '=' has an empty value; empty pieces
// ("a=1&&b=2", a trailing '&') are ignored. On failure returns false and a
// short reason fit for a 400 response (no paths, no echo of long input).
bool parse_query(std::string_view query, std::map<std::string, std::string>& out,
                 std::string& reason, const query_limits& limits = {});

// Percent-decoding of one component; false on a bad escape or a NUL.
bool percent_decode(std::string_view in, std::string& out);

struct response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::vector<std::pair<std::string, std::string>> headers;  // extra ones
  std::string body;
};

// Writes a CGI response: Status, Content-Type, Content-Length,
// Cache-Control: no-store, the extra headers, and the body unless
// `head_only` (a HEAD request).
void write_response(std::ostream& out, const response& r, bool head_only);

const char* reason_phrase(int status);

}  // namespace cgi
