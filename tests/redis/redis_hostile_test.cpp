// The Redis client against a hostile server (a fake one on loopback,
// ../etcd/fake_server.hpp): a reply that drips a byte at a time, a line
// that never ends, a bulk or an array announced far larger than any reply
// of the lock. Each must fail within the command timeout, with
// protocol_error past the documented size limit, and the client's memory
// must stay near that limit.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "fake_server.hpp"
#include "tokenlock/redis_lock.hpp"

namespace {

using namespace std::chrono_literals;
using fake::fake_server;
using fake::send_text;
using clock_type = std::chrono::steady_clock;

// A flooding server stops after this many bytes or this long: the figures
// the unbounded client reached, and the test's bound if it never stops.
constexpr std::size_t flood_bytes = std::size_t(512) << 20;
constexpr auto flood_time = 15s;

// The peak resident set of this process, in MiB (VmHWM).
long peak_rss_mib() {
  std::ifstream in("/proc/self/status");
  std::string word;
  while (in >> word)
    if (word == "VmHWM:") {
      long kb = 0;
      in >> kb;
      return kb / 1024;
    }
  return -1;
}

// Reads whatever the client sent (its command), then runs `answer`.
template <class F>
fake_server serving(F answer) {
  return fake_server([answer](int fd, int) {
    char buf[4096];
    if (::recv(fd, buf, sizeof buf, 0) <= 0) return;
    answer(fd);
  });
}

void flood(int fd, const std::string& head, char fill) {
  send_text(fd, head);
  const std::string piece(64 * 1024, fill);
  const auto end = clock_type::now() + flood_time;
  for (std::size_t sent = 0; sent < flood_bytes && clock_type::now() < end; sent += piece.size())
    if (::send(fd, piece.data(), piece.size(), MSG_NOSIGNAL) <= 0) return;
}

struct outcome {
  std::error_code ec;
  std::chrono::milliseconds took;
  long rss_growth_mib;
  std::string message;
};

outcome try_against(const fake_server& s) {
  tokenlock::redis_lock_options o;
  o.command_timeout = 1500ms;
  tokenlock::redis_lock lock("redis://127.0.0.1:" + std::to_string(s.port()), "hostile", o);
  const long rss0 = peak_rss_mib();
  const auto t0 = clock_type::now();
  outcome r;
  auto h = lock.try_acquire(r.ec);
  r.took = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t0);
  r.rss_growth_mib = peak_rss_mib() - rss0;
  r.message = tokenlock::last_error_message();
  EXPECT_FALSE(h) << "nothing may be granted by a hostile server";
  std::printf("took %lld ms, peak RSS +%ld MiB: %s\n", static_cast<long long>(r.took.count()),
              r.rss_growth_mib, r.message.c_str());
  return r;
}

// A status line that drips one byte every 0.5 s and never ends.
TEST(RedisHostile, AReplyDrippingAByteEveryHalfSecondFailsWithinTheCommandTimeout) {
  fake_server s = serving([](int fd) {
    const auto end = clock_type::now() + flood_time;
    send_text(fd, "+");
    pollfd p{fd, POLLIN, 0};
    // Until the client closes (readable at EOF) or flood_time passes.
    while (clock_type::now() < end && ::poll(&p, 1, 500) == 0) send_text(fd, "x");
  });
  const outcome r = try_against(s);
  s.stop();
  EXPECT_EQ(r.ec, std::make_error_code(std::errc::timed_out)) << r.message;
  EXPECT_LT(r.took, 4s);
}

// A status line sent as fast as the socket takes it, never ended.
TEST(RedisHostile, AnEndlessLineIsAProtocolErrorPastTheLimit) {
  fake_server s = serving([](int fd) { flood(fd, "+", 'x'); });
  const outcome r = try_against(s);
  s.stop();
  EXPECT_EQ(r.ec, std::make_error_code(std::errc::protocol_error)) << r.message;
  EXPECT_NE(r.message.find("1 MiB"), std::string::npos) << r.message;
  EXPECT_LT(r.took, 4s);
  EXPECT_LT(r.rss_growth_mib, 32);
}

// A bulk announced as 2 GB, its bytes following as fast as they go.
TEST(RedisHostile, ABulkAnnouncedAsTwoGigabytesIsAProtocolErrorWithoutTheMemory) {
  fake_server s = serving([](int fd) { flood(fd, "$2000000000\r\n", 'x'); });
  const outcome r = try_against(s);
  s.stop();
  EXPECT_EQ(r.ec, std::make_error_code(std::errc::protocol_error)) << r.message;
  EXPECT_LT(r.took, 4s);
  EXPECT_LT(r.rss_growth_mib, 32);
}

// An array announced with two billion elements, each a tiny integer.
TEST(RedisHostile, AnArrayAnnouncedWithTwoBillionElementsIsAProtocolError) {
  fake_server s = serving([](int fd) {
    send_text(fd, "*2000000000\r\n");
    std::string ints;
    for (int i = 0; i < 16384; ++i) ints += ":1\r\n";
    const auto end = clock_type::now() + flood_time;
    for (std::size_t sent = 0; sent < flood_bytes && clock_type::now() < end; sent += ints.size())
      if (::send(fd, ints.data(), ints.size(), MSG_NOSIGNAL) <= 0) return;
  });
  const outcome r = try_against(s);
  s.stop();
  EXPECT_EQ(r.ec, std::make_error_code(std::errc::protocol_error)) << r.message;
  EXPECT_LT(r.took, 4s);
  EXPECT_LT(r.rss_growth_mib, 32);
}

// Malformed URLs, each with a password: no message shows it.
TEST(RedisHostile, AMalformedUrlNeverShowsItsPassword) {
  for (const char* url :
       {"rediss://:S3cr3t@127.0.0.1:6379", "redis:/:S3cr3t@127.0.0.1:6379", "redis//:S3cr3t@127.0.0.1",
        "redis://:S3cr3t127.0.0.1:6379", "redis://:S3c?r3t@127.0.0.1:6379", "redis://u:S3c/r3t@127.0.0.1",
        "redis://u:S3cr3t@127.0.0.1:99999", "redis://u:S3c%zzr3t@127.0.0.1", "redis://u:S3cr3t@@127.0.0.1",
        "unix://:S3cr3t@relative.sock", "redis://u:S3c#r3t@127.0.0.1", "REDIS://:S3cr3t@127.0.0.1",
        "redis://u:S3cr3t@127.0.0.1/x?y@z", "S3cr3t@127.0.0.1", "redis://u:S3c r3t@127.0.0.1"}) {
    tokenlock::redis_lock lock(url, "name");
    std::error_code ec;
    lock.try_acquire(ec);
    const std::string m = tokenlock::last_error_message();
    // Some are valid URLs whose server is not there (a password may hold
    // '?', '@', '#' or a space as they stand): refused either way.
    EXPECT_TRUE(ec) << url;
    EXPECT_EQ(m.find("S3c"), std::string::npos) << url << ": " << m;
    EXPECT_EQ(m.find("r3t"), std::string::npos) << url << ": " << m;
  }
}

}  // namespace
