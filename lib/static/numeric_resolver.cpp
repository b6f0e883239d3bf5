// For the statically linked counter.cgi only (linked with
// -Wl,--wrap=getaddrinfo): hiredis resolves the Redis server's address with
// getaddrinfo(3), and glibc's needs its shared name-service libraries at run
// time, which a static program must not depend on (the linker warns). This
// one accepts numeric addresses only, so TOKENLOCK_COUNTER_REDIS names the
// server by IP address or unix socket (docs/cgi-guide.md).
#include <cstdlib>
#include <cstring>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

extern "C" int __wrap_getaddrinfo(const char* node, const char* service, const addrinfo* hints,
                                  addrinfo** res) {
  if (!node || !res) return EAI_NONAME;
  const int family = hints ? hints->ai_family : AF_UNSPEC;
  char* end = nullptr;
  const long port = service ? std::strtol(service, &end, 10) : 0;
  if (service && (*end != '\0' || port < 0 || port > 65535)) return EAI_SERVICE;
  // One block for the entry and its address, as glibc's freeaddrinfo frees
  // each entry with one free().
  struct block {
    addrinfo ai;
    sockaddr_storage addr;
  };
  auto* b = static_cast<block*>(std::calloc(1, sizeof(block)));
  if (!b) return EAI_MEMORY;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&b->addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&b->addr);
  if ((family == AF_UNSPEC || family == AF_INET) && inet_pton(AF_INET, node, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    b->ai.ai_family = AF_INET;
    b->ai.ai_addrlen = sizeof(sockaddr_in);
  } else if ((family == AF_UNSPEC || family == AF_INET6) &&
             inet_pton(AF_INET6, node, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    b->ai.ai_family = AF_INET6;
    b->ai.ai_addrlen = sizeof(sockaddr_in6);
  } else {
    std::free(b);
    return EAI_NONAME;
  }
  b->ai.ai_socktype = hints && hints->ai_socktype ? hints->ai_socktype : SOCK_STREAM;
  b->ai.ai_protocol = hints ? hints->ai_protocol : 0;
  b->ai.ai_addr = reinterpret_cast<sockaddr*>(&b->addr);
  *res = &b->ai;
  return 0;
}
