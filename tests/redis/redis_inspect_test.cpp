// tokenlock/redis_inspect.hpp: the server of a URL without its credentials,
// and whether a grant's holder is known to be gone. Neither needs a server.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include "posix/os.hpp"
#include "tokenlock/errors.hpp"
#include "tokenlock/redis_inspect.hpp"

namespace {

using tokenlock::owner_liveness;
using tokenlock::redis_holder_info;
using tokenlock::redis_holder_liveness;
using tokenlock::redis_server_of;

TEST(RedisInspect, TheServerOfAUrlLeavesTheCredentialsOut) {
  EXPECT_EQ(redis_server_of("redis://alice:s3cret@10.0.0.5:6380/2"), "redis://10.0.0.5:6380/2");
  EXPECT_EQ(redis_server_of("redis://127.0.0.1"), "redis://127.0.0.1:6379");
  EXPECT_EQ(redis_server_of("unix://:pw@/run/redis.sock?db=3"), "unix:///run/redis.sock?db=3");
}

TEST(RedisInspect, ABadUrlIsABadArgumentWhoseMessageHoldsNoPassword) {
  std::error_code ec;
  const std::string server = redis_server_of("redis://user:s3cret@host:99999", ec);
  EXPECT_EQ(ec, tokenlock::errc::bad_argument);
  EXPECT_TRUE(server.empty()) << server;
  const std::string& m = tokenlock::last_error_message();
  EXPECT_NE(m.find("bad Redis URL"), std::string::npos) << m;
  EXPECT_EQ(m.find("s3cret"), std::string::npos) << m;
  EXPECT_THROW(redis_server_of("http://host"), tokenlock::lock_error);
}

TEST(RedisInspect, OnlyAHolderOnThisHostWhoseProcessIsGoneIsDead) {
  const std::string here = tokenlock::detail::system_os()->self().host_tag;
  redis_holder_info h;
  h.host_tag = here;
  h.pid = ::getpid();
  EXPECT_EQ(redis_holder_liveness(h), owner_liveness::alive);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  h.pid = child;  // reaped: gone (a reuse of the pid this soon is not expected)
  EXPECT_EQ(redis_holder_liveness(h), owner_liveness::dead);
  h.host_tag = "elsewhere-0123abcd";
  EXPECT_EQ(redis_holder_liveness(h), owner_liveness::unknown) << "another host: lease only";
  h.host_tag = here;
  h.pid = 0;
  EXPECT_EQ(redis_holder_liveness(h), owner_liveness::unknown) << "no pid to look at";
}

}  // namespace
