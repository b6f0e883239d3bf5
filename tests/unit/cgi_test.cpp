// The CGI helper and the counter's request handling, without a server.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include <sys/stat.h>

#include <boost/filesystem.hpp>
#include <nlohmann/json.hpp>

#include "cgi.hpp"
#include "counter_app.hpp"
#include "counter_env.hpp"
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

using counter::testing::configured;

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
  EXPECT_EQ(parsed("n=%c3%A9%2b%25")["n"], "\xc3\xa9+%") << "either case; %2b and %25 are data";
  EXPECT_EQ(parsed("n=%ff")["n"], "\xff") << "bytes, UTF-8 or not";
}

TEST(QueryString, RefusesWhatItCannotReadWithAShortReason) {
  EXPECT_EQ(refused("id=%zz"), "invalid percent-encoding");
  EXPECT_EQ(refused("id=%4"), "invalid percent-encoding");
  EXPECT_EQ(refused("id=%"), "invalid percent-encoding");
  EXPECT_EQ(refused("id=a%00b"), "invalid percent-encoding");
  EXPECT_EQ(refused(std::string("id=a\0b", 6)), "invalid percent-encoding");
  EXPECT_EQ(refused("id=%-1"), "invalid percent-encoding");
  EXPECT_EQ(refused("id=%+1"), "invalid percent-encoding");
  EXPECT_EQ(refused("id=%4g"), "invalid percent-encoding");
  EXPECT_EQ(refused("%zz=1"), "invalid percent-encoding") << "in a name too";
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
}

// Where the locks are, as the lock's variables give it. "secret" stands
// for a password, which no message may show.
struct lock_place {
  std::string spec;
  tokenlock::lock_backend backend;
};

std::vector<lock_place> places_built_in() {
  std::vector<lock_place> out = {{"/srv/counter-locks", tokenlock::lock_backend::directory}};
#if COUNTER_HAVE_REDIS
  out.push_back({"redis://:secret@127.0.0.1:6390/2", tokenlock::lock_backend::redis});
  out.push_back({"unix:///run/redis/redis.sock?db=1", tokenlock::lock_backend::redis});
#endif
#if COUNTER_HAVE_ETCD
  out.push_back({"etcd://user:secret@127.0.0.1:2379,127.0.0.1:22379", tokenlock::lock_backend::etcd});
  out.push_back({"etcds://127.0.0.1:2379?cacert=/etc/ca.pem", tokenlock::lock_backend::etcd});
#endif
  return out;
}

TEST(CounterLockConfig, TheSpecVariableNamesWhereTheLocksAreOnEveryBackendBuiltIn) {
  counter::config c;
  std::string error;
  ASSERT_TRUE(configured({}, c, error)) << error;
  EXPECT_EQ(c.lock, "") << "unset: lock directories beside the counters";
  EXPECT_EQ(c.backend, tokenlock::lock_backend::directory);
  EXPECT_EQ(c.lease, counter::directory_lease);
  ASSERT_TRUE(configured({{"TOKENLOCK_COUNTER_LOCK", ""}}, c, error)) << "empty is unset";
  EXPECT_EQ(c.lock, "");
  for (const lock_place& place : places_built_in()) {
    ASSERT_TRUE(configured({{"TOKENLOCK_COUNTER_LOCK", place.spec}}, c, error))
        << place.spec << ": " << error;
    EXPECT_EQ(c.lock, place.spec);
    EXPECT_EQ(c.backend, place.backend) << place.spec;
    const bool server = place.backend != tokenlock::lock_backend::directory;
    EXPECT_EQ(c.lease, server ? counter::server_lease : counter::directory_lease) << place.spec;
  }
}

TEST(CounterLockConfig, TheOlderVariablesAreReadAsTheSpecVariable) {
  const std::pair<const char*, const char*> older[] = {
#if COUNTER_HAVE_REDIS
      {"TOKENLOCK_COUNTER_REDIS", "redis://:secret@127.0.0.1:6390/2"},
      {"TOKENLOCK_COUNTER_REDIS", "unix:///run/redis/redis.sock"},
#endif
#if COUNTER_HAVE_ETCD
      {"TOKENLOCK_COUNTER_ETCD", "etcd://127.0.0.1:2379,127.0.0.1:22379"},
#endif
  };
  if (std::size(older) == 0) GTEST_SKIP() << "built without Redis and etcd: cgi_no_backend_tests";
  for (const auto& [name, url] : older) {
    counter::config by_old, by_spec;
    std::string error;
    ASSERT_TRUE(configured({{name, url}}, by_old, error)) << name << ": " << error;
    ASSERT_TRUE(configured({{"TOKENLOCK_COUNTER_LOCK", url}}, by_spec, error)) << error;
    EXPECT_EQ(by_old.lock, url);
    EXPECT_EQ(by_old.lock, by_spec.lock) << name;
    EXPECT_EQ(by_old.backend, by_spec.backend) << name;
    EXPECT_EQ(by_old.lease, counter::server_lease) << name;
  }
}

TEST(CounterLockConfig, TwoPlacesForTheLocksAreRefusedNamingTheVariablesNotTheirValues) {
  const std::string lock = "TOKENLOCK_COUNTER_LOCK", redis = "TOKENLOCK_COUNTER_REDIS",
                    etcd = "TOKENLOCK_COUNTER_ETCD";
  const std::string redis_url = "redis://:secret@127.0.0.1:6390", etcd_url = "etcd://u:secret@127.0.0.1:2379";
  const std::vector<std::map<std::string, std::string>> envs = {
      {{lock, redis_url}, {redis, redis_url}},
      {{lock, "/srv/locks"}, {etcd, etcd_url}},
      {{redis, redis_url}, {etcd, etcd_url}},
      {{lock, redis_url}, {redis, redis_url}, {etcd, etcd_url}}};
  for (const auto& env : envs) {
    counter::config c;
    std::string error;
    EXPECT_FALSE(configured(env, c, error)) << env.size();
    for (const auto& [name, value] : env) EXPECT_NE(error.find(name), std::string::npos) << error;
    EXPECT_NE(error.find(env.size() == 2 ? "are both set" : "are all set"), std::string::npos) << error;
    EXPECT_NE(error.find("set TOKENLOCK_COUNTER_LOCK only"), std::string::npos) << error;
    EXPECT_EQ(error.find("secret"), std::string::npos) << error;
    EXPECT_EQ(error.find("/srv/locks"), std::string::npos) << error;
  }
}

TEST(CounterLockConfig, AnOlderVariableNamingAnotherPlaceIsRefused) {
  const std::pair<const char*, const char*> wrong[] = {
      {"TOKENLOCK_COUNTER_REDIS", "/srv/locks"},
      {"TOKENLOCK_COUNTER_ETCD", "/srv/locks"},
#if COUNTER_HAVE_ETCD
      {"TOKENLOCK_COUNTER_REDIS", "etcd://u:secret@127.0.0.1:2379"},
#endif
#if COUNTER_HAVE_REDIS
      {"TOKENLOCK_COUNTER_ETCD", "redis://:secret@127.0.0.1:6379"},
#endif
  };
  for (const auto& [name, value] : wrong) {
    counter::config c;
    std::string error;
    EXPECT_FALSE(configured({{name, value}}, c, error)) << name << "=" << value;
    EXPECT_EQ(error.rfind(std::string(name) + " must be the URL of ", 0), 0u) << error;
    EXPECT_NE(error.find("TOKENLOCK_COUNTER_LOCK takes any backend's"), std::string::npos) << error;
    EXPECT_EQ(error.find("secret"), std::string::npos) << error;
  }
}

TEST(CounterLockConfig, ABadSpecIsRefusedWithTheReasonAndWithoutItsPassword) {
  std::vector<std::pair<std::string, std::string>> bad = {
      {"ftp://user:secret@host/locks", "no lock backend is called ftp://"},
      {"etcd+x://user:secret@host", "no lock backend is called etcd+x://"}};
#if COUNTER_HAVE_REDIS
  bad.push_back({"redis://:secret@127.0.0.1:6379#mine", "the counter names each counter's lock"});
  bad.push_back({"redis://:sec#ret@127.0.0.1:6379", "write a '#' in a password as %23"});
#endif
#if COUNTER_HAVE_ETCD
  bad.push_back({"etcd://u:secret@127.0.0.1:2379#mine", "the counter names each counter's lock"});
#endif
  for (const auto& [spec, reason] : bad) {
    counter::config c;
    std::string error;
    EXPECT_FALSE(configured({{"TOKENLOCK_COUNTER_LOCK", spec}}, c, error)) << spec;
    EXPECT_EQ(error.rfind("TOKENLOCK_COUNTER_LOCK", 0), 0u) << error;
    EXPECT_NE(error.find(reason), std::string::npos) << spec << ": " << error;
    EXPECT_EQ(error.find("secret"), std::string::npos) << error;
    EXPECT_EQ(error.find("sec#ret"), std::string::npos) << error;
  }
}

TEST_F(CounterAppTest, ADirectorySpecHoldsTheLockDirectoriesAndTheCountersStayInTheDataDirectory) {
  fs::create_directory(tmp / "data");
  fs::create_directory(tmp / "locks");
  std::string error;
  ASSERT_TRUE(configured({{"TOKENLOCK_COUNTER_DIR", (tmp / "data").string()},
                          {"TOKENLOCK_COUNTER_SYNC", "none"},
                          {"TOKENLOCK_COUNTER_LOCK", (tmp / "locks").string()}},
                         cfg, error))
      << error;
  EXPECT_EQ(get("id=x").body, "1\n") << log.str();
  EXPECT_EQ(get("id=x").body, "2\n") << log.str();
  EXPECT_EQ(slurp(tmp / "data" / "x.count"), "2\n");
  EXPECT_FALSE(fs::exists(tmp / "data" / "x.count.lock"));
  std::optional<tokenlock::lock_handle> h =
      tokenlock::rename_lock(tmp / "locks" / "x.count.lock").try_acquire();
  ASSERT_TRUE(h && h->owns()) << "the lock in the spec's directory was left held";
  h->release();
  EXPECT_TRUE(tokenlock::testing::temp_files_below(tmp.path()).empty());
}

// Lock directories that the spec puts on another filesystem than the
// counters could not fence the commit: every hit is refused (500), the
// counter left as it was and its lock free.
TEST_F(CounterAppTest, ADirectorySpecOnAnotherFilesystemIsRefusedRatherThanCommittedUnfenced) {
  const fs::path other = fs::path("/dev/shm") / fs::unique_path("tokenlock-test-%%%%-%%%%");
  struct stat here {}, there {};
  if (::stat("/dev/shm", &there) != 0 || ::stat(tmp.path().c_str(), &here) != 0 ||
      here.st_dev == there.st_dev)
    GTEST_SKIP() << "no /dev/shm on another filesystem than " << tmp.path();
  fs::create_directory(other);
  struct remover {
    fs::path p;
    ~remover() { fs::remove_all(p); }
  } removed{other};
  spit(tmp / "f.count", "7\n");
  std::string error;
  ASSERT_TRUE(configured({{"TOKENLOCK_COUNTER_DIR", tmp.path().string()},
                          {"TOKENLOCK_COUNTER_SYNC", "none"},
                          {"TOKENLOCK_COUNTER_LOCK", other.string()}},
                         cfg, error))
      << error;
  const cgi::response r = get("id=f");
  EXPECT_EQ(r.status, 500) << r.body;
  EXPECT_EQ(r.body.find("/dev/shm"), std::string::npos) << r.body;
  EXPECT_NE(log.str().find((tmp / "f.count").string()), std::string::npos) << log.str();
  EXPECT_EQ(slurp(tmp / "f.count"), "7\n");
  EXPECT_TRUE(tokenlock::testing::temp_files_below(tmp.path()).empty());
  std::optional<tokenlock::lock_handle> h =
      tokenlock::rename_lock(other / "f.count.lock").try_acquire();
  ASSERT_TRUE(h && h->owns()) << "the lock was left held";
  h->release();
}

// A relative data directory whose name looks like a URL is still a
// directory, as it was before the lock had a spec.
TEST_F(CounterAppTest, ARelativeDataDirectoryThatLooksLikeAUrlStillCounts) {
  fs::create_directories(tmp / "data:" / "x");
  const fs::path before = fs::current_path();
  fs::current_path(tmp.path());
  cfg.dir = "data://x";
  const cgi::response r = get("id=u");
  fs::current_path(before);
  EXPECT_EQ(r.body, "1\n") << log.str();
  EXPECT_EQ(slurp(tmp / "data:" / "x" / "u.count"), "1\n");
  EXPECT_TRUE(fs::is_directory(tmp / "data:" / "x" / "u.count.lock"));
}

// The JSON answer is made by a JSON library; an id is letters, digits, '_'
// and '-', so no byte that is not UTF-8 can reach it: such an id is 400.
TEST_F(CounterAppTest, TheJsonAnswerReadsBackAndNoNonUtf8IdReachesIt) {
  get("id=j");
  const cgi::response r = get("id=j&format=json");
  EXPECT_EQ(r.content_type, "application/json");
  const nlohmann::json doc = nlohmann::json::parse(r.body);
  EXPECT_EQ(doc.at("id"), "j");
  EXPECT_EQ(doc.at("count"), 2);
  for (const char* q : {"id=%ff&format=json", "id=%c3%a9&format=json", "format=json&%ff=1"}) {
    const cgi::response refused = get(q);
    EXPECT_EQ(refused.status, 400) << q;
    EXPECT_EQ(refused.content_type, "text/plain; charset=utf-8") << q;
    EXPECT_EQ(refused.body.find('\xff'), std::string::npos) << "escaped: " << refused.body;
  }
  EXPECT_EQ(get("id=j&peek=1").body, "2\n");
}

#if COUNTER_HAVE_REDIS
// Counts under a real Redis server, named by the spec variable and by the
// older one: the same locks ("counter:ID"), fenced commits, no lock
// directory, and no grant left.
TEST_F(CounterAppTest, RedisNamedByTheSpecOrTheOlderVariableKeepsTheCountersLocks) {
  if (const std::string why = tokenlock::testing::redis_server::unavailable(); !why.empty())
    GTEST_SKIP() << why;
  tokenlock::testing::redis_server server({"--requirepass", "secret"});
  int hits = 0;
  for (const char* variable : {"TOKENLOCK_COUNTER_LOCK", "TOKENLOCK_COUNTER_REDIS"}) {
    std::string error;
    ASSERT_TRUE(configured({{"TOKENLOCK_COUNTER_DIR", tmp.path().string()},
                            {"TOKENLOCK_COUNTER_SYNC", "none"},
                            {variable, server.url(":secret")}},
                           cfg, error))
        << error;
    EXPECT_EQ(get("id=r").body, std::to_string(++hits) + "\n") << variable << ": " << log.str();
    EXPECT_EQ(nlohmann::json::parse(get("id=r&format=json").body).at("count"), ++hits) << variable;
  }
  EXPECT_EQ(slurp(tmp / "r.count"), "4\n") << log.str();
  EXPECT_TRUE(fs::is_directory(tmp / "r.count.fence"));
  EXPECT_FALSE(fs::exists(tmp / "r.count.lock"));
  const std::string fence =
      server.cli({"-a", "secret", "--no-auth-warning", "GET", "tokenlock:counter:r:fence"});
  EXPECT_FALSE(fence.empty()) << "the fences were taken in Redis";
  EXPECT_EQ(server.cli({"-a", "secret", "--no-auth-warning", "EXISTS", "tokenlock:counter:r"}), "0");
  EXPECT_EQ(log.str().find("secret"), std::string::npos) << log.str();
}
#endif

#if COUNTER_HAVE_REDIS
// Its lock in a Redis server that is down: 503 with Retry-After, the
// server named in the log only, and the counter untouched.
TEST_F(CounterAppTest, AnUnreachableLockServerIs503AndTouchesNothing) {
  const std::string url = "redis://127.0.0.1:" + std::to_string(tokenlock::testing::free_port());
  std::string error;
  ASSERT_TRUE(configured({{"TOKENLOCK_COUNTER_DIR", tmp.path().string()},
                          {"TOKENLOCK_COUNTER_SYNC", "none"},
                          {"TOKENLOCK_COUNTER_LOCK", url}},
                         cfg, error))
      << error;
  auto r = get("id=r");
  EXPECT_EQ(r.status, 503);
  ASSERT_FALSE(r.headers.empty());
  EXPECT_EQ(r.headers[0].first, "Retry-After");
  EXPECT_EQ(r.body.find("127.0.0.1"), std::string::npos) << r.body;
  EXPECT_NE(log.str().find(url), std::string::npos) << log.str();
  EXPECT_FALSE(fs::exists(tmp / "r.count"));
  EXPECT_FALSE(fs::exists(tmp / "r.count.fence"));
  EXPECT_FALSE(fs::exists(tmp / "r.count.lock"));
}
#endif

#if COUNTER_HAVE_ETCD
// Its lock in an etcd cluster whose members all refuse connections (port 1
// on loopback: nothing listens there): 503 with Retry-After, the members
// named in the log only, and the counter untouched.
TEST_F(CounterAppTest, AnUnreachableEtcdClusterIs503AndTouchesNothing) {
  std::string error;
  ASSERT_TRUE(configured({{"TOKENLOCK_COUNTER_DIR", tmp.path().string()},
                          {"TOKENLOCK_COUNTER_SYNC", "none"},
                          {"TOKENLOCK_COUNTER_LOCK", "etcd://127.0.0.1:1,[::1]:1"}},
                         cfg, error))
      << error;
  auto r = get("id=e");
  EXPECT_EQ(r.status, 503) << r.body << log.str();
  ASSERT_FALSE(r.headers.empty());
  EXPECT_EQ(r.headers[0].first, "Retry-After");
  EXPECT_EQ(r.body.find("127.0.0.1"), std::string::npos) << r.body;
  EXPECT_NE(log.str().find("127.0.0.1:1"), std::string::npos) << log.str();
  EXPECT_FALSE(fs::exists(tmp / "e.count"));
  EXPECT_FALSE(fs::exists(tmp / "e.count.fence"));
  EXPECT_FALSE(fs::exists(tmp / "e.count.lock"));
}
#endif

}  // namespace
