// A statically linked program with the etcd lock (tokenlock_link_static,
// cmake/tokenlock_static.cmake), as the tokenlock command and counter.cgi
// link it: proves that the library's HTTP client and OpenSSL's archives
// link into a program that needs no shared library, and work there.
//
//   etcd_static_link URL NAME    acquire + release; prints the fence
// Exit 0 when both worked, 1 with the error otherwise.
#include <cstdio>
#include <string>
#include <system_error>

#include "tokenlock/errors.hpp"
#include "tokenlock/etcd_lock.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: etcd_static_link URL NAME\n");
    return 2;
  }
  tokenlock::etcd_lock lock(argv[1], argv[2]);
  std::error_code ec;
  tokenlock::etcd_handle h = lock.acquire(ec);
  if (!ec) {
    std::printf("fence %lld\n", static_cast<long long>(h.fence()));
    h.release(ec);
  }
  if (ec) {
    std::fprintf(stderr, "etcd_static_link: %s\n", tokenlock::last_error_message().c_str());
    return 1;
  }
  return 0;
}
