// For the statically linked programs only (the tokenlock command and
// counter.cgi, linked with -Wl,--wrap=getaddrinfo): hiredis resolves the
// Redis server's address with getaddrinfo(3), and glibc's needs its shared
// name-service libraries (NSS) at run time, which a static program must not
// depend on (the linker warns, and the libraries of another glibc version
// crash it). This one answers numeric addresses, and names from /etc/hosts
// (so that redis://localhost works); any other name fails with EAI_NONAME,
// and tokenlock_static_resolver_note() says why (redis_connection.cpp puts
// it into the connect error). docs/redis.md, "The static command".
#include "numeric_resolver.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <arpa/inet.h>
#include <strings.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace tokenlock::detail {

namespace {

// One block for the entry and its address, as glibc's freeaddrinfo frees
// each entry of the list with one free() (and its ai_canonname, left null).
struct block {
  addrinfo ai;
  sockaddr_storage addr;
};

// `text` as an address of `family` (AF_UNSPEC: either), appended to the
// list whose last entry's next pointer is `*tail`. False when it is not one.
bool append_address(const char* text, int family, int port, const addrinfo* hints,
                    addrinfo**& tail, int& error) {
  in_addr v4{};
  in6_addr v6{};
  const bool is_v4 = (family == AF_UNSPEC || family == AF_INET) && inet_pton(AF_INET, text, &v4) == 1;
  const bool is_v6 =
      !is_v4 && (family == AF_UNSPEC || family == AF_INET6) && inet_pton(AF_INET6, text, &v6) == 1;
  if (!is_v4 && !is_v6) return false;
  auto* b = static_cast<block*>(std::calloc(1, sizeof(block)));
  if (!b) {
    error = EAI_MEMORY;
    return true;
  }
  if (is_v4) {
    auto* a = reinterpret_cast<sockaddr_in*>(&b->addr);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<uint16_t>(port));
    a->sin_addr = v4;
    b->ai.ai_family = AF_INET;
    b->ai.ai_addrlen = sizeof(sockaddr_in);
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&b->addr);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(static_cast<uint16_t>(port));
    a->sin6_addr = v6;
    b->ai.ai_family = AF_INET6;
    b->ai.ai_addrlen = sizeof(sockaddr_in6);
  }
  b->ai.ai_socktype = hints && hints->ai_socktype ? hints->ai_socktype : SOCK_STREAM;
  b->ai.ai_protocol = hints ? hints->ai_protocol : 0;
  b->ai.ai_addr = reinterpret_cast<sockaddr*>(&b->addr);
  *tail = &b->ai;
  tail = &b->ai.ai_next;
  return true;
}

bool same_name(const char* a, const char* b) { return strcasecmp(a, b) == 0; }

// The addresses hosts(5) gives `node`, in the file's order: each line is an
// address and its names (the canonical name and aliases), separated by
// blanks; '#' starts a comment. Lines whose address is not numeric (an
// IPv6 address with a %scope, for one) are left out.
int from_hosts(const char* hosts, const char* node, int family, int port, const addrinfo* hints,
               addrinfo** res) {
  std::FILE* f = std::fopen(hosts, "re");
  if (!f) return EAI_NONAME;
  addrinfo* head = nullptr;
  addrinfo** tail = &head;
  int error = 0;
  char* line = nullptr;
  std::size_t cap = 0;
  while (error == 0 && ::getline(&line, &cap, f) >= 0) {
    if (char* hash = std::strchr(line, '#')) *hash = '\0';
    char* save = nullptr;
    const char* address = ::strtok_r(line, " \t\r\n", &save);
    if (!address) continue;
    for (const char* name = ::strtok_r(nullptr, " \t\r\n", &save); name;
         name = ::strtok_r(nullptr, " \t\r\n", &save)) {
      if (!same_name(name, node)) continue;
      append_address(address, family, port, hints, tail, error);
      break;  // one entry per line, however often the name appears on it
    }
  }
  std::free(line);
  std::fclose(f);
  if (error != 0 || !head) {
    if (head) freeaddrinfo(head);
    return error != 0 ? error : EAI_NONAME;
  }
  *res = head;
  return 0;
}

}  // namespace

int resolve_without_nss(const char* hosts, const char* node, const char* service,
                        const addrinfo* hints, addrinfo** res) {
  if (!node || !res) return EAI_NONAME;
  const int family = hints ? hints->ai_family : AF_UNSPEC;
  if (family != AF_UNSPEC && family != AF_INET && family != AF_INET6) return EAI_FAMILY;
  char* end = nullptr;
  const long port = service ? std::strtol(service, &end, 10) : 0;
  if (service && (*service == '\0' || *end != '\0' || port < 0 || port > 65535)) return EAI_SERVICE;
  addrinfo* head = nullptr;
  addrinfo** tail = &head;
  int error = 0;
  if (append_address(node, family, static_cast<int>(port), hints, tail, error)) {
    if (error != 0) return error;
    *res = head;
    return 0;
  }
  if (hints && (hints->ai_flags & AI_NUMERICHOST)) return EAI_NONAME;
  return from_hosts(hosts, node, family, static_cast<int>(port), hints, res);
}

}  // namespace tokenlock::detail

extern "C" int __wrap_getaddrinfo(const char* node, const char* service, const addrinfo* hints,
                                  addrinfo** res) {
  return tokenlock::detail::resolve_without_nss("/etc/hosts", node, service, hints, res);
}

extern "C" const char* tokenlock_static_resolver_note() {
  return "this statically linked program resolves only names in /etc/hosts and numeric "
         "addresses (it cannot use the system's name service): name the server by its address "
         "(redis://192.0.2.7:6379), add the name to /etc/hosts, or use the dynamically linked "
         "tokenlock command";
}
