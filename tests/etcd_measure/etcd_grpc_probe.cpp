// One etcd Range through gRPC C++, as a short-lived process would send it:
// what a gRPC client costs a process that connects once (docs/etcd.md,
// Transport). etcd_transport runs it as its grpc_range_cold workload.
//
//   etcd_grpc_probe HOST:PORT KEY
//
// It makes a channel (no TLS), sends one unary /etcdserverpb.KV/Range
// through grpc::GenericStub and checks that the answer is a RangeResponse
// with its header. No .proto file is needed: the request is one bytes
// field, encoded by hand, and the answer is only walked, not decoded.
// Exit 0 when the Range succeeded, 2 with a message otherwise.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/client_context.h>
#include <grpcpp/completion_queue.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

namespace {

constexpr const char* range_method = "/etcdserverpb.KV/Range";

int fail(const std::string& endpoint, const std::string& key, const std::string& why) {
  std::fprintf(stderr, "etcd_grpc_probe: %s key \"%s\": Range: %s\n", endpoint.c_str(),
               key.c_str(), why.c_str());
  return 2;
}

void put_varint(std::string& out, unsigned long long v) {
  for (; v >= 0x80; v >>= 7) out.push_back(static_cast<char>((v & 0x7f) | 0x80));
  out.push_back(static_cast<char>(v));
}

// Reads a varint at `pos`; false when the bytes end inside it.
bool get_varint(const std::string& in, size_t& pos, unsigned long long& v) {
  v = 0;
  for (int shift = 0; pos < in.size() && shift < 64; shift += 7) {
    const auto b = static_cast<unsigned char>(in[pos++]);
    v |= static_cast<unsigned long long>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

// RangeRequest { bytes key = 1; }: tag 0x0a (field 1, wire type 2), the
// length, the bytes. Every other field keeps its default.
std::string range_request(const std::string& key) {
  std::string out("\x0a", 1);
  put_varint(out, key.size());
  return out + key;
}

// Walks a RangeResponse's fields (header = 1, kvs = 2, more = 3, count = 4)
// and says whether it is well formed and holds its header; an empty
// string when it does, the defect otherwise.
std::string check_range_response(const std::string& in) {
  bool header = false;
  for (size_t pos = 0; pos < in.size();) {
    unsigned long long tag = 0, n = 0;
    if (!get_varint(in, pos, tag)) return "a field's tag is cut";
    if (tag == 0x0a) header = true;
    switch (tag & 7) {
      case 0:
        if (!get_varint(in, pos, n)) return "a varint field is cut";
        break;
      case 2:
        if (!get_varint(in, pos, n) || n > in.size() - pos) return "a length-delimited field is cut";
        pos += n;
        break;
      default:
        return "wire type " + std::to_string(tag & 7) + " is not in a RangeResponse";
    }
  }
  return header ? "" : "the answer has no header (field 1): not a RangeResponse";
}

std::string to_string(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: etcd_grpc_probe HOST:PORT KEY\n");
    return 2;
  }
  const std::string endpoint = argv[1], key = argv[2];
  auto channel = grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  const std::string body = range_request(key);
  grpc::Slice slice(body);
  const grpc::ByteBuffer request(&slice, 1);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::CompletionQueue cq;
  auto call = stub.PrepareUnaryCall(&context, range_method, request, &cq);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  if (!cq.Next(&tag, &ok) || !ok)
    return fail(endpoint, key, "the completion queue ended without the answer");
  if (!status.ok())
    return fail(endpoint, key,
                "gRPC status " + std::to_string(status.error_code()) + " (" + status.error_message() +
                    "); check that it is an etcd member's client port serving plain gRPC (http://, not https://)");
  const std::string defect = check_range_response(to_string(response));
  if (!defect.empty()) return fail(endpoint, key, defect);
  return 0;
}
