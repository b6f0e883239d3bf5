// The name resolution of the statically linked programs
// (lib/static/numeric_resolver.cpp): numeric addresses, and names from a
// hosts file, here files the tests write (the programs read /etc/hosts).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "numeric_resolver.hpp"
#include "temp_dir.hpp"

using tokenlock::detail::resolve_without_nss;
using tokenlock::testing::temp_dir;

namespace {

// The answer as "address port" lines, in order; or "error <code>".
std::vector<std::string> resolve(const std::string& hosts, const char* node, int family = AF_UNSPEC,
                                 const char* service = "6379", int flags = 0) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags;
  addrinfo* res = nullptr;
  const int rc = resolve_without_nss(hosts.c_str(), node, service, &hints, &res);
  if (rc != 0) return {"error " + std::to_string(rc)};
  std::vector<std::string> out;
  for (const addrinfo* p = res; p; p = p->ai_next) {
    char text[INET6_ADDRSTRLEN] = "";
    int port = 0;
    if (p->ai_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(p->ai_addr);
      ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
      port = ntohs(a->sin_port);
      EXPECT_EQ(p->ai_addrlen, sizeof(sockaddr_in));
    } else {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(p->ai_addr);
      ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
      port = ntohs(a->sin6_port);
      EXPECT_EQ(p->ai_family, AF_INET6);
      EXPECT_EQ(p->ai_addrlen, sizeof(sockaddr_in6));
    }
    EXPECT_EQ(p->ai_socktype, SOCK_STREAM);
    out.push_back(std::string(text) + " " + std::to_string(port));
  }
  ::freeaddrinfo(res);  // glibc's, as hiredis frees it: each entry one block
  return out;
}

using lines = std::vector<std::string>;

class StaticResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(hosts) << "# The hosts file of a test\n"
                            "127.0.0.1\tlocalhost\n"
                            "::1     localhost ip6-localhost ip6-loopback   # comment after names\n"
                            "192.0.2.7 cache-1.example.net cache-1 Redis  \n"
                            "#192.0.2.99 cache-1\n"
                            "   \n"
                            "fe80::1%eth0 scoped\n"
                            "2001:db8::5 cache-1#no blank before the comment\n"
                            "not-an-address cache-2\n"
                            "198.51.100.3 cache-2 cache-2\n"
                            "198.51.100.4";  // no newline at the end, no names
  }
  temp_dir dir;
  std::string hosts = (dir / "hosts").string();
};

TEST_F(StaticResolverTest, NumericAddressesNeedNoHostsFile) {
  const std::string none = (dir / "missing").string();
  EXPECT_EQ(resolve(none, "127.0.0.1"), lines{"127.0.0.1 6379"});
  EXPECT_EQ(resolve(none, "::1", AF_UNSPEC, "7000"), lines{"::1 7000"});
  EXPECT_EQ(resolve(none, "::1", AF_INET6), lines{"::1 6379"});
  EXPECT_EQ(resolve(none, "::1", AF_INET), lines{"error " + std::to_string(EAI_NONAME)});
  EXPECT_EQ(resolve(none, "localhost"), lines{"error " + std::to_string(EAI_NONAME)});
}

TEST_F(StaticResolverTest, NamesComeFromTheHostsFileWithTheirAliasesInItsOrder) {
  EXPECT_EQ(resolve(hosts, "localhost"), (lines{"127.0.0.1 6379", "::1 6379"}));
  EXPECT_EQ(resolve(hosts, "LocalHost"), (lines{"127.0.0.1 6379", "::1 6379"}))
      << "host names do not depend on case";
  EXPECT_EQ(resolve(hosts, "ip6-loopback"), lines{"::1 6379"});
  EXPECT_EQ(resolve(hosts, "cache-1.example.net"), lines{"192.0.2.7 6379"});
  EXPECT_EQ(resolve(hosts, "cache-1", AF_UNSPEC, "6380"),
            (lines{"192.0.2.7 6380", "2001:db8::5 6380"}))
      << "the commented-out line is no entry; a comment may follow a name directly";
  EXPECT_EQ(resolve(hosts, "redis"), lines{"192.0.2.7 6379"});
  EXPECT_EQ(resolve(hosts, "cache-2"), lines{"198.51.100.3 6379"})
      << "a line whose address is not one is left out; a name twice on a line is one entry";
}

TEST_F(StaticResolverTest, TheFamilyAskedForFiltersTheAnswer) {
  EXPECT_EQ(resolve(hosts, "localhost", AF_INET), lines{"127.0.0.1 6379"});
  EXPECT_EQ(resolve(hosts, "localhost", AF_INET6), lines{"::1 6379"});
  EXPECT_EQ(resolve(hosts, "cache-1.example.net", AF_INET6),
            lines{"error " + std::to_string(EAI_NONAME)});
}

TEST_F(StaticResolverTest, WhatIsNotThereIsNoName) {
  const std::string noname = "error " + std::to_string(EAI_NONAME);
  EXPECT_EQ(resolve(hosts, "scoped"), lines{noname}) << "a scoped address is left out";
  EXPECT_EQ(resolve(hosts, "cache"), lines{noname}) << "names match whole";
  EXPECT_EQ(resolve(hosts, "198.51.100.4x"), lines{noname});
  EXPECT_EQ(resolve(hosts, "comment"), lines{noname});
  EXPECT_EQ(resolve(hosts, "localhost", AF_UNSPEC, "6379", AI_NUMERICHOST), lines{noname})
      << "AI_NUMERICHOST reads no hosts file";
  EXPECT_EQ(resolve((dir / "missing").string(), "cache-1"), lines{noname});
}

TEST_F(StaticResolverTest, APortThatIsNotOneAndAnotherFamilyAreRefused) {
  EXPECT_EQ(resolve(hosts, "127.0.0.1", AF_UNSPEC, "redis"),
            lines{"error " + std::to_string(EAI_SERVICE)});
  EXPECT_EQ(resolve(hosts, "127.0.0.1", AF_UNSPEC, "65536"),
            lines{"error " + std::to_string(EAI_SERVICE)});
  EXPECT_EQ(resolve(hosts, "127.0.0.1", AF_UNIX), lines{"error " + std::to_string(EAI_FAMILY)});
}

// The file the static programs read: Debian's always names localhost.
TEST(StaticResolverEtcHosts, LocalhostResolvesToALoopbackAddress) {
  std::ifstream in("/etc/hosts");
  std::string line;
  bool listed = false;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    listed = listed || (line.find("127.0.0.1") == 0 && line.find("localhost") != std::string::npos);
  }
  if (!listed) GTEST_SKIP() << "/etc/hosts has no line \"127.0.0.1 ... localhost\"";
  const lines got = resolve("/etc/hosts", "localhost", AF_INET);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.front(), "127.0.0.1 6379");
}

}  // namespace
