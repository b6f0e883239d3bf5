#include "etcd/etcd_answer.hpp"

namespace tokenlock::detail {

bool object_splitter::step(char c) {
  if (depth_ > 0) buf_ += c;
  if (buf_.size() > max_) return overflow_ = true;
  if (in_string_) {
    if (escaped_) escaped_ = false;
    else if (c == '\\') escaped_ = true;
    else if (c == '"') in_string_ = false;
    return false;
  }
  if (c == '"' && depth_ > 0) {
    in_string_ = true;
  } else if (c == '{') {
    if (depth_++ == 0) buf_ = "{";
  } else if (c == '}' && depth_ > 0) {
    return --depth_ == 0;
  }
  return false;
}

bool grpc_error(const json& j, int& code, std::string& message) {
  if (!j.is_object() || !j.contains("error")) return false;
  const json& e = j["error"];
  const json& src = e.is_object() ? e : j;
  code = 2;
  message = e.is_string() ? e.get<std::string>() : std::string("unknown error");
  const auto c = src.find(e.is_object() ? "grpc_code" : "code");
  if (c != src.end() && c->is_number_integer()) code = c->get<int>();
  const auto m = src.find("message");
  if (m != src.end() && m->is_string()) message = m->get<std::string>();
  return true;
}

json first_answer_object(const std::string& body) {
  object_splitter s;
  std::string first;
  s.feed(body.data(), body.size(), [&](const std::string& o) {
    first = o;
    return false;
  });
  return json::parse(first, nullptr, false);
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

bool watch_reader::feed(const char* p, std::size_t n) {
  return splitter_.feed(p, n, [this](const std::string& o) { return on_object(o); });
}

bool watch_reader::on_object(const std::string& o) noexcept {
  try {
    const json j = json::parse(o, nullptr, false);
    int code = 0;
    if (j.is_discarded() || !j.is_object()) return !(malformed_ = true);
    if (grpc_error(j, code, server_message_)) return false;
    const auto res = j.find("result");
    const json& r = res != j.end() ? *res : j;
    if (!r.is_object()) return !(malformed_ = true);
    const auto canceled = r.find("canceled"), events = r.find("events");
    if ((canceled != r.end() && canceled->is_boolean() && canceled->get<bool>()) ||
        (events != r.end() && events->is_array() && !events->empty())) {
      deleted_ = true;
      return false;
    }
    return true;
  } catch (const std::exception&) {
    return !(malformed_ = true);
  }
}

}  // namespace tokenlock::detail
