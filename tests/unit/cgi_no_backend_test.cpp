// counter.cgi's parts as a build without the Redis and etcd backends has
// them (open_lock without either): a spec naming a lock server is refused
// with the build option that adds it and without its password, and the
// counter goes on counting with lock directories.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>

#include "counter_app.hpp"
#include "counter_env.hpp"
#include "inspect.hpp"
#include "temp_dir.hpp"
#include "tokenlock/open_lock.hpp"

namespace {

using counter::testing::configured;

struct refusal {
  const char* variable;
  const char* value;
  const char* says;          // how the message begins after the variable
  const char* build_option;  // what it tells to build with
};

TEST(CounterWithoutServerBackends, ASpecNamingOneIsRefusedWithTheBuildOptionAndNoPassword) {
  ASSERT_FALSE(tokenlock::backend_available(tokenlock::lock_backend::redis));
  ASSERT_FALSE(tokenlock::backend_available(tokenlock::lock_backend::etcd));
  const refusal refusals[] = {
      {"TOKENLOCK_COUNTER_LOCK", "redis://:secret@127.0.0.1:6379/0",
       " names a lock server whose backend this counter.cgi was built without", "-DTOKENLOCK_REDIS=ON"},
      {"TOKENLOCK_COUNTER_LOCK", "etcds://user:secret@127.0.0.1:2379",
       " names a lock server whose backend this counter.cgi was built without", "-DTOKENLOCK_ETCD=ON"},
      {"TOKENLOCK_COUNTER_REDIS", "redis://:secret@127.0.0.1:6379",
       " is set, but this counter.cgi was built without the Redis backend", "-DTOKENLOCK_REDIS=ON"},
      {"TOKENLOCK_COUNTER_ETCD", "etcd://user:secret@127.0.0.1:2379",
       " is set, but this counter.cgi was built without the etcd backend", "-DTOKENLOCK_ETCD=ON"},
  };
  for (const refusal& r : refusals) {
    counter::config c;
    std::string error;
    EXPECT_FALSE(configured({{r.variable, r.value}}, c, error)) << r.variable << "=" << r.value;
    EXPECT_EQ(error.rfind(std::string(r.variable) + r.says, 0), 0u) << error;
    EXPECT_NE(error.find(r.build_option), std::string::npos) << error;
    EXPECT_NE(error.find("linked statically"), std::string::npos) << error;
    EXPECT_EQ(error.find("secret"), std::string::npos) << error;
  }
}

TEST(CounterWithoutServerBackends, LockDirectoriesStillCount) {
  tokenlock::testing::temp_dir tmp;
  counter::config c;
  std::string error;
  ASSERT_TRUE(configured({{"TOKENLOCK_COUNTER_DIR", tmp.path().string()},
                          {"TOKENLOCK_COUNTER_SYNC", "none"},
                          {"TOKENLOCK_COUNTER_LOCK", tmp.path().string()}},
                         c, error))
      << error;
  std::ostringstream log;
  EXPECT_EQ(counter::handle({"GET", "id=d"}, c, log).body, "1\n") << log.str();
  EXPECT_EQ(counter::handle({"GET", "id=d"}, c, log).body, "2\n") << log.str();
  EXPECT_EQ(tokenlock::testing::slurp(tmp / "d.count"), "2\n");
}

}  // namespace
