#include "redis_raw.hpp"

#include <stdexcept>

#include <hiredis/hiredis.h>

namespace tokenlock::testing {

namespace {

std::string text_of(const redisReply* r) {
  if (!r) return "(no reply)";
  switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS: return std::string(r->str, r->len);
    case REDIS_REPLY_ERROR: return "(error) " + std::string(r->str, r->len);
    case REDIS_REPLY_INTEGER: return std::to_string(r->integer);
    case REDIS_REPLY_NIL: return "(nil)";
    case REDIS_REPLY_ARRAY: {
      std::string s;
      for (std::size_t i = 0; i < r->elements; ++i) s += (i ? "\n" : "") + text_of(r->element[i]);
      return s;
    }
    default: return "(unknown reply)";
  }
}

std::string run(redisContext* c, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(args.size()), argv.data(), lens.data()));
  if (!r) throw std::runtime_error(std::string("redis command failed: ") + c->errstr);
  std::string s = text_of(r);
  freeReplyObject(r);
  return s;
}

}  // namespace

std::string raw(const redis_server& server, const std::vector<std::string>& args,
                const std::string& password) {
  redisContext* c = redisConnectUnix(server.socket_path().c_str());
  if (!c || c->err) {
    const std::string why = c ? c->errstr : "out of memory";
    if (c) redisFree(c);
    throw std::runtime_error("cannot connect to " + server.socket_path() + ": " + why);
  }
  try {
    if (!password.empty()) run(c, {"AUTH", password});
    std::string s = run(c, args);
    redisFree(c);
    return s;
  } catch (...) {
    redisFree(c);
    throw;
  }
}

}  // namespace tokenlock::testing
