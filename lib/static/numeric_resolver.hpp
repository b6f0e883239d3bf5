// The name resolution of the statically linked programs
// (numeric_resolver.cpp), for them and for its tests.
#pragma once

#include <netdb.h>

namespace tokenlock::detail {

// getaddrinfo(3) without the name service: `node` as a numeric IPv4 or
// IPv6 address, or else every address the hosts file at `hosts` (hosts(5):
// an address, its names and aliases; '#' comments) gives it, in the file's
// order, matched without regard to case. `hints` may ask for AF_INET,
// AF_INET6 or either, and AI_NUMERICHOST; `service` is a port number.
// EAI_NONAME when the name is in neither; the list is freed by
// freeaddrinfo(3).
int resolve_without_nss(const char* hosts, const char* node, const char* service,
                        const addrinfo* hints, addrinfo** res);

}  // namespace tokenlock::detail

// Why a name did not resolve, for connect errors: defined by
// numeric_resolver.cpp, so only in the programs that use it (the Redis
// backend declares it weak and adds it to a failed connect's message when
// it is there).
extern "C" const char* tokenlock_static_resolver_note();
