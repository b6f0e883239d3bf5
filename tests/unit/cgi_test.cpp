// The CGI helper and the counter's request handling, without a server.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include <sys/stat.h>

#include <boost/filesystem.hpp>

#include "cgi.hpp"
#include "counter_app.hpp"
#include "inspect.hpp"
#include "temp_dir.hpp"
#include "tokenlock/tokenlock.hpp"
#if COUNTER_HAVE_REDIS
#include "redis_server.hpp"
#endif

namespace fs = boost::filesystem;
using tokenlock::testing::slurp;
using tokenlock::testing::snapshot;
using tokenlock::testing::spit;
using tokenlock::testing::temp_dir;

namespace {

std::map<std::string, std::string> parsed(const std::string& q) {
  std::map<std::string, std::string> out;
  std::string reason;
  EXPECT_TRUE(cgi::parse_query(q, out, reason)) << q << ": " << reason;
  return out;
}

std::string refused(const std::string& q) {
  std::map<std::string, std::string> out;
  std::string reason;
  EXPECT_FALSE(cgi::parse_query(q, out, reason)) << q;
  return reason;
}

TEST(QueryString, DecodesPercentEscapesAndPlus) {
  auto q = parsed("id=a%2Db&note=hello+world%21&empty=&flag");
  EXPECT_EQ(q["id"], "a-b");
  EXPECT_EQ(q["note"], "hello world!");
  EXPECT_EQ(q["empty"], "");
  EXPECT_EQ(q["flag"], "");
  EXPECT_TRUE(parsed("").empty());
  EXPECT_EQ(parsed("a=1&&b=2&").size(), 2u);
}

TEST(QueryString, RefusesWhatItCannotReadWithAShortReason) {
  EXPECT_EQ(refused("id=%zz"), "invalid percent-encoding");
  EXPECT_EQ(refused("id=%4"), "invalid percent-encoding");
  EXPECT_EQ(refused("id=%"), "invalid percent-encoding");
  EXPECT_EQ(refused("id=a%00b"), "invalid percent-encoding");
  EXPECT_EQ(refused("id=1&id=2"), "repeated parameter");
  EXPECT_EQ(refused("=x"), "parameter without a name");
  EXPECT_EQ(refused("id=" + std::string(300, 'a')), "parameter too long");
  EXPECT_EQ(refused(std::string(3000, 'a')), "query string too long");
  std::string many;
  for (int i = 0; i < 17; ++i) many += "p" + std::to_string(i) + "=1&";
  EXPECT_EQ(refused(many), "too many parameters");
}

TEST(CgiResponse, WritesStatusHeadersAndBodyButNoBodyForHead) {
  cgi::response r;
  r.status = 503;
  r.headers.emplace_back("Retry-After", "1");
  r.body = "busy\n";
  std::ostringstream get, head;
  cgi::write_response(get, r, false);
  cgi::write_response(head, r, true);
  EXPECT_EQ(get.str(),
            "Status: 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 5\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
            "Retry-After: 1\r\n\r\nbusy\n");
  EXPECT_EQ(head.str(), get.str().substr(0, get.str().size() - 5));
}

class CounterAppTest : public ::testing::Test {
 protected:
  temp_dir tmp;
  counter::config cfg;
  std::ostringstream log;
  void SetUp() override {
    cfg.dir = tmp.path().string();
    cfg.sync = tokenlock::durability::none;
  }
  cgi::response get(const std::string& query, const std::string& method = "GET") {
    return counter::handle({method, query}, cfg, log);
  }
};

TEST_F(CounterAppTest, CountsAndAnswersInEachFormat) {
  EXPECT_EQ(get("id=home").body, "1\n");
  EXPECT_EQ(get("id=home&format=json").body, "{\"id\":\"home\",\"count\":2}\n");
  auto svg = get("id=home&format=svg");
  EXPECT_EQ(svg.content_type, "image/svg+xml");
  EXPECT_NE(svg.body.find(">000003</text>"), std::string::npos) << svg.body;
  EXPECT_EQ(get("").body, "1\n") << "the default id";
  EXPECT_EQ(slurp(tmp / "home.count"), "3\n");
  EXPECT_TRUE(fs::is_directory(tmp / "home.count.lock"));
}

TEST_F(CounterAppTest, PeekAndHeadNeverIncrement) {
  get("id=x");
  EXPECT_EQ(get("id=x&peek=1").body, "1\n");
  auto head = get("id=x", "HEAD");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(get("id=x&peek=1").body, "1\n");
  EXPECT_EQ(get("id=never&peek=1").body, "0\n");
  EXPECT_FALSE(fs::exists(tmp / "never.count"));
}

TEST_F(CounterAppTest, RefusesBadRequestsAndTouchesNothing) {
  get("id=x");
  auto before = snapshot(tmp.path());
  for (const char* q : {"id=../../etc/passwd", "id=a.b", "id=", "id=%2e%2e%2fetc", "format=xml",
                        "peek=yes", "id=a&id=b", "id=%zz", "color=red"}) {
    auto r = get(q);
    EXPECT_EQ(r.status, 400) << q;
    EXPECT_EQ(r.body.find(tmp.path().string()), std::string::npos) << "no path in " << r.body;
  }
  EXPECT_EQ(get("id=" + std::string(65, 'a')).status, 400);
  auto post = get("id=x", "POST");
  EXPECT_EQ(post.status, 405);
  ASSERT_FALSE(post.headers.empty());
  EXPECT_EQ(post.headers[0], (std::pair<std::string, std::string>("Allow", "GET, HEAD")));
  EXPECT_EQ(snapshot(tmp.path()), before);
}

TEST_F(CounterAppTest, ACorruptCounterIs500AndStaysAsItIs) {
  spit(tmp / "c.count", "not a number\n");
  auto r = get("id=c");
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.body.find(tmp.path().string()), std::string::npos);
  EXPECT_NE(log.str().find((tmp / "c.count").string()), std::string::npos) << "details in the log";
  EXPECT_EQ(slurp(tmp / "c.count"), "not a number\n");
}

// No writer ever opens the FIFO: a read that waited for one would hang the
// request (ctest's timeout ends such a run). peek=1 goes through
// read_counter, an increment through increment_counter; both refuse what
// is not a regular file, without blocking and without reading it.
TEST_F(CounterAppTest, AFifoOrADeviceAsTheCounterIs500AtOnceAndLeftAsItIs) {
  ASSERT_EQ(::mkfifo((tmp / "f.count").c_str(), 0644), 0);
  fs::create_symlink("/dev/zero", tmp / "z.count");
  const auto before = snapshot(tmp.path());
  for (const char* q : {"id=f&peek=1", "id=f", "id=z&peek=1", "id=z"}) {
    log.str("");
    auto r = get(q);
    EXPECT_EQ(r.status, 500) << q;
    EXPECT_EQ(r.body.find(tmp.path().string()), std::string::npos) << "no path in " << r.body;
    EXPECT_NE(log.str().find(tmp.path().string()), std::string::npos) << q << ": " << log.str();
  }
  EXPECT_TRUE(fs::status(tmp / "f.count").type() == fs::fifo_file);
  EXPECT_EQ(fs::read_symlink(tmp / "z.count"), fs::path("/dev/zero"));
  for (const char* id : {"f", "z"}) {
    std::optional<tokenlock::lock_handle> h =
        tokenlock::rename_lock(tmp / (std::string(id) + ".count.lock")).try_acquire();
    ASSERT_TRUE(h && h->owns()) << id << ": the lock was left held";
    h->release();
  }
  for (const auto& e : tokenlock::testing::temp_files_below(tmp.path())) ADD_FAILURE() << e;
  auto after = snapshot(tmp.path());
  const auto is_lock = [](const std::string& e) { return e.find(".lock") != std::string::npos; };
  after.erase(std::remove_if(after.begin(), after.end(), is_lock), after.end());
  EXPECT_EQ(after, before) << "nothing but the locks' directories added";
}

TEST_F(CounterAppTest, ACounterOf65BytesIs500CorruptForPeekAndIncrement) {
  const std::string long_counter = std::string(64, '7') + "\n";
  spit(tmp / "l.count", long_counter);
  for (const char* q : {"id=l&peek=1", "id=l"}) {
    log.str("");
    auto r = get(q);
    EXPECT_EQ(r.status, 500) << q;
    EXPECT_EQ(r.body, "the counter file is corrupt; it was left as it is\n") << q;
    EXPECT_NE(log.str().find((tmp / "l.count").string()), std::string::npos) << log.str();
  }
  EXPECT_EQ(slurp(tmp / "l.count"), long_counter);
  std::optional<tokenlock::lock_handle> h =
      tokenlock::rename_lock(tmp / "l.count.lock").try_acquire();
  ASSERT_TRUE(h && h->owns()) << "the lock was left held";
  h->release();
  EXPECT_TRUE(tokenlock::testing::temp_files_below(tmp.path()).empty());
}

TEST_F(CounterAppTest, ABusyLockPastTheBudgetIs503WithRetryAfter) {
  cfg.wait = std::chrono::milliseconds(30);
  tokenlock::rename_lock lock(tmp / "b.count.lock");
  auto held = lock.acquire();
  auto r = get("id=b");
  EXPECT_EQ(r.status, 503);
  ASSERT_FALSE(r.headers.empty());
  EXPECT_EQ(r.headers[0].first, "Retry-After");
  EXPECT_FALSE(fs::exists(tmp / "b.count"));
}

TEST_F(CounterAppTest, AnUnwritableDataDirectoryIs500WithoutAPath) {
  cfg.dir = (tmp / "missing").string();
  auto r = get("id=x");
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.body.find("missing"), std::string::npos);
  EXPECT_NE(log.str().find("missing"), std::string::npos);
}

TEST(CounterConfig, ReadsTheEnvironmentAndRefusesBadValues) {
  std::map<std::string, std::string> env;
  auto getenv = [&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  counter::config c;
  std::string error;
  ASSERT_TRUE(counter::load_config(getenv, c, error));
  EXPECT_EQ(c.dir, counter::default_dir);
  EXPECT_EQ(c.wait.count(), counter::default_wait_ms);
  EXPECT_EQ(c.sync, tokenlock::durability::file_and_dir);
  env = {{"TOKENLOCK_COUNTER_DIR", "/srv/c"}, {"TOKENLOCK_COUNTER_WAIT_MS", "250"},
         {"TOKENLOCK_COUNTER_SYNC", "none"}};
  ASSERT_TRUE(counter::load_config(getenv, c, error));
  EXPECT_EQ(c.dir, "/srv/c");
  EXPECT_EQ(c.wait.count(), 250);
  EXPECT_EQ(c.sync, tokenlock::durability::none);
  env = {{"TOKENLOCK_COUNTER_SYNC", "always"}};
  EXPECT_FALSE(counter::load_config(getenv, c, error));
  EXPECT_NE(error.find("TOKENLOCK_COUNTER_SYNC"), std::string::npos);
  for (const char* bad : {"-5", "600001", "1e3", "5ms", ""}) {
    env = {{"TOKENLOCK_COUNTER_WAIT_MS", bad}};
    if (*bad == '\0') {
      EXPECT_TRUE(counter::load_config(getenv, c, error)) << "empty: the default";
      continue;
    }
    EXPECT_FALSE(counter::load_config(getenv, c, error)) << bad;
    EXPECT_NE(error.find("0 to 600000"), std::string::npos) << error;
  }
  env = {{"TOKENLOCK_COUNTER_WAIT_MS", "600000"}};
  ASSERT_TRUE(counter::load_config(getenv, c, error)) << error;
  EXPECT_EQ(c.wait.count(), 600000);
  env = {{"TOKENLOCK_COUNTER_REDIS", "redis://127.0.0.1:6390/2"}};
#if COUNTER_HAVE_REDIS
  ASSERT_TRUE(counter::load_config(getenv, c, error)) << error;
  EXPECT_EQ(c.redis, "redis://127.0.0.1:6390/2");
#else
  EXPECT_FALSE(counter::load_config(getenv, c, error));
  EXPECT_NE(error.find("built without the Redis backend"), std::string::npos) << error;
#endif
  env = {{"TOKENLOCK_COUNTER_ETCD", "etcd://127.0.0.1:2379,127.0.0.1:22379"}};
#if COUNTER_HAVE_ETCD
  ASSERT_TRUE(counter::load_config(getenv, c, error)) << error;
  EXPECT_EQ(c.etcd, "etcd://127.0.0.1:2379,127.0.0.1:22379");
#else
  EXPECT_FALSE(counter::load_config(getenv, c, error));
  EXPECT_NE(error.find("built without the etcd backend"), std::string::npos) << error;
#endif
#if COUNTER_HAVE_REDIS && COUNTER_HAVE_ETCD
  env = {{"TOKENLOCK_COUNTER_ETCD", "etcd://127.0.0.1:2379"},
         {"TOKENLOCK_COUNTER_REDIS", "redis://127.0.0.1:6390/2"}};
  EXPECT_FALSE(counter::load_config(getenv, c, error));
  EXPECT_NE(error.find("both set"), std::string::npos) << error;
#endif
}

#if COUNTER_HAVE_REDIS
// Its lock in a Redis server that is down: 503 with Retry-After, the
// server named in the log only, and the counter untouched.
TEST_F(CounterAppTest, AnUnreachableLockServerIs503AndTouchesNothing) {
  cfg.redis = "redis://127.0.0.1:" + std::to_string(tokenlock::testing::free_port());
  auto r = get("id=r");
  EXPECT_EQ(r.status, 503);
  ASSERT_FALSE(r.headers.empty());
  EXPECT_EQ(r.headers[0].first, "Retry-After");
  EXPECT_EQ(r.body.find("127.0.0.1"), std::string::npos) << r.body;
  EXPECT_NE(log.str().find(cfg.redis), std::string::npos) << log.str();
  EXPECT_FALSE(fs::exists(tmp / "r.count"));
  EXPECT_FALSE(fs::exists(tmp / "r.count.fence"));
}
#endif

#if COUNTER_HAVE_ETCD
// Its lock in an etcd cluster whose members all refuse connections (port 1
// on loopback: nothing listens there): 503 with Retry-After, the members
// named in the log only, and the counter untouched.
TEST_F(CounterAppTest, AnUnreachableEtcdClusterIs503AndTouchesNothing) {
  cfg.etcd = "etcd://127.0.0.1:1,[::1]:1";
  auto r = get("id=e");
  EXPECT_EQ(r.status, 503) << r.body << log.str();
  ASSERT_FALSE(r.headers.empty());
  EXPECT_EQ(r.headers[0].first, "Retry-After");
  EXPECT_EQ(r.body.find("127.0.0.1"), std::string::npos) << r.body;
  EXPECT_NE(log.str().find("127.0.0.1:1"), std::string::npos) << log.str();
  EXPECT_FALSE(fs::exists(tmp / "e.count"));
  EXPECT_FALSE(fs::exists(tmp / "e.count.fence"));
}
#endif

}  // namespace
