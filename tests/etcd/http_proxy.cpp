#include "http_proxy.hpp"

#include <stdexcept>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

namespace tokenlock::testing {

namespace {

int listen_loopback(int& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 16) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("http_proxy: cannot listen on 127.0.0.1");
  port = ntohs(a.sin_port);
  return fd;
}

int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

bool send_all(int fd, const std::string& s) {
  for (std::size_t done = 0; done < s.size();) {
    const ssize_t n = ::send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// The value of header `name` in `head` (case-insensitive), or empty.
std::string header(const std::string& head, const char* name) {
  const std::string n = std::string("\r\n") + name + ":";
  for (std::size_t at = 0; (at = head.find("\r\n", at)) != std::string::npos; at += 2)
    if (::strncasecmp(head.c_str() + at, n.c_str(), n.size()) == 0) {
      std::size_t v = at + n.size();
      while (v < head.size() && head[v] == ' ') ++v;
      return head.substr(v, head.find("\r\n", v) - v);
    }
  return {};
}

// `head` without the headers the proxy sets itself.
std::string without(const std::string& head, const std::vector<const char*>& names) {
  std::string out = head.substr(0, head.find("\r\n"));
  for (std::size_t at = out.size(); at < head.size();) {
    const std::size_t end = head.find("\r\n", at + 2);
    const std::string line = head.substr(at, (end == std::string::npos ? head.size() : end) - at);
    bool drop = false;
    for (const char* n : names)
      drop = drop || ::strncasecmp(line.c_str() + 2, n, std::string(n).size()) == 0;
    if (!drop) out += line;
    if (end == std::string::npos) break;
    at = end;
  }
  return out;
}

}  // namespace

http_proxy::http_proxy(int member_port, rule r) : member_port_(member_port), rule_(std::move(r)) {
  listen_fd_ = listen_loopback(port_);
  if (::pipe2(stop_pipe_, O_CLOEXEC) != 0) throw std::runtime_error("http_proxy: pipe failed");
  acceptor_ = std::thread([this] { accept_loop(); });
}

http_proxy::~http_proxy() {
  ::close(stop_pipe_[1]);  // every wait_readable returns false from now on
  acceptor_.join();
  for (auto& t : threads_) t.join();
  ::close(listen_fd_);
  ::close(stop_pipe_[0]);
}

bool http_proxy::wait_readable(int fd) const {
  pollfd p[2] = {{fd, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
  return ::poll(p, 2, -1) > 0 && !(p[1].revents & (POLLIN | POLLHUP)) && p[0].revents != 0;
}

void http_proxy::accept_loop() {
  while (wait_readable(listen_fd_)) {
    const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    std::lock_guard<std::mutex> g(mutex_);
    threads_.emplace_back([this, client] {
      serve(client);
      ::close(client);  // the end of the answer, for a client that reads to the end
    });
  }
}

void http_proxy::serve(int client) {
  std::string in;
  char buf[65536];
  auto read_more = [&](int fd, std::string& into) {
    if (!wait_readable(fd)) return false;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    into.append(buf, static_cast<std::size_t>(n));
    return true;
  };
  std::size_t head_end;
  while ((head_end = in.find("\r\n\r\n")) == std::string::npos)
    if (!read_more(client, in)) return;
  std::string head = in.substr(0, head_end);
  if (!header(head, "Expect").empty() && !send_all(client, "HTTP/1.1 100 Continue\r\n\r\n")) return;
  const std::size_t length = std::stoul("0" + header(head, "Content-Length"));
  std::string body = in.substr(head_end + 4);
  while (body.size() < length)
    if (!read_more(client, body)) return;
  const std::size_t sp = head.find(' ');
  const request req{head.substr(sp + 1, head.find(' ', sp + 1) - sp - 1), body};
  const action act = rule_(req);
  if (act.what == action::answer) {
    ++answered_;
    send_all(client, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                         std::to_string(act.body.size()) + "\r\nConnection: close\r\n\r\n" + act.body);
    return;
  }
  if (!act.body.empty()) body = act.body;
  const int member = connect_loopback(member_port_);
  if (member < 0) return;
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } member_closer{member};
  head = without(head, {"Content-Length:", "Connection:", "Expect:"});
  if (!send_all(member, head + "\r\nContent-Length: " + std::to_string(body.size()) +
                            "\r\nConnection: close\r\n\r\n" + body))
    return;
  std::string answer;
  while (read_more(member, answer)) {
    if (act.what == action::hold) continue;
    const std::size_t end = answer.find("\r\n\r\n");
    if (end == std::string::npos) continue;
    // Headers complete: pass them on with Connection: close, then relay.
    if (!send_all(client, without(answer.substr(0, end), {"Connection:"}) +
                              "\r\nConnection: close\r\n\r\n" + answer.substr(end + 4)))
      return;
    for (std::string more; read_more(member, more); more.clear())
      if (!send_all(client, more)) return;
    return;
  }
  if (act.what != action::hold) return;
  ++held_;
  // The member applied it; the client never hears: it gives up on its own.
  for (std::string ignored; read_more(client, ignored);) {
  }
}

}  // namespace tokenlock::testing
