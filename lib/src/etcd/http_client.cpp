#include "etcd/http_client.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace tokenlock::detail {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// A decimal or hexadecimal count of at most `max`; false when it is not
// one (or larger).
bool parse_count(const std::string& s, int base, std::size_t max, std::size_t& out) {
  if (s.empty() || s.size() > 16) return false;
  unsigned long long v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (base == 16 && c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (base == 16 && c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return false;
    v = v * static_cast<unsigned>(base) + static_cast<unsigned>(d);
    if (v > max) return false;
  }
  out = static_cast<std::size_t>(v);
  return true;
}

}  // namespace

http_answer_parser::state http_answer_parser::bad(std::string why) {
  error_ = std::move(why);
  return result_ = state::bad;
}

// The status line and headers in head_ (without the blank line).
http_answer_parser::state http_answer_parser::parse_head() {
  std::size_t eol = head_.find("\r\n");
  const std::string first = head_.substr(0, eol);
  if (first.size() < 12 || first.compare(0, 7, "HTTP/1.") != 0 || first[8] != ' ' ||
      !std::isdigit(static_cast<unsigned char>(first[9])) ||
      !std::isdigit(static_cast<unsigned char>(first[10])) ||
      !std::isdigit(static_cast<unsigned char>(first[11])))
    return bad("the answer does not start with an HTTP/1.x status line");
  status_ = std::stoi(first.substr(9, 3));
  keep_alive_ = first[7] == '1';
  bool chunked = false, has_length = false;
  std::size_t length = 0;
  while (eol != std::string::npos) {
    const std::size_t start = eol + 2;
    eol = head_.find("\r\n", start);
    const std::string line = head_.substr(start, eol == std::string::npos ? std::string::npos : eol - start);
    const auto colon = line.find(':');
    if (colon == std::string::npos || colon == 0) return bad("a header line without a name: \"" + line.substr(0, 60) + "\"");
    const std::string name = lower(line.substr(0, colon)), value = lower(trim(line.substr(colon + 1)));
    if (name == "content-length") {
      if (!parse_count(value, 10, max_body_, length))
        return bad("a Content-Length that is not a number up to " + std::to_string(max_body_) + ": \"" +
                   value.substr(0, 30) + "\"");
      has_length = true;
    } else if (name == "transfer-encoding") {
      chunked = value.find("chunked") != std::string::npos;
    } else if (name == "connection") {
      if (value.find("close") != std::string::npos) keep_alive_ = false;
      if (value.find("keep-alive") != std::string::npos) keep_alive_ = true;
    }
  }
  head_.clear();
  if (status_ >= 100 && status_ < 200) return state::more;  // an interim answer: the real one follows
  if (status_ == 204 || status_ == 304 || (has_length && length == 0 && !chunked)) phase_ = phase::end;
  else if (chunked) phase_ = phase::chunk_size;
  else if (has_length) {
    phase_ = phase::length;
    left_ = length;
  } else {
    phase_ = phase::until_close;
    keep_alive_ = false;
  }
  return result_ = phase_ == phase::end ? state::done : state::more;
}

http_answer_parser::state http_answer_parser::deliver(const char* p, std::size_t n, const http_sink& sink) {
  if (n == 0) return state::more;
  if (sink) return sink(p, n) ? state::more : result_ = state::stopped;
  if (body_.size() + n > max_body_)
    return bad("an answer body longer than " + std::to_string(max_body_) + " bytes");
  body_.append(p, n);
  return state::more;
}

// Collects one CRLF-ended line of the chunked coding into line_; true in
// `complete` when it is whole.
http_answer_parser::state http_answer_parser::chunk_line(const char*& p, std::size_t& n) {
  const char* nl = static_cast<const char*>(std::memchr(p, '\n', n));
  const std::size_t take = nl ? static_cast<std::size_t>(nl - p) + 1 : n;
  line_.append(p, take);
  p += take;
  n -= take;
  if (line_.size() > 4096) return bad("a chunk-size or trailer line longer than 4096 bytes");
  if (!nl) return state::more;
  if (line_.size() < 2 || line_[line_.size() - 2] != '\r') return bad("a chunk line not ended by CRLF");
  line_.resize(line_.size() - 2);
  return state::done;  // a whole line in line_
}

// Collects the status line and headers; parses them once whole.
http_answer_parser::state http_answer_parser::feed_head(const char*& p, std::size_t& n) {
  const std::size_t from = head_.size() >= 3 ? head_.size() - 3 : 0;
  const std::size_t take = std::min(n, max_head_ + 4 - head_.size());
  head_.append(p, take);
  const auto end = head_.find("\r\n\r\n", from);
  if (end == std::string::npos) {
    if (head_.size() > max_head_)
      return bad("a status line and headers longer than " + std::to_string(max_head_) + " bytes");
    p += take;
    n -= take;
    return result_;
  }
  const std::size_t used = end + 4 - (head_.size() - take);
  head_.resize(end);
  p += used;
  n -= used;
  return parse_head();
}

// A chunk-size line, the CRLF after a chunk's data, or a trailer line.
http_answer_parser::state http_answer_parser::feed_chunk_line(const char*& p, std::size_t& n) {
  if (chunk_line(p, n) != state::done) return result_;
  std::string line;
  line.swap(line_);
  if (phase_ == phase::chunk_crlf) {
    if (!line.empty()) return bad("chunk data longer than its size");
    phase_ = phase::chunk_size;
  } else if (phase_ == phase::trailers) {
    if (line.empty()) {
      phase_ = phase::end;
      result_ = state::done;
    }
  } else {
    const std::string size = trim(line.substr(0, line.find(';')));
    if (!parse_count(size, 16, max_body_, left_))
      return bad("a chunk size that is not a hexadecimal number up to " + std::to_string(max_body_) +
                 ": \"" + size.substr(0, 30) + "\"");
    phase_ = left_ == 0 ? phase::trailers : phase::chunk_data;
  }
  return result_;
}

// Body bytes counted by Content-Length or a chunk's size.
http_answer_parser::state http_answer_parser::feed_counted(const char*& p, std::size_t& n,
                                                           const http_sink& sink) {
  const std::size_t take = std::min(n, left_);
  if (deliver(p, take, sink) != state::more) return result_;
  p += take;
  n -= take;
  left_ -= take;
  if (left_ > 0) return result_;
  if (phase_ == phase::chunk_data) {
    phase_ = phase::chunk_crlf;
  } else {
    phase_ = phase::end;
    result_ = state::done;
  }
  return result_;
}

http_answer_parser::state http_answer_parser::feed(const char* p, std::size_t n, const http_sink& sink) {
  seen_ += n;
  while (n > 0 && result_ == state::more) {
    switch (phase_) {
      case phase::head: feed_head(p, n); break;
      case phase::length:
      case phase::chunk_data: feed_counted(p, n, sink); break;
      case phase::chunk_size:
      case phase::chunk_crlf:
      case phase::trailers: feed_chunk_line(p, n); break;
      case phase::until_close:
        if (deliver(p, n, sink) == state::more) n = 0;
        break;
      case phase::end:
        extra_ = true;
        n = 0;
        break;
    }
  }
  if (n > 0 && result_ == state::done) extra_ = true;
  return result_;
}

http_answer_parser::state http_answer_parser::end_of_stream() {
  if (result_ != state::more) return result_;
  if (phase_ == phase::until_close) return result_ = state::done;
  return bad(seen_ == 0 ? "the connection closed without an answer"
                        : "the connection closed in the middle of the answer");
}

http_connection::http_connection(const std::string& member, const std::string& cacert) {
  const auto scheme_end = member.find("://");
  tls_.enabled = member.compare(0, scheme_end, "https") == 0;
  if (tls_.enabled) tls_.cacert = cacert;
  host_header_ = member.substr(scheme_end + 3);
  const auto colon = host_header_.rfind(':');
  host_ = host_header_.substr(0, colon);
  port_ = host_header_.substr(colon + 1);
  if (!host_.empty() && host_.front() == '[') host_ = host_.substr(1, host_.size() - 2);
}

http_outcome http_connection::exchange(const std::string& request, bool& written,
                                       posix::io_deadline deadline, const http_sink& sink) {
  http_outcome out;
  written = false;
  if (posix::io_result r = conn_.write_all(request.data(), request.size(), deadline)) {
    out.status = r.status;
    out.detail = r.detail;
    return out;
  }
  written = true;
  http_answer_parser parser;
  char buf[16384];
  http_answer_parser::state st = http_answer_parser::state::more;
  while (st == http_answer_parser::state::more) {
    std::size_t n = 0;
    posix::io_result r = conn_.read_some(buf, sizeof buf, n, deadline);
    if (r.status == posix::io_status::closed) {
      st = parser.end_of_stream();
      if (st == http_answer_parser::state::done) break;
      out.status = posix::io_status::closed;
      out.detail = parser.error();
      out.answer_started = parser.started();
      return out;
    }
    if (r) {
      out.status = r.status;
      out.detail = r.detail;
      out.answer_started = parser.started();
      return out;
    }
    st = parser.feed(buf, n, sink);
  }
  out.answer_started = true;
  out.http_status = parser.status();
  if (st == http_answer_parser::state::bad) {
    out.bad_answer = true;
    out.detail = parser.error();
    return out;
  }
  out.body = std::move(parser.body());
  if (st != http_answer_parser::state::done || !parser.keep_alive() || parser.extra()) conn_.close();
  return out;
}

http_outcome http_connection::post(const std::string& path, const std::string& body, const std::string& token,
                                   posix::io_deadline connect_deadline, posix::io_deadline deadline,
                                   const http_sink& sink) {
  if (token.find_first_of("\r\n") != std::string::npos) {
    http_outcome out;
    out.bad_answer = true;
    out.detail = "the auth token holds a line break";
    return out;
  }
  std::string request = "POST " + path + " HTTP/1.1\r\nHost: " + host_header_ +
                        "\r\nContent-Type: application/json\r\nContent-Length: " +
                        std::to_string(body.size()) + "\r\n";
  if (!token.empty()) request += "Authorization: " + token + "\r\n";
  request += "\r\n" + body;
  if (conn_.is_open() && conn_.idle_broken()) conn_.close();
  for (int attempt = 0;; ++attempt) {
    const bool kept = conn_.is_open();
    if (!kept) {
      if (posix::io_result r = conn_.open(host_, port_, tls_, std::min(connect_deadline, deadline))) {
        http_outcome out;
        out.status = r.status;
        out.detail = r.detail;
        return out;
      }
    }
    bool written = false;
    http_outcome out = exchange(request, written, deadline, sink);
    if (!out.ok()) conn_.close();
    // A kept connection that the member closed while our request was
    // still being written: the member cannot have acted on a request it
    // did not read whole, so it goes once more on a new connection.
    if (kept && !written && attempt == 0 && out.status == posix::io_status::closed) continue;
    return out;
  }
}

}  // namespace tokenlock::detail
