// A worker process for the Redis lock's process tests.
//
//   redis_worker count URL NAME COUNTER CANARY CYCLES
//     Waits for its start barrier (fd 3 reaching EOF) when fd 3 is open,
//     then CYCLES times: acquire (waiting up to 60 s); create CANARY with
//     O_EXCL (finding it present with a live creator means two holders at
//     once: exit 3); increment the counter in COUNTER; remove CANARY;
//     release. Prints "fences ascending" when every fence it got was larger
//     than the one before.
//   redis_worker incr URL NAME FILE COUNT
//     Waits for its start barrier like count, then COUNT times
//     increment_counter(FILE) under the Redis lock, printing each new value.
//   redis_worker hold URL NAME LEASE_MS
//     Acquires, prints "H <fence> <owner>", waits for a line on stdin,
//     releases, and prints "released", or "lock_lost <message>", or
//     "error <message>".
//
// Exit status: 0 success, 2 usage or unexpected error, 3 canary violation.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include <fcntl.h>
#include <unistd.h>

#include "canary.hpp"
#include "tokenlock/redis_lock.hpp"

using namespace std::chrono_literals;
using tokenlock::testing::enter_canary;
using tokenlock::testing::read_counter;
using tokenlock::testing::wait_for_barrier;
using tokenlock::testing::write_counter;

namespace {

constexpr const char* who = "redis_worker";

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "%s[%d]: %s\n", who, static_cast<int>(::getpid()), what.c_str());
  std::exit(2);
}

int count(int argc, char** argv) {
  if (argc != 7) die("usage: count URL NAME COUNTER CANARY CYCLES");
  tokenlock::redis_lock_options o;
  o.wait = 60s;
  tokenlock::redis_lock lock(argv[2], argv[3], o);
  const std::string canary = argv[5];
  const int cycles = std::atoi(argv[6]);
  int counter = ::open(argv[4], O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (counter < 0) die("cannot open the counter");
  if (::fcntl(3, F_GETFD) != -1) wait_for_barrier();
  std::uint64_t last = 0;
  bool ascending = true;
  for (int i = 0; i < cycles; ++i) {
    tokenlock::redis_handle h = lock.acquire();
    if (h.fence() <= last) ascending = false;
    last = h.fence();
    if (!enter_canary(canary, who)) return 3;
    write_counter(counter, read_counter(counter, who) + 1, who);
    ::unlink(canary.c_str());
    h.release();
  }
  if (ascending) std::cout << "fences ascending" << std::endl;
  return 0;
}

int incr(int argc, char** argv) {
  if (argc != 6) die("usage: incr URL NAME FILE COUNT");
  tokenlock::redis_lock_options o;
  o.wait = 60s;
  tokenlock::redis_lock lock(argv[2], argv[3], o);
  const int count = std::atoi(argv[5]);
  if (::fcntl(3, F_GETFD) != -1) wait_for_barrier();
  std::string out;
  for (int i = 0; i < count; ++i) out += std::to_string(tokenlock::increment_counter(argv[4], lock)) + "\n";
  std::cout << out << "done" << std::endl;
  return 0;
}

int hold(int argc, char** argv) {
  if (argc != 5) die("usage: hold URL NAME LEASE_MS");
  tokenlock::redis_lock_options o;
  o.lease = std::chrono::milliseconds(std::atoi(argv[4]));
  o.wait = 30s;
  tokenlock::redis_lock lock(argv[2], argv[3], o);
  tokenlock::redis_handle h = lock.acquire();
  std::cout << "H " << h.fence() << " " << h.owner() << std::endl;
  std::string line;
  std::getline(std::cin, line);
  std::error_code ec;
  h.release(ec);
  if (!ec)
    std::cout << "released" << std::endl;
  else if (ec == tokenlock::errc::lock_lost)
    std::cout << "lock_lost " << tokenlock::last_error_message() << std::endl;
  else
    std::cout << "error " << tokenlock::last_error_message() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 2 && std::string(argv[1]) == "count") return count(argc, argv);
    if (argc >= 2 && std::string(argv[1]) == "hold") return hold(argc, argv);
    if (argc >= 2 && std::string(argv[1]) == "incr") return incr(argc, argv);
  } catch (const std::exception& e) {
    die(e.what());
  }
  die("usage: redis_worker count|incr|hold ...");
}
