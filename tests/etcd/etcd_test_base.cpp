#include "etcd_test_base.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>
#include <thread>

#include <unistd.h>

namespace tokenlock::testing {

namespace {

// Stops the shared cluster when the tests are done: a gtest environment,
// so that it ends before the process's static objects do, and only in the
// process that started it (never in a forked child).
class shared_cluster_env : public ::testing::Environment {
 public:
  etcd_cluster& get() {
    if (!cluster_) {
      cluster_ = std::make_unique<etcd_cluster>();
      owner_ = ::getpid();
    }
    return *cluster_;
  }
  void TearDown() override {
    if (owner_ == ::getpid()) cluster_.reset();
  }

 private:
  std::unique_ptr<etcd_cluster> cluster_;
  pid_t owner_ = -1;
};

shared_cluster_env* const env =
    static_cast<shared_cluster_env*>(::testing::AddGlobalTestEnvironment(new shared_cluster_env));

}  // namespace

etcd_cluster& shared_cluster() { return env->get(); }

void etcd_test::SetUp() {
  const std::string why = etcd_cluster::unavailable();
  if (!why.empty()) GTEST_SKIP() << why;
}

std::string etcd_test::name() {
  const auto* t = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(t->test_suite_name()) + "." + t->name();
}

int etcd_test::keys(const etcd_cluster& c, const std::string& lock_name) {
  return c.key_count("tokenlock/" + lock_name + "/");
}

void etcd_test::wait_for_line(const etcd_cluster& c, const std::string& lock_name, int n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (keys(c, lock_name) != n) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the line never reached " << n;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string etcd_test::hex(std::int64_t id) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(id));
  return buf;
}

bool etcd_test::lease_exists(const etcd_cluster& c, std::int64_t id) {
  return c.ctl({"lease", "list"}).out.find(hex(id)) != std::string::npos;
}

std::vector<std::string> etcd_test::split(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> w;
  for (std::string s; in >> s;) w.push_back(s);
  return w;
}

std::string etcd_test::base64(const std::string& in) {
  static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < in.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, in.size() - i);
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 3; ++k) v = v << 8 | (k < n ? static_cast<unsigned char>(in[i + k]) : 0u);
    for (std::size_t k = 0; k < 4; ++k) out += k <= n ? digits[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

}  // namespace tokenlock::testing
