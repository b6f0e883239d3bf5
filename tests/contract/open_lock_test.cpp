// tokenlock::open_lock's reading of specs and options (tokenlock/open_lock.hpp),
// without servers: opening connects to nothing.
#include <chrono>
#include <memory>
#include <string>
#include <variant>

#include <gtest/gtest.h>

#include "temp_dir.hpp"
#include "tokenlock/open_lock.hpp"
#include "tokenlock/rename_lock.hpp"
#if TOKENLOCK_HAVE_REDIS
#include "tokenlock/redis_lock.hpp"
#endif
#if TOKENLOCK_HAVE_ETCD
#include "tokenlock/etcd_lock.hpp"
#endif

namespace {

using namespace std::chrono_literals;
using tokenlock::errc;
using tokenlock::lock_backend;

const char* const password = "hunter2";

// The failure of opening `spec`: its code and message (nothing opened).
std::pair<std::error_code, std::string> open_failure(const std::string& spec) {
  std::error_code ec;
  std::unique_ptr<tokenlock::lock> lock = tokenlock::open_lock(spec, {}, ec);
  EXPECT_EQ(lock, nullptr);
  return {ec, ec ? tokenlock::last_error_message() : std::string()};
}

TEST(OpenLock, APathIsALockDirectoryWithTheOptionsGiven) {
  tokenlock::testing::temp_dir dir;
  tokenlock::open_options o;
  o.lease = 5s;
  o.wait = 0ms;
  o.directory.dir_mode = 0700;
  auto lock = tokenlock::open_lock((dir / "L").string(), o);
  ASSERT_EQ(lock->backend(), lock_backend::directory);
  auto& r = dynamic_cast<tokenlock::rename_lock&>(*lock);
  EXPECT_EQ(r.directory(), dir / "L");
  EXPECT_EQ(r.options().lease, 5s);
  EXPECT_EQ(r.options().wait, 0ms);
  EXPECT_EQ(r.options().dir_mode, 0700u);
  EXPECT_EQ(lock->spec(), (dir / "L").string());
  // A relative path, and one holding what a URL would: still paths.
  EXPECT_EQ(tokenlock::open_lock("./redis://x")->backend(), lock_backend::directory);
  EXPECT_EQ(tokenlock::open_lock("locks/a#b")->spec(), "locks/a#b");
}

TEST(OpenLock, BadSpecsAreBadArgumentsThatNeverShowAPassword) {
  const std::string bad[] = {
      "",
      "ftp://host/x#n",
      std::string("redis://:") + password + "@127.0.0.1:6379/0",       // no name
      std::string("redis://:") + password + "@127.0.0.1:6379/0#",      // an empty name
      std::string("etcd://root:") + password + "@127.0.0.1:2379",      // no name
      std::string("redis://:") + password + "#x@127.0.0.1:6379/0#n",   // a raw '#' in the password
      std::string("redis://:1234#") + password + "@127.0.0.1/0",       // the same, digits first
      std::string("redis://:") + password + "@127.0.0.1/0#bad%zz",     // a bad escape in the name
  };
  for (const std::string& spec : bad) {
    const auto [ec, message] = open_failure(spec);
    EXPECT_EQ(ec, errc::bad_argument) << spec;
    EXPECT_EQ(message.find(password), std::string::npos) << message;
    EXPECT_NE(message.find("open_lock"), std::string::npos) << message;
    EXPECT_NE(message.find("a spec is"), std::string::npos) << message;
  }
  EXPECT_NE(open_failure("ftp://h#n").second.find("no lock backend is called ftp://"),
            std::string::npos);
  EXPECT_NE(open_failure("redis://h/0").second.find("end the server URL with #NAME"),
            std::string::npos);
  EXPECT_THROW(tokenlock::open_lock(""), tokenlock::lock_error);
}

// A server and a lock name given apart (the command's --redis URL NAME)
// make one spec that names exactly that lock: the name's '%', '#' and '@'
// encoded, a raw '#' of a password written %23.
TEST(OpenLock, AServerAndANameMakeTheSpecOfThatLock) {
  EXPECT_EQ(tokenlock::server_lock_spec("redis://:pa#ss@h:6379/0", "a#b@c%d"),
            "redis://:pa%23ss@h:6379/0#a%23b%40c%25d");
  EXPECT_EQ(tokenlock::server_lock_spec("etcd://h:2379", "jobs"), "etcd://h:2379#jobs");
  // A '#' in a socket path is written %23 too, which the Redis URL's
  // parser decodes in the path.
  EXPECT_EQ(tokenlock::server_lock_spec("unix:///run/redis#1.sock", "n"),
            "unix:///run/redis%231.sock#n");
#if TOKENLOCK_HAVE_REDIS
  auto lock = tokenlock::open_lock(tokenlock::server_lock_spec("redis://:pa#ss@h:6379/0", "a#b@c%d"));
  auto& r = dynamic_cast<tokenlock::redis_lock&>(*lock);
  EXPECT_EQ(r.name(), "a#b@c%d");
  EXPECT_EQ(r.url(), "redis://:pa%23ss@h:6379/0");
  EXPECT_EQ(lock->spec().find("pa"), std::string::npos) << lock->spec();
  auto socket = tokenlock::open_lock(tokenlock::server_lock_spec("unix:///run/redis#1.sock", "n"));
  EXPECT_EQ(dynamic_cast<tokenlock::redis_lock&>(*socket).url(), "unix:///run/redis%231.sock");
#endif
}

TEST(OpenLock, TheAvailableBackendsAreSaid) {
  EXPECT_TRUE(tokenlock::backend_available(lock_backend::directory));
  EXPECT_EQ(tokenlock::backend_available(lock_backend::redis), TOKENLOCK_HAVE_REDIS != 0);
  EXPECT_EQ(tokenlock::backend_available(lock_backend::etcd), TOKENLOCK_HAVE_ETCD != 0);
  EXPECT_STREQ(tokenlock::backend_name(lock_backend::etcd), "etcd");
}

#if TOKENLOCK_HAVE_REDIS
TEST(OpenLock, ARedisSpecGivesARedisLockWithItsNameAndOptions) {
  tokenlock::open_options o;
  o.lease = 7s;
  o.wait = 1s;
  o.connect_timeout = 300ms;
  o.command_timeout = 400ms;
  o.redis.replicas = 1;
  o.redis.key_prefix = "app:";
  const std::string url = std::string("redis://:") + password + "@127.0.0.1:6399/2";
  auto lock = tokenlock::open_lock(url + "#coupons%23a%40b", o);
  ASSERT_EQ(lock->backend(), lock_backend::redis);
  auto& r = dynamic_cast<tokenlock::redis_lock&>(*lock);
  EXPECT_EQ(r.url(), url);
  EXPECT_EQ(r.name(), "coupons#a@b");
  EXPECT_EQ(r.options().lease, 7s);
  EXPECT_EQ(r.options().wait, 1s);
  EXPECT_EQ(r.options().connect_timeout, 300ms);
  EXPECT_EQ(r.options().command_timeout, 400ms);
  EXPECT_EQ(r.options().replicas, 1);
  EXPECT_EQ(r.options().key_prefix, "app:");
  EXPECT_EQ(lock->spec().find(password), std::string::npos) << lock->spec();
  EXPECT_NE(lock->spec().find("#coupons%23a%40b"), std::string::npos) << lock->spec();
  for (const char* scheme : {"unix:///run/redis.sock#n", "REDIS://h/0#n", "rediss://h/0#n"})
    EXPECT_EQ(tokenlock::open_lock(scheme)->backend(), lock_backend::redis) << scheme;
}

TEST(OpenLock, TheRedisSettingsDefaultAsRedisLockOptions) {
  const tokenlock::open_options o;
  const tokenlock::redis_lock_options r;
  EXPECT_EQ(o.lease, r.lease);
  EXPECT_EQ(o.wait, r.wait);
  EXPECT_EQ(o.connect_timeout, r.connect_timeout);
  EXPECT_EQ(o.command_timeout, r.command_timeout);
  EXPECT_EQ(o.redis.replicas, r.replicas);
  EXPECT_EQ(o.redis.replica_timeout, r.replica_timeout);
  EXPECT_EQ(o.redis.key_prefix, r.key_prefix);
}

TEST(OpenLock, RedissIsRefusedByTheFirstCallWithoutThePassword) {
  auto lock = tokenlock::open_lock(std::string("rediss://:") + password + "@127.0.0.1/0#n");
  std::error_code ec;
  EXPECT_FALSE(lock->try_acquire(ec).has_value());
  EXPECT_EQ(ec, errc::bad_argument);
  EXPECT_EQ(tokenlock::last_error_message().find(password), std::string::npos);
}
#endif

#if TOKENLOCK_HAVE_ETCD
TEST(OpenLock, AnEtcdSpecGivesAnEtcdLockWithItsNameAndOptions) {
  tokenlock::open_options o;
  o.lease = 9s;
  o.etcd.key_prefix = "app/";
  const std::string url = std::string("etcds://root:") + password + "@127.0.0.1:2379,127.0.0.1:2380";
  auto lock = tokenlock::open_lock(url + "#jobs", o);
  ASSERT_EQ(lock->backend(), lock_backend::etcd);
  auto& e = dynamic_cast<tokenlock::etcd_lock&>(*lock);
  EXPECT_EQ(e.url(), url);
  EXPECT_EQ(e.name(), "jobs");
  EXPECT_EQ(e.options().lease, 9s);
  EXPECT_EQ(e.options().key_prefix, "app/");
  EXPECT_EQ(tokenlock::etcd_lock_options().key_prefix, tokenlock::open_options().etcd.key_prefix);
  EXPECT_EQ(lock->spec().find(password), std::string::npos) << lock->spec();
  EXPECT_NE(lock->spec().find("127.0.0.1:2380#jobs"), std::string::npos) << lock->spec();
}

// Where the lock is kept, for displays: the members, never a part of the
// credentials, also from a URL the first call will refuse.
TEST(OpenLock, AnEtcdLocksLocationNamesTheMembersOnly) {
  const auto location_of = [](const std::string& spec) {
    const auto facts = tokenlock::open_lock(spec)->location();
    EXPECT_EQ(facts.size(), 2u);
    return std::get<std::string>(facts.at(0).value);
  };
  EXPECT_EQ(location_of("etcd://root:se%40cret@10.0.0.1:2379,10.0.0.2:2379#job"),
            "etcd://10.0.0.1:2379,10.0.0.2:2379");
  const std::string odd = location_of("etcd://root:pa?ss@10.0.0.1:2379#job");
  EXPECT_EQ(odd.find("pa"), std::string::npos) << odd;
}
#endif

#if !TOKENLOCK_HAVE_REDIS || !TOKENLOCK_HAVE_ETCD
// Built without a backend (the bare test program always): its specs are
// refused with the build option that adds it, and a directory still opens.
TEST(OpenLock, AMissingBackendIsBackendUnavailable) {
  struct missing {
    bool built;
    std::string spec;
    const char* option;
  };
  const missing cases[] = {
      {TOKENLOCK_HAVE_REDIS != 0, std::string("redis://:") + password + "@127.0.0.1/0#n",
       "-DTOKENLOCK_REDIS=ON"},
      {TOKENLOCK_HAVE_ETCD != 0, std::string("etcd://u:") + password + "@127.0.0.1:2379#n",
       "-DTOKENLOCK_ETCD=ON"},
  };
  int checked = 0;
  for (const missing& m : cases) {
    if (m.built) continue;
    ++checked;
    const auto [ec, message] = open_failure(m.spec);
    EXPECT_EQ(ec, errc::backend_unavailable) << message;
    EXPECT_STREQ(tokenlock::error_name(ec), "backend_unavailable");
    EXPECT_NE(message.find(m.option), std::string::npos) << message;
    EXPECT_NE(message.find("127.0.0.1"), std::string::npos) << message;
    EXPECT_EQ(message.find(password), std::string::npos) << message;
  }
  EXPECT_GT(checked, 0);
}
#endif

}  // namespace
