// The statically linked etcd program (etcd_static_link.cpp) is one file
// with no dynamic dependency, and locks on a real etcd member, over HTTP
// and over HTTPS (OpenSSL's archives linked in).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include <sys/wait.h>

#include "etcd_cluster.hpp"

namespace {

using tokenlock::testing::etcd_cluster;

// `command`'s exit status and standard output (and error).
int run(const std::string& command, std::string& out) {
  out.clear();
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(EtcdStaticLink, TheProgramHasNoDynamicDependency) {
  std::string out;
  run("ldd " ETCD_STATIC_LINK_PATH, out);
  EXPECT_NE(out.find("not a dynamic executable"), std::string::npos) << out;
}

TEST(EtcdStaticLink, AcquiresAndReleasesOverHttpAndHttps) {
  if (const std::string why = etcd_cluster::unavailable(); !why.empty()) GTEST_SKIP() << why;
  for (const bool tls : {false, true}) {
    etcd_cluster c(1, tls);
    std::string out;
    EXPECT_EQ(run(std::string(ETCD_STATIC_LINK_PATH " '") + c.url() + "' static-link", out), 0) << out;
    EXPECT_EQ(out.rfind("fence ", 0), 0u) << out;
    EXPECT_EQ(c.key_count("tokenlock/static-link/"), 0);  // released: no key left
  }
}

}  // namespace
