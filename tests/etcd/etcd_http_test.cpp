// The etcd lock's HTTP/1.1 client (lib/src/etcd/http_client.*, on
// Boost.Beast) and
// the client's handling of what it returns (etcd_client), against a fake
// server on 127.0.0.1: a thread with a listening socket that answers as
// each test scripts it. The thread and the test synchronise through the
// sockets themselves (and a promise where the test must wait for the
// server's close), never through sleeps.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "etcd/etcd_client.hpp"
#include "fake_server.hpp"
#include "etcd/etcd_url.hpp"
#include "etcd/http_client.hpp"
#include "tokenlock/etcd_lock.hpp"

namespace {

using tokenlock::detail::etcd_client;
using tokenlock::detail::failure;
using tokenlock::detail::http_connection;
using tokenlock::detail::http_outcome;
using tokenlock::detail::io_status;
using tokenlock::detail::json;
using fake::fake_server;
using fake::read_request;
using fake::send_bytewise;
using fake::send_text;

std::string with_length(const std::string& body) {
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

const std::string answer_json = R"({"header":{"revision":"7"},"note":"a } and a \" in a string"})";
const std::string chunked_answer =
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Extra:  spaced \r\n\r\n"
    "5;ext=1\r\n{\"hea\r\n"
    "1\r\nd\r\n" +
    [] {
      const std::string rest = answer_json.substr(6);
      char size[16];
      std::snprintf(size, sizeof size, "%zX", rest.size());
      return std::string(size) + "\r\n" + rest + "\r\n";
    }() +
    "0\r\nTrailer: yes\r\n\r\n";

std::unique_ptr<etcd_client> client_for(const std::string& url, std::chrono::milliseconds timeout) {
  tokenlock::detail::etcd_url u;
  EXPECT_FALSE(tokenlock::detail::parse_etcd_url(url, u));
  return std::make_unique<etcd_client>(u, timeout, timeout);
}

// One POST on `c` with a 5 s deadline.
http_outcome post_once(http_connection& c) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  return c.post("/v3/kv/range", "{}", "", deadline, deadline);
}

// The answers sent in three pieces cut at every place (the second cut
// close to the first: inside a CRLF, a chunk-size line, a header), each
// piece its own segment (Nagle off), on one kept connection: the client
// reads each piece as it arrives and parses the answer whole.
TEST(EtcdHttp, ChunkedAndLengthAnswersParseWhereverTheyAreSplit) {
  const std::string length_answer = with_length(answer_json);
  std::vector<std::pair<const std::string*, std::pair<std::size_t, std::size_t>>> plan;
  for (const std::string* answer : {&chunked_answer, &length_answer})
    for (std::size_t i = 0; i <= answer->size(); ++i)
      for (std::size_t j = i; j <= std::min(answer->size(), i + 4); ++j) plan.push_back({answer, {i, j}});
  fake_server s([&](int fd, int) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    for (const auto& [answer, cut] : plan) {
      if (read_request(fd).empty()) return;
      send_text(fd, answer->substr(0, cut.first));
      send_text(fd, answer->substr(cut.first, cut.second - cut.first));
      send_text(fd, answer->substr(cut.second));
    }
  });
  http_connection c(s.url().replace(0, 4, "http"), "");
  for (const auto& [answer, cut] : plan) {
    const http_outcome out = post_once(c);
    ASSERT_TRUE(out.ok()) << "cut at " << cut.first << " and " << cut.second << ": " << out.detail;
    ASSERT_EQ(out.http_status, 200);
    ASSERT_EQ(out.body, answer_json) << "cut at " << cut.first << " and " << cut.second;
  }
  c.close();
  s.stop();
  EXPECT_EQ(s.connections(), 1);  // every answer ended where its framing said
}

// Each answer breaks HTTP's framing or a limit: the client reports it
// (bad_answer, with words), drops the connection, and the next request
// goes on a new one. An answer cut off is a closed connection with
// answer_started set: the request may have been applied.
TEST(EtcdHttp, ABrokenOrOversizedAnswerIsRefusedAndItsConnectionDropped) {
  const std::vector<std::string> bad = {
      "SSH-2.0-OpenSSH_9.2\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFF\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\n" + std::string(70000, 'x'),
      "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string((16 << 20) + 1) + "\r\n\r\n",
  };
  const std::string half = with_length(answer_json).substr(0, 70);
  fake_server s([&](int fd, int n) {
    if (read_request(fd).empty()) return;
    if (static_cast<std::size_t>(n) == bad.size()) return send_text(fd, half);  // and close
    send_text(fd, bad[static_cast<std::size_t>(n)]);
    read_request(fd);  // until the client closes
  });
  http_connection c(s.url().replace(0, 4, "http"), "");
  for (const auto& a : bad) {
    const http_outcome out = post_once(c);
    EXPECT_TRUE(out.bad_answer) << a.substr(0, 60);
    EXPECT_TRUE(out.answer_started) << a.substr(0, 60);
    EXPECT_FALSE(out.detail.empty()) << a.substr(0, 60);
  }
  const http_outcome cut = post_once(c);
  EXPECT_EQ(cut.status, io_status::closed);
  EXPECT_TRUE(cut.answer_started);
  EXPECT_NE(cut.detail.find("middle of the answer"), std::string::npos) << cut.detail;
  c.close();
  s.stop();
  EXPECT_EQ(s.connections(), static_cast<int>(bad.size()) + 1);  // one each: none reused
}

// An answer without Content-Length or chunks ends with the connection; an
// HTTP/1.0 answer, or one followed by bytes nobody asked for, ends its
// connection too: the next request goes on a new one.
TEST(EtcdHttp, AnswersThatEndTheirConnectionAreReadWholeAndTheConnectionNotReused) {
  const std::vector<std::string> answers = {
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + answer_json,
      "HTTP/1.0 200 OK\r\nContent-Length: " + std::to_string(answer_json.size()) + "\r\n\r\n" + answer_json,
      with_length(answer_json) + "HTTP/1.1 200 OK\r\n",
      "HTTP/1.1 100 Continue\r\n\r\n" + with_length(answer_json),
  };
  fake_server s([&](int fd, int n) {
    if (read_request(fd).empty()) return;
    send_text(fd, answers[static_cast<std::size_t>(n)]);
    if (n == 0) ::shutdown(fd, SHUT_WR);  // the end of the first answer's body
    if (n < 3) read_request(fd);          // until the client closes
  });
  http_connection c(s.url().replace(0, 4, "http"), "");
  for (const auto& a : answers) {
    const http_outcome out = post_once(c);
    ASSERT_TRUE(out.ok()) << a.substr(0, 40) << ": " << out.detail;
    EXPECT_EQ(out.http_status, 200) << a.substr(0, 40);
    EXPECT_EQ(out.body, answer_json) << a.substr(0, 40);
  }
  c.close();
  s.stop();
  EXPECT_EQ(s.connections(), static_cast<int>(answers.size()));
}

TEST(EtcdHttp, AChunkedAnswerSentByteByByteAndALengthAnswerBothArrive) {
  fake_server s([](int fd, int) {
    if (read_request(fd).empty()) return;
    send_bytewise(fd, chunked_answer);
    if (read_request(fd).empty()) return;
    send_text(fd, with_length(answer_json));
  });
  auto c = client_for(s.url(), std::chrono::seconds(5));
  for (int i = 0; i < 2; ++i) {
    json out;
    const failure f = c->call("acquire", "/v3/kv/range", json{{"key", "a"}}, out);
    ASSERT_FALSE(f) << f.message;
    EXPECT_EQ(out["note"], "a } and a \" in a string");
  }
  EXPECT_EQ(s.connections(), 1);  // kept alive between the two
}

// An IPv6 literal in brackets, and a name (localhost, which may resolve
// to ::1 before 127.0.0.1: each address is tried in turn).
TEST(EtcdHttp, IpV6LiteralsAndNamesConnect) {
  const auto serve = [](int fd, int) {
    while (!read_request(fd).empty()) send_text(fd, with_length(answer_json));
  };
  fake_server v6(serve, true);
  fake_server v4(serve);
  for (const std::string& url : {v6.url(), "etcd://localhost:" + std::to_string(v4.port())}) {
    auto c = client_for(url, std::chrono::seconds(5));
    json out;
    const failure f = c->call("acquire", "/v3/kv/range", json{{"key", "a"}}, out);
    EXPECT_FALSE(f) << url << ": " << f.message;
    EXPECT_EQ(out.value("note", ""), "a } and a \" in a string") << url;
  }
}

TEST(EtcdHttp, AKeptConnectionClosedByTheServerIsReplacedAndTheRequestAnsweredOnce) {
  std::atomic<int> requests{0};
  std::promise<void> closed;
  fake_server s([&](int fd, int n) {
    if (read_request(fd).empty()) return;
    ++requests;
    send_text(fd, with_length(answer_json));
    if (n == 0) {
      ::shutdown(fd, SHUT_RDWR);  // idle, then closed by the server
      closed.set_value();
      return;
    }
  });
  auto c = client_for(s.url(), std::chrono::seconds(5));
  json out;
  ASSERT_FALSE(c->call("acquire", "/v3/kv/txn", json{{"n", 1}}, out));
  closed.get_future().wait();
  const failure f = c->call("acquire", "/v3/kv/txn", json{{"n", 2}}, out);
  ASSERT_FALSE(f) << f.message;
  EXPECT_EQ(requests, 2);
  EXPECT_EQ(s.connections(), 2);
}

// The server closes the kept connection with most of the next request
// unread (a reset): the write fails with EPIPE or ECONNRESET, not SIGPIPE
// (which would end this test program), and the request, which the
// server cannot have acted on, goes again on a new connection.
TEST(EtcdHttp, ARequestCutOffWhileBeingWrittenGoesAgainWithoutSigpipe) {
  std::atomic<int> whole_requests{0};
  fake_server s([&](int fd, int n) {
    if (read_request(fd).empty()) return;
    ++whole_requests;
    send_text(fd, with_length(answer_json));
    if (n == 0) {
      char c;
      ::recv(fd, &c, 1, 0);  // the next request has begun: close on it
      return;
    }
  });
  auto c = client_for(s.url(), std::chrono::seconds(5));
  json out;
  ASSERT_FALSE(c->call("acquire", "/v3/kv/txn", json{{"n", 1}}, out));
  const failure f = c->call("acquire", "/v3/kv/txn", json{{"big", std::string(4 << 20, 'a')}}, out);
  EXPECT_FALSE(f) << f.message;
  EXPECT_EQ(whole_requests, 2);
  EXPECT_EQ(s.connections(), 2);
}

TEST(EtcdHttp, AConnectionClosedMidAnswerIsAProtocolErrorAndTheTxnIsNotSentAgain) {
  std::atomic<int> requests{0};
  fake_server s([&](int fd, int) {
    if (read_request(fd).empty()) return;
    ++requests;
    send_text(fd, with_length(answer_json).substr(0, 80));
  });
  auto c = client_for(s.url(), std::chrono::seconds(2));
  json out;
  const failure f = c->call("release", "/v3/kv/txn", json{{"n", 1}}, out);
  s.stop();
  EXPECT_EQ(f.code, std::make_error_code(std::errc::protocol_error));
  EXPECT_NE(f.message.find(s.member()), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("middle of the answer"), std::string::npos) << f.message;
  EXPECT_EQ(requests, 1);
}

TEST(EtcdHttp, GarbageOrOversizedAnswersAreProtocolErrorsNamingTheMember) {
  // Each answer, and what the message must say about it.
  const std::vector<std::pair<std::string, std::string>> answers = {
      {"SSH-2.0-OpenSSH_9.2\r\n\r\n", "status line"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999\r\n\r\n", "Content-Length"},
      {"HTTP/1.1 200 OK\r\n" + std::string(100000, 'x') + "\r\n\r\n", "longer than"},
      {with_length("not json at all"), "not etcd's JSON"},
  };
  for (const auto& [a, says] : answers) {
    std::atomic<int> requests{0};
    fake_server s([&](int fd, int) {
      while (!read_request(fd).empty()) {
        ++requests;
        send_text(fd, a);
      }
    });
    auto c = client_for(s.url(), std::chrono::milliseconds(300));
    json out;
    const failure f = c->call("acquire", "/v3/kv/range", json{{"key", "a"}}, out);
    c.reset();  // closes a kept connection the server still reads from
    s.stop();
    EXPECT_EQ(f.code, std::make_error_code(std::errc::protocol_error)) << f.message;
    EXPECT_NE(f.message.find(s.member()), std::string::npos) << f.message;
    EXPECT_NE(f.message.find(says), std::string::npos) << f.message;
    EXPECT_GE(requests, 1);
  }
}

TEST(EtcdHttp, AServerThatNeverAnswersTimesOutWithinTheCommandTimeout) {
  fake_server* self = nullptr;
  fake_server s([&](int fd, int) {
    if (!read_request(fd).empty()) self->wait_for_stop();
  });
  self = &s;
  const auto timeout = std::chrono::milliseconds(300);
  auto c = client_for(s.url(), timeout);
  json out;
  const auto t0 = std::chrono::steady_clock::now();
  const failure f = c->call("acquire", "/v3/kv/range", json{{"key", "a"}}, out);
  const auto took = std::chrono::steady_clock::now() - t0;
  s.stop();
  EXPECT_EQ(f.code, std::make_error_code(std::errc::timed_out)) << f.message;
  EXPECT_NE(f.message.find("no answer in time"), std::string::npos) << f.message;
  // One member: one command_timeout, with room for a loaded machine.
  EXPECT_LT(took, timeout * 4);
}

// The deadlines hold where a synchronous client would wait forever: a
// member that accepts TLS connections and never says a word (the
// handshake), and one that answers one header byte at a time, forever.
TEST(EtcdHttp, ASilentTlsMemberAndATricklingAnswerTimeOutWithinTheirTimeouts) {
  fake_server* self = nullptr;
  fake_server silent([&](int, int) { self->wait_for_stop(); });
  self = &silent;
  fake_server* other = nullptr;
  fake_server trickling([&](int fd, int) {
    if (read_request(fd).empty()) return;
    send_text(fd, "HTTP/1.1 200 OK\r\n");
    pollfd stop{other->stop_fd(), POLLIN, 0};
    while (::poll(&stop, 1, 20) == 0) send_text(fd, "X");  // a header that never ends
  });
  other = &trickling;
  const auto timeout = std::chrono::milliseconds(300);
  for (const std::string& url : {"etcds://" + silent.member(), trickling.url()}) {
    auto c = client_for(url, timeout);
    json out;
    const auto t0 = std::chrono::steady_clock::now();
    const failure f = c->call("acquire", "/v3/kv/range", json{{"key", "a"}}, out);
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(f.code, std::make_error_code(std::errc::timed_out)) << url << ": " << f.message;
    EXPECT_NE(f.message.find("no answer in time"), std::string::npos) << f.message;
    // One member: one timeout and the retry pause, with room for a loaded machine.
    EXPECT_LT(took, timeout * 4) << url;
  }
  silent.stop();
  trickling.stop();
}

// The wake descriptor (a stop signal's pipe) becoming readable while the
// request waits for its answer ends it at once, interrupted; while it
// stays readable, the next request ends at once too.
TEST(EtcdHttp, AReadableWakeDescriptorEndsTheRequestAtOnce) {
  int wake[2];
  ASSERT_EQ(::pipe(wake), 0);
  fake_server* self = nullptr;
  fake_server s([&](int fd, int) {
    if (read_request(fd).empty()) return;
    ASSERT_EQ(::write(wake[1], "x", 1), 1);  // a stop signal, with the request in flight
    self->wait_for_stop();
  });
  self = &s;
  http_connection c(s.url().replace(0, 4, "http"), "");
  c.set_wake_fd(wake[0]);
  for (int i = 0; i < 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto deadline = t0 + std::chrono::seconds(30);
    const http_outcome out = c.post("/v3/watch", "{}", "", deadline, deadline);
    EXPECT_EQ(out.status, io_status::interrupted) << out.detail;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  }
  c.close();
  s.stop();
  ::close(wake[0]);
  ::close(wake[1]);
}

// A wake descriptor that nobody writes never ends a request, however many
// connections come and go: Asio may give its duplicate the reactor state
// (and a stale readiness) of a socket closed before under the same number.
TEST(EtcdHttp, AnUnwrittenWakeDescriptorNeverEndsARequestWhileConnectionsComeAndGo) {
  int wake[2];
  ASSERT_EQ(::pipe(wake), 0);
  fake_server s([](int fd, int) {
    if (read_request(fd).empty()) return;
    send_text(fd, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: " +
                      std::to_string(answer_json.size()) + "\r\n\r\n" + answer_json);
    ::shutdown(fd, SHUT_WR);
  });
  http_connection a(s.url().replace(0, 4, "http"), ""), b(s.url().replace(0, 4, "http"), "");
  a.set_wake_fd(wake[0]);
  b.set_wake_fd(wake[0]);
  int interrupted = 0, failed = 0;
  for (int i = 0; i < 2000; ++i) {
    if (i % 7 == 0) (i % 2 ? b : a).close();  // the client's own closes too
    const http_outcome out = post_once(i % 2 ? a : b);
    if (out.status == io_status::interrupted) ++interrupted;
    else if (!out.ok() || out.body != answer_json) ++failed;
  }
  EXPECT_EQ(interrupted, 0) << "requests ended by a stop signal that never came";
  EXPECT_EQ(failed, 0);
  a.close();
  b.close();
  s.stop();
  ::close(wake[0]);
  ::close(wake[1]);
}

TEST(EtcdHttp, AMalformedWatchAnswerIsAProtocolErrorNotAnException) {
  const std::vector<std::string> streams = {R"({"result":7})", R"({"result":{"events":[}})",
                                            R"({"error":{"grpc_code":"x"}})" };
  for (const auto& body : streams) {
    fake_server s([&](int fd, int) {
      if (read_request(fd).empty()) return;
      send_text(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
      char size[16];
      std::snprintf(size, sizeof size, "%zx\r\n", body.size());
      send_bytewise(fd, size + body + "\r\n");
      read_request(fd);  // until the client closes
    });
    auto c = client_for(s.url(), std::chrono::seconds(5));
    bool deleted = true;
    const failure f = c->wait_delete("k", 1, std::chrono::seconds(5), deleted);
    s.stop();
    EXPECT_FALSE(deleted);
    EXPECT_TRUE(f) << body;
    EXPECT_NE(f.message.find(s.member()), std::string::npos) << f.message;
  }
}

// HTTPS to a server that speaks plain HTTP, and a CA file that cannot be
// read: protocol_error naming the member, with the fix.
TEST(EtcdHttp, HttpsFailuresSayWhatToFix) {
  fake_server s([](int fd, int) {
    char buf[512];
    if (::recv(fd, buf, sizeof buf, 0) > 0) send_text(fd, "HTTP/1.1 400 Bad Request\r\n\r\n");
  });
  const std::string tls_url = "etcds://" + s.member();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {tls_url, "is the member serving HTTPS (etcds://)"},
      {tls_url + "?cacert=/nonexistent/ca.pem", "cannot read the CA file"},
  };
  for (const auto& [url, says] : cases) {
    auto c = client_for(url, std::chrono::milliseconds(300));
    json out;
    const failure f = c->call("acquire", "/v3/kv/range", json{{"key", "a"}}, out);
    EXPECT_EQ(f.code, std::make_error_code(std::errc::protocol_error)) << f.message;
    EXPECT_NE(f.message.find(s.member()), std::string::npos) << f.message;
    EXPECT_NE(f.message.find(says), std::string::npos) << f.message;
  }
}

TEST(EtcdHttp, CredentialsThatAreNotUtf8AreABadArgument) {
  for (const char* url : {"etcd://%ff:pw@127.0.0.1:1", "etcd://user:%c3%28@127.0.0.1:1",
                          "etcd://user:%ed%a0%80@127.0.0.1:1", "etcd://%c0%80:pw@127.0.0.1:1"}) {
    tokenlock::detail::etcd_url u;
    const failure f = tokenlock::detail::parse_etcd_url(url, u);
    EXPECT_EQ(f.code, tokenlock::make_error_code(tokenlock::errc::bad_argument)) << url;
    EXPECT_NE(f.message.find("UTF-8"), std::string::npos) << f.message;
    tokenlock::etcd_lock lock(url, "name");
    std::error_code ec;
    lock.acquire(ec);
    EXPECT_EQ(ec, tokenlock::make_error_code(tokenlock::errc::bad_argument)) << url;
  }
  tokenlock::detail::etcd_url u;
  EXPECT_FALSE(tokenlock::detail::parse_etcd_url("etcd://j%c3%bcrgen:p%e2%82%acss@127.0.0.1:1", u));
  EXPECT_EQ(u.user, "j\xc3\xbcrgen");
}

}  // namespace
