// The JSON of etcd's gateway answers, as the client reads it: a unary
// answer's body, and a watch's stream of objects as it arrives. Kept apart
// from the transport (etcd/http_client.hpp) so that it can be fuzzed on its
// own (tests/fuzz/answer_fuzz.cpp): whatever bytes a member sends, these
// functions return a verdict and never throw but std::bad_alloc.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace tokenlock::detail {

using json = nlohmann::json;

// Splits a stream of JSON objects (the gateway's streaming answers put one
// object per message, with no framing of their own that the HTTP chunks
// are bound to follow) at the end of each top-level object; bytes outside
// objects are skipped. nlohmann-json parses each object; it has no parser
// that resumes where a partial object stopped, so the boundaries are found
// here. An object longer than `max_object` bytes stops the stream
// (overflow()).
class object_splitter {
 public:
  explicit object_splitter(std::size_t max_object = 1 << 20) : max_(max_object) {}
  // Feeds bytes; calls `on_object` with every complete object, stopping
  // (false) when it returns false or an object is too long.
  template <class F>
  bool feed(const char* p, std::size_t n, F&& on_object) {
    for (std::size_t i = 0; i < n; ++i) {
      if (!step(p[i])) continue;
      if (overflow_) return false;
      if (!on_object(buf_)) return false;
      buf_.clear();
    }
    return true;
  }
  bool overflow() const noexcept { return overflow_; }

 private:
  // Takes one byte; true when it ends an object (in buf_) or overflows.
  bool step(char c);

  std::string buf_;
  std::size_t max_;
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false, overflow_ = false;
};

// The gRPC code and message of an error answer (two shapes: unary calls
// and streams); false when `j` is not one.
bool grpc_error(const json& j, int& code, std::string& message);

// The first JSON object of a unary answer's body; discarded (is_discarded())
// when there is none or it does not parse.
json first_answer_object(const std::string& body);

// An int64 that the gateway sends as a decimal string (or, rarely, a
// number); 0 when absent or not one.
long long json_int(const json& j, const char* field);

// What a watch's streamed objects said, fed the answer's body bytes as they
// arrive.
class watch_reader {
 public:
  // False to stop reading: the key was deleted (or the watch canceled),
  // the member sent an error, or something that is not etcd's JSON.
  bool feed(const char* p, std::size_t n);

  bool deleted() const noexcept { return deleted_; }
  bool malformed() const noexcept { return malformed_ || splitter_.overflow(); }
  // The member's error message, when it sent one.
  const std::string& server_message() const noexcept { return server_message_; }

 private:
  bool on_object(const std::string& o) noexcept;

  object_splitter splitter_;
  bool deleted_ = false, malformed_ = false;
  std::string server_message_;
};

}  // namespace tokenlock::detail
