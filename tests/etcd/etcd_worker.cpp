// A worker process for the etcd lock's process tests.
//
//   etcd_worker count URL NAME COUNTER CANARY CYCLES
//     Waits for its start barrier (fd 3 reaching EOF) when fd 3 is open,
//     then CYCLES times: acquire (waiting up to 120 s); create CANARY with
//     O_EXCL (finding it present with a live creator means two holders at
//     once: exit 3); increment the counter in COUNTER; remove CANARY;
//     release. Prints "fences ascending" when every fence it got was larger
//     than the one before.
//   etcd_worker incr URL NAME FILE COUNT
//     Waits for its start barrier like count, then COUNT times
//     increment_counter(FILE) under the etcd lock, printing each new value,
//     then "done".
//   etcd_worker hold URL NAME LEASE_MS
//     Acquires (waiting up to 60 s), prints "H <fence> <watches> <wakes>"
//     (how many watches its wait opened, and how many ended with its
//     predecessor's key deleted), waits for a line on stdin, releases, and
//     prints "released", or "lock_lost <message>", or "error <message>".
//
// Exit status: 0 success, 2 usage or unexpected error, 3 canary violation.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include <fcntl.h>
#include <unistd.h>

#include "canary.hpp"
#include "etcd/etcd_wait_stats.hpp"
#include "tokenlock/etcd_lock.hpp"

using namespace std::chrono_literals;
using tokenlock::testing::enter_canary;
using tokenlock::testing::read_counter;
using tokenlock::testing::wait_for_barrier;
using tokenlock::testing::write_counter;

namespace {

constexpr const char* who = "etcd_worker";

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "%s[%d]: %s\n", who, static_cast<int>(::getpid()), what.c_str());
  std::exit(2);
}

int count(int argc, char** argv) {
  if (argc != 7) die("usage: count URL NAME COUNTER CANARY CYCLES");
  tokenlock::etcd_lock_options o;
  o.wait = 120s;
  tokenlock::etcd_lock lock(argv[2], argv[3], o);
  const std::string canary = argv[5];
  const int cycles = std::atoi(argv[6]);
  const int counter = ::open(argv[4], O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (counter < 0) die("cannot open the counter");
  if (::fcntl(3, F_GETFD) != -1) wait_for_barrier();
  std::uint64_t last = 0;
  bool ascending = true;
  for (int i = 0; i < cycles; ++i) {
    tokenlock::etcd_handle h = lock.acquire();
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
  tokenlock::etcd_lock_options o;
  o.wait = 120s;
  tokenlock::etcd_lock lock(argv[2], argv[3], o);
  const int count = std::atoi(argv[5]);
  if (::fcntl(3, F_GETFD) != -1) wait_for_barrier();
  std::string out;
  for (int i = 0; i < count; ++i) out += std::to_string(tokenlock::increment_counter(argv[4], lock)) + "\n";
  std::cout << out << "done" << std::endl;
  return 0;
}

int hold(int argc, char** argv) {
  if (argc != 5) die("usage: hold URL NAME LEASE_MS");
  tokenlock::etcd_lock_options o;
  o.lease = std::chrono::milliseconds(std::atoi(argv[4]));
  o.wait = 60s;
  tokenlock::etcd_lock lock(argv[2], argv[3], o);
  const auto before = tokenlock::detail::this_thread_etcd_wait_stats();
  tokenlock::etcd_handle h = lock.acquire();
  const auto after = tokenlock::detail::this_thread_etcd_wait_stats();
  std::cout << "H " << h.fence() << " " << after.watches - before.watches << " "
            << after.wakes - before.wakes << std::endl;
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
  die("usage: etcd_worker count|incr|hold ...");
}
