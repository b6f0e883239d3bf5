// libFuzzer target for the etcd client's reading of answers' JSON
// (lib/src/etcd/etcd_answer.cpp): a member's bytes, as a unary answer's
// body and as a watch's stream, reach it whatever they are. It must
// return a verdict and throw nothing, and a watch's verdict must not
// depend on where the stream was cut as it arrived.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "etcd/etcd_answer.hpp"

using namespace tokenlock::detail;

namespace {

void read_unary(const std::string& body) {
  const json j = first_answer_object(body);
  if (j.is_discarded()) return;
  int code = 0;
  std::string message;
  grpc_error(j, code, message);
  // The fields the requests read, wherever they are in the answer.
  for (const char* field : {"revision", "TTL", "grantedTTL", "ID", "create_revision", "lease"}) {
    json_int(j, field);
    for (const auto& item : j.items()) json_int(item.value(), field);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  read_unary(in);
  watch_reader whole;
  whole.feed(in.data(), in.size());
  const std::size_t cut = size > 0 ? data[0] % size : 0;
  watch_reader split;
  if (split.feed(in.data(), cut)) split.feed(in.data() + cut, size - cut);
  if (whole.deleted() != split.deleted() || whole.malformed() != split.malformed() ||
      whole.server_message() != split.server_message()) {
    std::fprintf(stderr, "answer_fuzz: the watch's verdict changed with a cut at %zu\n", cut);
    std::abort();
  }
  return 0;
}
