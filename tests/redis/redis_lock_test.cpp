// redis_lock against a real redis-server that each test starts (127.0.0.1,
// a free port, and a unix socket) and stops by its pid.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <thread>

#include <boost/filesystem.hpp>

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net/socket_io.hpp"
#include "redis/redis_url.hpp"
#include "redis/redis_wait_stats.hpp"
#include "inspect.hpp"
#include "error_of.hpp"
#include "redis_raw.hpp"
#include "redis_server.hpp"
#include "temp_dir.hpp"
#include "tokenlock/redis_lock.hpp"

using namespace std::chrono_literals;
using tokenlock::errc;
using tokenlock::redis_handle;
using tokenlock::redis_lock;
using tokenlock::redis_lock_options;
using tokenlock::detail::parse_redis_url;
using tokenlock::detail::redis_endpoint;
using tokenlock::detail::this_thread_redis_wait_stats;
using tokenlock::testing::free_port;
using tokenlock::testing::error_of;
using tokenlock::testing::raw;
using tokenlock::testing::redis_server;
using tokenlock::testing::slurp;
using tokenlock::testing::spit;
using tokenlock::testing::temp_dir;
using tokenlock::testing::temp_files_below;
namespace fs = boost::filesystem;

namespace {

// ---- the link ---------------------------------------------------------------

// A write to a link whose peer has gone is an error the caller sees, never
// SIGPIPE: in a child whose SIGPIPE has its default action (the end of the
// process), two writes to a socket whose other end was closed.
TEST(RedisLink, AWriteToAClosedLinkFailsWithEpipeInsteadOfRaisingSigpipe) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGPIPE, SIG_DFL);
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) _exit(100);
    ::close(sv[1]);
    const char msg[] = "PING\r\n";
    const int first = tokenlock::detail::posix::send_all(sv[0], msg, sizeof msg - 1);
    const int second = tokenlock::detail::posix::send_all(sv[0], msg, sizeof msg - 1);
    _exit(first == EPIPE && second == EPIPE ? 0 : 101);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_FALSE(WIFSIGNALED(status)) << "ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// ---- URLs (no server) --------------------------------------------------------

TEST(RedisUrl, ParsesEveryPartOfTheTwoForms) {
  redis_endpoint e;
  ASSERT_EQ(parse_redis_url("redis://127.0.0.1", e), "");
  EXPECT_FALSE(e.unix_socket);
  EXPECT_EQ(e.host, "127.0.0.1");
  EXPECT_EQ(e.port, 6379);
  EXPECT_EQ(e.db, 0);
  EXPECT_FALSE(e.has_password);

  ASSERT_EQ(parse_redis_url("redis://alice:s%40cr%3At@cache-1.example:6380/7", e), "");
  EXPECT_EQ(e.user, "alice");
  EXPECT_EQ(e.password, "s@cr:t");
  EXPECT_EQ(e.host, "cache-1.example");
  EXPECT_EQ(e.port, 6380);
  EXPECT_EQ(e.db, 7);
  EXPECT_EQ(e.display(), "redis://cache-1.example:6380/7") << "no credentials in messages";

  ASSERT_EQ(parse_redis_url("redis://:secret@[::1]:7000", e), "");
  EXPECT_EQ(e.host, "::1");
  EXPECT_EQ(e.user, "");
  EXPECT_EQ(e.password, "secret");
  EXPECT_EQ(e.port, 7000);
  EXPECT_EQ(e.display(), "redis://[::1]:7000");

  ASSERT_EQ(parse_redis_url("unix:///run/redis/redis.sock?db=3", e), "");
  EXPECT_TRUE(e.unix_socket);
  EXPECT_EQ(e.path, "/run/redis/redis.sock");
  EXPECT_EQ(e.db, 3);
  ASSERT_EQ(parse_redis_url("unix://:pw@/tmp/r.sock", e), "");
  EXPECT_EQ(e.path, "/tmp/r.sock");
  EXPECT_EQ(e.password, "pw");
  // The socket path is percent-decoded, as a URL's path: a lock spec
  // writes a '#' in it as %23 (tokenlock::server_lock_spec does).
  ASSERT_EQ(parse_redis_url("unix:///run/redis%231.sock?db=2", e), "");
  EXPECT_EQ(e.path, "/run/redis#1.sock");
  EXPECT_NE(parse_redis_url("unix:///run/r%zz.sock", e), "");
}

TEST(RedisUrl, RefusesWhatDoesNotNameOneServerAndSaysWhichPart) {
  struct bad {
    const char* url;
    const char* says;
  };
  for (const bad& b : {bad{"http://host", "must start with redis://"},
                       bad{"rediss://host", "TLS is not supported"},
                       bad{"redis://", "host is missing"},
                       bad{"redis://:6379", "host is missing"},
                       bad{"redis://host:", "port after ':' is missing"},
                       bad{"redis://host:0", "port must be a number from 1 to 65535"},
                       bad{"redis://host:65536", "port must be"},
                       bad{"redis://host:12ab", "port must be"},
                       bad{"redis://host/x", "database after the '/' must be a number"},
                       bad{"redis://[::1", "closing ']'"},
                       bad{"redis://[::1]x", "only :port may follow"},
                       bad{"redis://ho st", "character that no host name"},
                       bad{"redis://user@host", "[user]:password@"},
                       bad{"redis://:bad%zz@host", "password has a bad %-escape"},
                       bad{"redis://:bad%4@host", "password has a bad %-escape"},
                       bad{"unix://relative.sock", "absolute socket path"},
                       bad{"unix:///s.sock?database=1", "?db=N"}}) {
    redis_endpoint e;
    const std::string why = parse_redis_url(b.url, e);
    EXPECT_NE(why.find(b.says), std::string::npos) << b.url << ": " << why;
  }
}

// ---- with a server -------------------------------------------------------------

class RedisLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = redis_server::unavailable();
    if (!why.empty()) GTEST_SKIP() << why;
    server = std::make_unique<redis_server>();
  }
  redis_lock_options options(std::chrono::milliseconds lease = 30s,
                             std::chrono::milliseconds wait = 0ms) const {
    redis_lock_options o;
    o.lease = lease;
    o.wait = wait;
    return o;
  }
  redis_lock lock(const std::string& name = "coupons", redis_lock_options o = {}) const {
    return redis_lock(server->url(), name, o);
  }
  std::unique_ptr<redis_server> server;
};

TEST_F(RedisLockTest, HolderDescribesTheGrantAndTheKeysExpire) {
  redis_lock a = lock("coupons", options(20s));
  EXPECT_FALSE(a.holder().has_value());
  redis_handle h = a.acquire();
  auto info = a.holder();
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->owner, h.owner());
  EXPECT_EQ(info->fence, h.fence());
  EXPECT_EQ(info->pid, ::getpid());
  EXPECT_GT(info->remaining.count(), 15000);
  EXPECT_LE(info->remaining.count(), 20000);
  const long lock_ttl = std::stol(server->cli({"PTTL", "tokenlock:coupons"}));
  EXPECT_GT(lock_ttl, 0);
  EXPECT_LE(lock_ttl, 20000);
  h.release();
  EXPECT_FALSE(a.holder().has_value());
  // Whatever the lock leaves expires. Uncontended: only the last fence (a
  // day), nothing for waiters.
  EXPECT_EQ(server->cli({"EXISTS", "tokenlock:coupons"}), "0");
  EXPECT_GT(std::stol(server->cli({"PTTL", "tokenlock:coupons:fence"})), 0);
  EXPECT_EQ(server->cli({"DBSIZE"}), "1");
  // A try_acquire that is refused does not wait, and is not counted as a
  // waiter: the release wakes nobody.
  redis_handle again = a.acquire();
  EXPECT_FALSE(lock("coupons", options()).try_acquire().has_value());
  again.release();
  EXPECT_EQ(server->cli({"DBSIZE"}), "1");
  // Contended: the count of waiters expires too; the wake-up and the
  // hand-off were taken by the waiter.
  redis_handle third = a.acquire();
  std::thread waiter([&] { lock("coupons", options(30s, 10s)).acquire().release(); });
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (server->cli({"CLIENT", "LIST"}).find("cmd=blpop") == std::string::npos &&
         std::chrono::steady_clock::now() < give_up) {
  }
  third.release();
  waiter.join();
  EXPECT_EQ(server->cli({"EXISTS", "tokenlock:coupons"}), "0");
  EXPECT_GT(std::stol(server->cli({"PTTL", "tokenlock:coupons:waiters"})), 0);
  EXPECT_LE(std::stol(server->cli({"PTTL", "tokenlock:coupons:waiters"})), 10000 + 2 * 2000);
  EXPECT_EQ(server->cli({"DBSIZE"}), "2");
}

// A waiter killed while it waits leaves its count behind (until the
// count expires): the next release still wakes someone, and what it leaves
// (one element on the wake list, the hand-off) expires. A newcomer refused
// by that hand-off takes the wake-up nobody waited for at once, instead of
// waiting out the hand-off's grace.
TEST_F(RedisLockTest, AWakeUpNobodyWaitedForExpiresAndCostsANewcomerOneBlock) {
  ASSERT_EQ(raw(*server, {"SET", "tokenlock:coupons:waiters", "1", "PX", "60000"}), "OK");
  // Connected first, so that everything below comes well inside the
  // hand-off's 500 ms (raw: a client in this process, no redis-cli to start).
  redis_lock newcomer = lock("coupons", options(30s, 5s)), trier = lock("coupons", options());
  EXPECT_FALSE(newcomer.holder().has_value());
  EXPECT_FALSE(trier.holder().has_value());
  lock("coupons", options(20s)).acquire().release();
  EXPECT_FALSE(trier.try_acquire().has_value()) << "a newcomer took the lock kept for a woken waiter";
  const long wake_ttl = std::stol(raw(*server, {"PTTL", "tokenlock:coupons:wake"}));
  EXPECT_GT(wake_ttl, 0);
  EXPECT_LE(wake_ttl, 20000);
  const long handoff_ttl = std::stol(raw(*server, {"PTTL", "tokenlock:coupons:handoff"}));
  EXPECT_GT(handoff_ttl, 0);
  EXPECT_LE(handoff_ttl, 500);
  const auto before = this_thread_redis_wait_stats();
  redis_handle h = newcomer.acquire();
  EXPECT_EQ(this_thread_redis_wait_stats().wakes, before.wakes + 1)
      << "the newcomer's block was not ended by the wake-up on the list: it waited out the hand-off";
  EXPECT_EQ(server->cli({"EXISTS", "tokenlock:coupons:handoff"}), "0");
  EXPECT_EQ(server->cli({"LLEN", "tokenlock:coupons:wake"}), "0");
  EXPECT_EQ(server->cli({"GET", "tokenlock:coupons:waiters"}), "1") << "the killed waiter's count";
}

TEST_F(RedisLockTest, ALostGrantIsReportedWithItsReason) {
  redis_lock a = lock("coupons", options()), b = lock("coupons", options());
  // The lease ended: the key expired (deleted here as expiry would).
  {
    redis_handle h = a.acquire();
    server->cli({"DEL", "tokenlock:coupons"});
    const auto e = error_of([&] { h.release(); });
    EXPECT_EQ(e.first, errc::lock_lost);
    EXPECT_NE(e.second.find("our lease ended (nobody has taken the lock since)"), std::string::npos)
        << e.second;
    EXPECT_FALSE(h.owns());
  }
  // A newer grant took it.
  {
    redis_handle h = a.acquire();
    server->cli({"DEL", "tokenlock:coupons"});
    redis_handle newer = b.acquire();
    std::error_code ec;
    h.refresh(ec);
    EXPECT_EQ(ec, errc::lock_lost);
    EXPECT_NE(tokenlock::last_error_message().find("a newer grant (fence " +
                                                   std::to_string(newer.fence())),
              std::string::npos)
        << tokenlock::last_error_message();
    EXPECT_TRUE(newer.owns());
    newer.release();  // the newer holder is untouched
  }
  // The server lost everything.
  {
    redis_handle h = a.acquire();
    server->cli({"FLUSHALL"});
    const auto e = error_of([&] { h.release(); });
    EXPECT_EQ(e.first, errc::lock_lost);
    EXPECT_NE(e.second.find("the server lost the lock's state"), std::string::npos) << e.second;
  }
}

TEST_F(RedisLockTest, FencesKeepIncreasingWhenTheServerLosesItsData) {
  redis_lock a = lock("coupons", options());
  std::uint64_t last = 0;
  for (int i = 0; i < 3; ++i) {
    redis_handle h = a.acquire();
    EXPECT_GT(h.fence(), last);
    last = h.fence();
    h.release();
  }
  server->cli({"FLUSHALL"});
  redis_handle h = a.acquire();
  EXPECT_GT(h.fence(), last) << "after FLUSHALL";
  last = h.fence();
  h.detach();  // held when the server dies
  server->restart();
  redis_handle g = lock("coupons", options()).acquire();
  EXPECT_GT(g.fence(), last) << "after a restart without persistence";
}

// Eviction under maxmemory, as a cache server configured with allkeys-lru
// does it: the least recently used keys go, the lock's among the first.
TEST_F(RedisLockTest, FencesKeepIncreasingWhenTheServerEvictsTheLocksKeys) {
  redis_lock a = lock("coupons", options());
  const std::uint64_t released = a.acquire().fence();  // released at once: :fence stays
  redis_handle held = lock("vouchers", options()).acquire();
  const std::string info = server->cli({"INFO", "memory"});
  const auto at = info.find("used_memory:");
  ASSERT_NE(at, std::string::npos) << info;
  const long long used = std::stoll(info.substr(at + 12));
  ASSERT_EQ(server->cli({"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"}), "OK");
  ASSERT_EQ(server->cli({"CONFIG", "SET", "maxmemory", std::to_string(used + 256 * 1024)}), "OK");
  // A script's writes are not checked against maxmemory one by one: it goes
  // over, and the next command evicts until the server is under again.
  const std::string fill =
      "for i = 1, 20000 do redis.call('SET', 'fill:' .. ARGV[1] .. ':' .. i, "
      "string.rep('x', 200)) end return 1";
  for (int round = 0; round < 10 && (server->cli({"EXISTS", "tokenlock:coupons:fence"}) != "0" ||
                                     server->cli({"EXISTS", "tokenlock:vouchers"}) != "0");
       ++round) {
    server->cli({"EVAL", fill, "0", std::to_string(round)});
    server->cli({"SET", "after", "fill"});  // evicts
  }
  ASSERT_EQ(server->cli({"EXISTS", "tokenlock:coupons:fence"}), "0") << "never evicted";
  ASSERT_EQ(server->cli({"EXISTS", "tokenlock:vouchers"}), "0") << "never evicted";
  const std::string stats = server->cli({"INFO", "stats"});
  EXPECT_EQ(stats.find("evicted_keys:0\r"), std::string::npos) << stats;
  server->cli({"FLUSHDB"});  // room again for the lock's own keys

  EXPECT_GT(a.acquire().fence(), released);
  std::error_code ec;
  held.release(ec);
  EXPECT_EQ(ec, errc::lock_lost);
  EXPECT_NE(tokenlock::last_error_message().find("the server lost the lock's state"),
            std::string::npos)
      << tokenlock::last_error_message();
  EXPECT_GT(lock("vouchers", options()).acquire().fence(), held.fence());
}

TEST_F(RedisLockTest, AGrantWaitsForItsReplicaAndFailsWhenTheReplicaStopsAnswering) {
  redis_server replica({"--replicaof", "127.0.0.1", std::to_string(server->port())});
  ASSERT_TRUE(server->replicas_caught_up(1)) << "the replica never synchronised";
  redis_lock_options o = options();
  o.replicas = 1;
  o.replica_timeout = 5s;
  redis_lock a = lock("coupons", o);
  redis_handle h = a.acquire();
  // Acknowledged: the replica has the grant as the primary made it.
  EXPECT_EQ(replica.cli({"GET", "tokenlock:coupons"}), std::to_string(h.fence()) + " " + h.owner());
  h.release();

  replica.stop_answering();
  o.replica_timeout = 200ms;
  redis_lock b = lock("coupons", o);
  const auto e = error_of([&] { b.acquire(); });
  replica.resume();
  EXPECT_EQ(e.first, errc::not_replicated) << e.second;
  EXPECT_NE(e.second.find("0 of 1 replicas acknowledged"), std::string::npos) << e.second;
  EXPECT_FALSE(b.holder().has_value()) << "the unreplicated grant was kept";
}

// The server's clock went back (a failover to a machine whose clock is
// behind): fences still increase, by one, and the handle says how far.
TEST_F(RedisLockTest, AServerClockBehindTheLastFenceIsReported) {
  const std::string ahead = "9000000000000000";  // the year 2255, in us
  server->cli({"SET", "tokenlock:coupons:fence", ahead, "PX", "86400000"});
  redis_lock a = lock("coupons", options());
  redis_handle h = a.acquire();
  EXPECT_EQ(h.fence(), 9000000000000001u);
  EXPECT_GT(h.clock_behind(), std::chrono::hours(24 * 365 * 100));
  h.release();
  redis_handle g = a.acquire();
  EXPECT_EQ(g.fence(), 9000000000000002u);
  g.release();
  // A server whose clock is fine reports nothing.
  server->cli({"DEL", "tokenlock:coupons:fence"});
  redis_handle normal = a.acquire();
  EXPECT_EQ(normal.clock_behind().count(), 0);
}

TEST_F(RedisLockTest, WorksOverTheUnixSocketWithAnotherDatabase) {
  redis_lock a(server->unix_url(3), "coupons", options());
  redis_handle h = a.acquire();
  EXPECT_EQ(server->cli({"-n", "3", "EXISTS", "tokenlock:coupons"}), "1");
  EXPECT_EQ(server->cli({"EXISTS", "tokenlock:coupons"}), "0") << "db 0 untouched";
  h.release();
}

// Lock X's other keys are X:fence, X:wake, X:waiters and X:handoff: a lock
// named so is refused before any key is read or written, and names that
// merely contain a suffix still work.
TEST_F(RedisLockTest, ANameEndingInAnotherKeysSuffixIsRefusedAndTouchesNothing) {
  redis_handle held = lock("coupons", options()).acquire();
  const std::string grant = server->cli({"GET", "tokenlock:coupons"});
  const std::string fence = server->cli({"GET", "tokenlock:coupons:fence"});
  for (const char* name : {"coupons:fence", "coupons:wake", "coupons:waiters", "coupons:handoff",
                           "coupons:shared", "coupons:writer"}) {
    redis_lock bad = lock(name, options());
    const auto e = error_of([&] { bad.acquire(); });
    EXPECT_EQ(e.first, errc::bad_argument) << name;
    EXPECT_NE(e.second.find("must not end in :fence, :wake, :waiters, :handoff, :shared or :writer"),
              std::string::npos)
        << e.second;
    EXPECT_EQ(error_of([&] { bad.holder(); }).first, errc::bad_argument) << name;
    EXPECT_EQ(error_of([&] { bad.break_owner("x"); }).first, errc::bad_argument) << name;
  }
  EXPECT_EQ(server->cli({"GET", "tokenlock:coupons"}), grant) << "the holder's grant was touched";
  EXPECT_EQ(server->cli({"GET", "tokenlock:coupons:fence"}), fence);
  EXPECT_EQ(server->cli({"DBSIZE"}), "2") << "a refused name wrote a key";
  for (const char* name : {"coupons:fenced", "coupons:fence:1", ":fence"}) {
    redis_handle ok = lock(name, options()).acquire();
    EXPECT_TRUE(ok.owns()) << name;
  }
  held.release();
}

TEST_F(RedisLockTest, AskingForReplicasThatDoNotExistReleasesTheGrant) {
  redis_lock_options o = options();
  o.replicas = 1;
  o.replica_timeout = 100ms;
  redis_lock a = lock("coupons", o);
  const auto e = error_of([&] { a.acquire(); });
  EXPECT_EQ(e.first, errc::not_replicated);
  EXPECT_NE(e.second.find("0 of 1 replicas acknowledged"), std::string::npos) << e.second;
  EXPECT_FALSE(a.holder().has_value()) << "the grant was kept";
}

// ---- update_file and increment_counter with a Redis lock -----------------------
// (what every backend promises is the contract's: tests/contract, UpdateContract;
// here, the fence directory beside the target, which a lock directory has not)

TEST_F(RedisLockTest, AFenceNewerThanOurGrantRefusesTheUpdateBeforeItReads) {
  temp_dir tmp;
  const fs::path file = tmp / "data";
  spit(file, "7\n");
  fs::create_directories(tmp / "data.fence" / "f.10000000000000000000");
  redis_lock a = lock("data", options());
  std::error_code ec;
  bool called = false;
  tokenlock::update_file(file, a,
                         [&](const std::optional<std::string>&) {
                           called = true;
                           return std::string("x");
                         },
                         {}, ec);
  EXPECT_EQ(ec, errc::lock_lost);
  EXPECT_NE(tokenlock::last_error_message().find("a newer holder of the lock (fence 10000000000000000000)"),
            std::string::npos)
      << tokenlock::last_error_message();
  EXPECT_FALSE(called);
  EXPECT_EQ(slurp(file), "7\n");
  EXPECT_FALSE(a.holder().has_value()) << "released after the refusal";

  fs::create_directories(tmp / "data.fence" / "f.00000000000000000001");
  EXPECT_EQ(tokenlock::increment_counter(file, a, 1, {}, ec), 0u);
  EXPECT_EQ(ec, errc::lock_corrupt);
  EXPECT_NE(tokenlock::last_error_message().find("holds 2 fence entries"), std::string::npos);
  EXPECT_EQ(slurp(file), "7\n");
  EXPECT_TRUE(temp_files_below(tmp.path()).empty());
}

TEST_F(RedisLockTest, AFenceDirectoryOthersCanWriteIsRefusedBeforeAnythingIsWrittenInIt) {
  // Another user could rename a file of theirs onto our temporary file's
  // name in it just before the commit (docs/security.md).
  temp_dir tmp;
  const fs::path file = tmp / "data";
  spit(file, "7\n");
  fs::create_directories(tmp / "data.fence" / "f.00000000000000000001");
  ASSERT_EQ(::chmod((tmp / "data.fence").c_str(), 0777), 0);
  redis_lock a = lock("data", options());
  std::error_code ec;
  EXPECT_EQ(tokenlock::increment_counter(file, a, 1, {}, ec), 0u);
  EXPECT_EQ(ec, errc::untrusted) << tokenlock::last_error_message();
  EXPECT_NE(tokenlock::last_error_message().find("refusing the fence directory"), std::string::npos)
      << tokenlock::last_error_message();
  EXPECT_EQ(slurp(file), "7\n");
  EXPECT_TRUE(temp_files_below(tmp.path()).empty());
  EXPECT_TRUE(fs::exists(tmp / "data.fence" / "f.00000000000000000001")) << "nothing renamed";
  EXPECT_FALSE(a.holder().has_value()) << "released after the refusal";
  // A fence entry that is a link to elsewhere is never written through.
  ASSERT_EQ(::chmod((tmp / "data.fence").c_str(), 0755), 0);
  fs::remove(tmp / "data.fence" / "f.00000000000000000001");
  fs::create_directory(tmp / "elsewhere");
  fs::create_directory_symlink(tmp / "elsewhere", tmp / "data.fence" / "f.00000000000000000001");
  EXPECT_EQ(tokenlock::increment_counter(file, a, 1, {}, ec), 0u);
  EXPECT_TRUE(ec) << "a link in the entry's place is not used";
  EXPECT_TRUE(fs::is_empty(tmp / "elsewhere"));
  EXPECT_EQ(slurp(file), "7\n");
}

// ---- keys the lock cannot use: lock_corrupt, the key, what it holds, the fix ----

// What lock_corrupt says about `key`: its name, the value as the message
// shows it, and the redis-cli command that repairs it.
void expect_corrupt(const std::pair<std::error_code, std::string>& e, const std::string& key,
                    const std::string& shows, const std::string& fix) {
  EXPECT_EQ(e.first, errc::lock_corrupt) << e.second;
  EXPECT_NE(e.second.find("the key " + key + " holds " + shows), std::string::npos) << e.second;
  EXPECT_NE(e.second.find("fix: "), std::string::npos) << e.second;
  EXPECT_NE(e.second.find(fix), std::string::npos) << e.second;
}

TEST_F(RedisLockTest, AFenceKeyThatIsNotAFenceIsCorruptForAcquireAndNothingIsWritten) {
  const std::string key = "tokenlock:coupons:fence";
  const std::string fix = "redis-cli -h 127.0.0.1 -p " + std::to_string(server->port()) +
                          " SET " + key + " FENCE";
  struct hostile {
    std::string value, shows;
  };
  for (const hostile& h :
       {hostile{"1e23", "\"1e23\", which is not a fence"}, hostile{"inf", "\"inf\""},
        hostile{"-5", "\"-5\""}, hostile{"abc", "\"abc\""},
        hostile{"9223372036854775808", "\"9223372036854775808\", which is not a fence"},
        hostile{"", "\"\", which is not a fence"}, hostile{"0x10", "\"0x10\""},
        hostile{" 17", "\" 17\""}, hostile{"0017", "\"0017\""},
        hostile{std::string("1\x01\n\xff\\", 5), "\"1\\x01\\x0a\\xff\\x5c\""}}) {
    ASSERT_EQ(raw(*server, {"SET", key, h.value}), "OK");
    redis_lock a = lock("coupons", options());
    const auto e = error_of([&] { a.acquire(); });
    expect_corrupt(e, key, h.shows, fix);
    EXPECT_NE(e.second.find("above every fence already handed out"), std::string::npos);
    EXPECT_NE(e.second.find("tokenlock break --redis does not touch the fence key"),
              std::string::npos);
    expect_corrupt(error_of([&] { a.try_acquire(); }), key, h.shows, fix);
    // Nothing granted, nothing counted, the key left for the operator.
    EXPECT_EQ(raw(*server, {"EXISTS", "tokenlock:coupons"}), "0") << h.value;
    EXPECT_EQ(raw(*server, {"GET", key}), h.value);
    EXPECT_EQ(raw(*server, {"DBSIZE"}), "1");
  }
  // A long value is cut, with its length.
  ASSERT_EQ(raw(*server, {"SET", key, std::string(5000, '7') + "x"}), "OK");
  const auto e = error_of([&] { lock("coupons", options()).acquire(); });
  expect_corrupt(e, key, "\"" + std::string(64, '7') + "\"... (5001 bytes)", fix);
  EXPECT_LT(e.second.size(), 1000u) << e.second;
  // Another type.
  ASSERT_EQ(raw(*server, {"DEL", key}), "1");
  ASSERT_EQ(raw(*server, {"RPUSH", key, "1"}), "1");
  expect_corrupt(error_of([&] { lock("coupons", options()).acquire(); }), key,
                 "a list, not a string", fix);
  // The fix the message gives: a fence above every one handed out.
  ASSERT_EQ(raw(*server, {"SET", key, "5000000000000000"}), "OK");
  redis_handle h = lock("coupons", options()).acquire();
  EXPECT_EQ(h.fence(), 5000000000000001u);
}

TEST_F(RedisLockTest, ReleaseAndRefreshThatReadACorruptFenceKeySayItAndForgetTheGrant) {
  const std::string key = "tokenlock:coupons:fence";
  const std::string fix = "SET " + key + " FENCE";
  redis_lock a = lock("coupons", options());
  redis_handle h = a.acquire();
  // Our grant gone (its lease ended, say) and the fence key replaced: why
  // the grant was lost is read from the fence key, which holds no fence.
  ASSERT_EQ(raw(*server, {"DEL", "tokenlock:coupons"}), "1");
  ASSERT_EQ(raw(*server, {"SET", key, "inf"}), "OK");
  expect_corrupt(error_of([&] { h.refresh(); }), key, "\"inf\"", fix);
  EXPECT_FALSE(h.owns()) << "a grant that cannot be ours any more is forgotten";
  EXPECT_EQ(raw(*server, {"EXISTS", "tokenlock:coupons"}), "0") << "refresh wrote a grant";
  EXPECT_EQ(raw(*server, {"GET", key}), "inf");

  ASSERT_EQ(raw(*server, {"SET", key, "1"}), "OK");
  redis_handle m = a.acquire();
  ASSERT_EQ(raw(*server, {"DEL", "tokenlock:coupons"}), "1");
  ASSERT_EQ(raw(*server, {"SET", key, "-5"}), "OK");
  expect_corrupt(error_of([&] { m.release(); }), key, "\"-5\"", fix);
  EXPECT_FALSE(m.owns());
  EXPECT_EQ(raw(*server, {"EXISTS", "tokenlock:coupons"}), "0");
  EXPECT_EQ(raw(*server, {"GET", key}), "-5");

  // A release of a grant that is still ours reads no fence: it frees the
  // lock whatever the fence key holds (the next acquire reports it).
  ASSERT_EQ(raw(*server, {"SET", key, "1"}), "OK");
  redis_handle n = a.acquire();
  ASSERT_EQ(raw(*server, {"SET", key, "abc"}), "OK");
  n.release();
  EXPECT_EQ(raw(*server, {"EXISTS", "tokenlock:coupons"}), "0");
  EXPECT_EQ(error_of([&] { a.acquire(); }).first, errc::lock_corrupt);
}

TEST_F(RedisLockTest, FencesAbove2To53StillIncreaseByOneAndNoneIsGrantedPast2To63) {
  const std::string key = "tokenlock:coupons:fence";
  redis_lock a = lock("coupons", options());
  struct step {
    const char* last;
    std::uint64_t next;
  };
  // Past 2^53 a double cannot add one; the script counts in decimal.
  for (const step& s : {step{"9007199254740992", 9007199254740993u},
                        step{"9007199254740993", 9007199254740994u},
                        step{"9999999999999999", 10000000000000000u},
                        step{"9223372036854775806", 9223372036854775807u}}) {
    ASSERT_EQ(raw(*server, {"SET", key, s.last}), "OK");
    redis_handle h = a.acquire();
    EXPECT_EQ(h.fence(), s.next) << s.last;
    EXPECT_EQ(raw(*server, {"GET", key}), std::to_string(s.next));
    EXPECT_EQ(a.holder()->fence, s.next);
    EXPECT_GT(h.clock_behind().count(), 0);
    h.release();
  }
  // The fence key now holds 2^63 - 1: nothing can follow it.
  const auto e = error_of([&] { a.acquire(); });
  expect_corrupt(e, key, "\"9223372036854775807\": no fence below 2^63 can follow it",
                 "SET " + key + " FENCE");
  EXPECT_EQ(raw(*server, {"EXISTS", "tokenlock:coupons"}), "0");
  EXPECT_EQ(raw(*server, {"GET", key}), "9223372036854775807");

  // A lost grant's reason compares fences exactly: one more than ours is
  // a newer grant, even where doubles cannot tell them apart.
  ASSERT_EQ(raw(*server, {"SET", key, "9007199254740992"}), "OK");
  redis_handle h = a.acquire();
  ASSERT_EQ(h.fence(), 9007199254740993u);
  ASSERT_EQ(raw(*server, {"DEL", "tokenlock:coupons"}), "1");
  ASSERT_EQ(raw(*server, {"SET", key, "9007199254740994"}), "OK");
  const auto lost = error_of([&] { h.release(); });
  EXPECT_EQ(lost.first, errc::lock_lost) << lost.second;
  EXPECT_NE(lost.second.find("a newer grant (fence 9007199254740994)"), std::string::npos)
      << lost.second;
}

TEST_F(RedisLockTest, AGrantKeyOfAnotherFormIsCorruptForAcquireAndStatusAndIsLeftAlone) {
  const std::string key = "tokenlock:coupons";
  const std::string fix = "redis-cli -h 127.0.0.1 -p " + std::to_string(server->port()) +
                          " DEL " + key;
  for (const std::string& value :
       {std::string("garbage"), std::string("17"), std::string("17 "), std::string(" x"),
        std::string("1e3 host-12345678.1.2.3"), std::string("17 two words"),
        std::string("17 not-an-owner"), std::string("9223372036854775808 host-1")}) {
    ASSERT_EQ(raw(*server, {"SET", key, value, "PX", "60000"}), "OK");
    redis_lock a = lock("coupons", options(30s, 200ms));
    const std::string shows = "\"" + value + "\", which is not a grant as the lock writes it";
    expect_corrupt(error_of([&] { a.acquire(); }), key, shows, fix);
    expect_corrupt(error_of([&] { a.try_acquire(); }), key, shows, fix);
    expect_corrupt(error_of([&] { a.holder(); }), key, shows, fix);
    expect_corrupt(error_of([&] { a.break_owner("host-12345678.1.2.3"); }), key, shows, fix);
    // Left as it was; nobody counted as waiting.
    EXPECT_EQ(raw(*server, {"GET", key}), value);
    EXPECT_EQ(raw(*server, {"EXISTS", "tokenlock:coupons:waiters"}), "0") << value;
  }
  // Another type: the layout before 0.1.0 kept a hash.
  ASSERT_EQ(raw(*server, {"DEL", key}), "1");
  ASSERT_EQ(raw(*server, {"HSET", key, "owner", "x", "fence", "1"}), "2");
  expect_corrupt(error_of([&] { lock("coupons", options()).holder(); }), key,
                 "a hash, not a string", fix);
  // The fix the message gives frees the lock.
  ASSERT_EQ(raw(*server, {"DEL", key}), "1");
  redis_handle h = lock("coupons", options()).acquire();
  EXPECT_TRUE(h.owns());
}

TEST_F(RedisLockTest, AGrantWithoutAnExpiryIsCorruptInsteadOfHeldForever) {
  const std::string key = "tokenlock:coupons";
  redis_lock a = lock("coupons", options(30s, 200ms));
  redis_handle held = a.acquire();
  const std::string value = raw(*server, {"GET", key});
  ASSERT_EQ(raw(*server, {"PERSIST", key}), "1");
  redis_lock b = lock("coupons", options(30s, 200ms));
  const std::string shows = "\"" + value + "\", a grant without an expiry (PTTL -1)";
  const std::string fix = "PEXPIRE " + key + " MILLISECONDS";
  expect_corrupt(error_of([&] { b.acquire(); }), key, shows, fix);
  expect_corrupt(error_of([&] { b.try_acquire(); }), key, shows, fix);
  expect_corrupt(error_of([&] { b.holder(); }), key, shows, fix);
  EXPECT_NE(error_of([&] { b.holder(); }).second.find("DEL " + key), std::string::npos);
  EXPECT_EQ(raw(*server, {"PTTL", key}), "-1");
  EXPECT_EQ(raw(*server, {"EXISTS", "tokenlock:coupons:waiters"}), "0");
  // Its owner still holds it and can give it a lease again, or release it.
  held.refresh();
  EXPECT_GT(std::stol(raw(*server, {"PTTL", key})), 0);
  EXPECT_EQ(b.holder()->fence, held.fence());
  held.release();
  EXPECT_FALSE(b.holder().has_value());
}

// ---- errors: clear, naming the server and the step, never a hang ---------------

TEST(RedisLockErrors, AnUnreachableServerIsNamed) {
  const int port = free_port();
  redis_lock_options o;
  o.wait = 2s;
  redis_lock a("redis://127.0.0.1:" + std::to_string(port), "coupons", o);
  const auto start = std::chrono::steady_clock::now();
  const auto e = error_of([&] { a.acquire(); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_EQ(e.first, std::errc::connection_refused);
  EXPECT_NE(e.second.find("redis://127.0.0.1:" + std::to_string(port)), std::string::npos) << e.second;
  EXPECT_NE(e.second.find("cannot connect"), std::string::npos) << e.second;
  EXPECT_NE(e.second.find("is redis-server running"), std::string::npos) << e.second;

  redis_lock missing("unix:///nonexistent/dir/redis.sock", "coupons", o);
  const auto m = error_of([&] { missing.acquire(); });
  EXPECT_TRUE(m.first) << m.second;
  EXPECT_NE(m.second.find("unix:///nonexistent/dir/redis.sock"), std::string::npos) << m.second;
}

TEST(RedisLockErrors, BadArgumentsAreRefusedBeforeAnyConnection) {
  EXPECT_EQ(error_of([] { redis_lock("redis://host:99999", "x").acquire(); }).first,
            errc::bad_argument);
  const auto e = error_of([] { redis_lock("redis://host:99999", "x").acquire(); });
  EXPECT_NE(e.second.find("bad Redis URL \"redis://host:99999\""), std::string::npos) << e.second;
  EXPECT_EQ(error_of([] { redis_lock("redis://127.0.0.1", "").acquire(); }).first,
            errc::bad_argument);
  redis_lock_options o;
  o.lease = 0ms;
  EXPECT_EQ(error_of([&] { redis_lock("redis://127.0.0.1", "x", o).acquire(); }).first,
            errc::bad_argument);
}

TEST(RedisLockErrors, AWrongPasswordIsAServerErrorWithTheFix) {
  const std::string why = redis_server::unavailable();
  if (!why.empty()) GTEST_SKIP() << why;
  redis_server server({"--requirepass", "s3cret"});
  redis_lock_options o;
  o.wait = 0ms;
  const auto e = error_of([&] { redis_lock(server.url(":wrong"), "coupons", o).acquire(); });
  EXPECT_EQ(e.first, errc::server_error);
  EXPECT_NE(e.second.find("authenticate"), std::string::npos) << e.second;
  EXPECT_NE(e.second.find("check the user and password"), std::string::npos) << e.second;
  const auto none = error_of([&] { redis_lock(server.url(), "coupons", o).acquire(); });
  EXPECT_EQ(none.first, errc::server_error) << none.second;
  EXPECT_NE(none.second.find("the server requires a password"), std::string::npos) << none.second;
  redis_handle h = redis_lock(server.url(":s3cret"), "coupons", o).acquire();
  EXPECT_TRUE(h.owns());
}

// Redis 6+ ACL users: the user name in the URL logs in as that user; a user
// whose ACL forbids the lock's commands is told which to allow.
TEST(RedisLockErrors, AnAclUserInTheUrlIsUsedAndOneWithoutTheRightsIsToldWhatToAllow) {
  const std::string why = redis_server::unavailable();
  if (!why.empty()) GTEST_SKIP() << why;
  redis_server server({"--user", "locker", "on", ">lockpw", "~tokenlock:*", "&*", "+@all",
                       "--user", "reader", "on", ">readpw", "~*", "+@read", "+@connection"});
  redis_lock_options o;
  o.wait = 0ms;
  redis_handle h = redis_lock(server.url("locker:lockpw"), "coupons", o).acquire();
  EXPECT_TRUE(h.owns());
  EXPECT_EQ(server.cli({"GET", "tokenlock:coupons"}), std::to_string(h.fence()) + " " + h.owner());
  h.release();

  const auto wrong = error_of([&] { redis_lock(server.url("locker:readpw"), "coupons", o).acquire(); });
  EXPECT_EQ(wrong.first, errc::server_error);
  EXPECT_NE(wrong.second.find("check the user and password"), std::string::npos) << wrong.second;

  const auto denied = error_of([&] { redis_lock(server.url("reader:readpw"), "coupons", o).acquire(); });
  EXPECT_EQ(denied.first, errc::server_error);
  EXPECT_NE(denied.second.find("NOPERM"), std::string::npos) << denied.second;
  EXPECT_NE(denied.second.find("allow EVAL, EVALSHA"), std::string::npos) << denied.second;
  EXPECT_EQ(server.cli({"EXISTS", "tokenlock:coupons"}), "0") << "nothing half-made";
}

TEST(RedisLockErrors, AReadOnlyReplicaIsAServerErrorWithTheFix) {
  const std::string why = redis_server::unavailable();
  if (!why.empty()) GTEST_SKIP() << why;
  redis_server primary;
  redis_server replica({"--replicaof", "127.0.0.1", std::to_string(primary.port())});
  redis_lock_options o;
  o.wait = 0ms;
  redis_lock a(replica.url(), "coupons", o);
  const auto e = error_of([&] { a.acquire(); });
  EXPECT_EQ(e.first, errc::server_error);
  EXPECT_NE(e.second.find("READONLY"), std::string::npos) << e.second;
  EXPECT_NE(e.second.find("point it at the primary"), std::string::npos) << e.second;
  EXPECT_EQ(replica.cli({"DBSIZE"}), "0") << "nothing half-made";
}

TEST(RedisLockErrors, AServerThatStopsAnsweringTimesOutInsteadOfHanging) {
  const std::string why = redis_server::unavailable();
  if (!why.empty()) GTEST_SKIP() << why;
  redis_server server;
  redis_lock_options o;
  o.wait = 5s;
  o.command_timeout = 300ms;
  o.connect_timeout = 300ms;
  redis_lock a(server.url(), "coupons", o);
  redis_handle h = a.acquire();
  server.stop_answering();
  // The kernel still accepts the connection; the command gets no answer.
  redis_lock b(server.url(), "coupons", o);
  const auto start = std::chrono::steady_clock::now();
  const auto e = error_of([&] { b.acquire(); });
  EXPECT_EQ(e.first, std::errc::timed_out) << e.second;
  EXPECT_NE(e.second.find("acquire " + server.url()), std::string::npos) << e.second;
  EXPECT_NE(e.second.find("no answer in time"), std::string::npos) << e.second;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  server.resume();
  h.release();  // the holder's connection was never disturbed
}

}  // namespace
