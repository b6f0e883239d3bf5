// The worker's visit mode: holding in turn with writers, readers or slot
// holders, with every entry and exit logged in one order (its manual is at
// the top of lock_worker.cpp; visit_log.hpp checks the log).
#include <unistd.h>

#include <csignal>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

#include "lock_worker.hpp"
#include "tokenlock/tokenlock.hpp"

using namespace std::chrono_literals;

namespace tokenlock::testing::worker {
namespace {

struct visit_plan {
  unsigned stop_every = 0;  // LOCK_WORKER_STOP_EVERY: 0, never
  std::string log;
  std::string counter;  // empty: none
  std::chrono::microseconds hold{0};
  std::string kind;  // W, R or S
  std::string who;   // our pid
};

std::string event(const visit_plan& p, const char* what, int i) {
  return std::string(what) + " " + p.kind + " " + p.who + " " + std::to_string(i);
}

// Turn 50 and every stop_every-th after it stop this process where it
// hurts: holding, before its commit or its release (a fixed turn, so that
// even a short, slow run has stops). "S PID" goes to the log first, so
// that the stay is judged until there only (its lease may end while it is
// stopped); whoever runs it continues it.
void maybe_stop(const visit_plan& p, int i) {
  if (p.stop_every == 0 || i < 50 || (i - 50) % static_cast<int>(p.stop_every) != 0) return;
  append_line(p.log, "S " + p.who);
  std::raise(SIGSTOP);
}

std::uint64_t counter_now(const visit_plan& p) {
  return tokenlock::read_counter(p.counter).value_or(0);
}

// One writer's turn: the counter's update, with the hold inside it. False
// when the lock was lost (nothing was committed: the commit is fenced).
bool write_turn(tokenlock::lock& lock, const visit_plan& p, int i) {
  std::uint64_t next = 0;
  const auto add = [&](const std::optional<std::string>& cur) {
    append_line(p.log, event(p, "E", i));
    next = (cur ? std::strtoull(cur->c_str(), nullptr, 10) : 0) + 1;
    std::this_thread::sleep_for(p.hold);
    maybe_stop(p, i);
    append_line(p.log, event(p, "L", i));
    return std::to_string(next) + "\n";
  };
  tokenlock::update_options uo;
  uo.write.sync = tokenlock::durability::none;
  std::error_code ec;
  tokenlock::update_file(p.counter, lock, add, uo, ec);
  if (ec == tokenlock::errc::lock_lost) return false;
  if (ec) die("update_file: " + tokenlock::last_error_message());
  append_line(p.log, "C " + std::to_string(next));
  return true;
}

// One turn of a reader, a slot holder, or a writer without a counter.
// False when the lock was lost.
bool hold_turn(tokenlock::lock& lock, const visit_plan& p, int i, std::uint64_t& last) {
  tokenlock::handle h = lock.acquire();
  append_line(p.log, event(p, "E", i));
  const std::uint64_t in = p.counter.empty() ? 0 : counter_now(p);
  std::this_thread::sleep_for(p.hold);
  maybe_stop(p, i);
  const std::uint64_t out = p.counter.empty() ? 0 : counter_now(p);
  append_line(p.log, event(p, "L", i));
  std::error_code ec;
  h.release(ec);
  if (ec && ec != tokenlock::errc::lock_lost) die("release: " + tokenlock::last_error_message());
  if (in < last || out < in || (!ec && out != in)) {
    std::cerr << "lock_worker[" << p.who << "]: the counter went " << last << ", " << in
              << ", " << out << " in turn " << i << std::endl;
    std::exit(3);
  }
  last = out;
  return !ec;
}

}  // namespace

int visit(const mode_args& m) {
  visit_plan p;
  p.log = m.a[0];
  const int cycles = std::atoi(m.a[1].c_str());
  p.hold = std::chrono::microseconds(std::strtoll(m.a[2].c_str(), nullptr, 10));
  if (m.a.size() > 4) p.counter = m.a[4];
  const held_as how = chosen_mode();
  p.kind = how.mode == tokenlock::lock_mode::exclusive ? "W" : how.slots ? "S" : "R";
  p.who = std::to_string(::getpid());
  if (const char* every = std::getenv("LOCK_WORKER_STOP_EVERY"))
    p.stop_every = static_cast<unsigned>(std::strtoul(every, nullptr, 10));
  std::unique_ptr<tokenlock::lock> lock =
      tokenlock::open_lock(m.spec, lock_settings(120s, millis(m.a[3]), 0ms));
  const std::string stop = p.log + ".stop";
  wait_for_start();
  int visited = 0, lost = 0;
  std::uint64_t last = 0;
  for (; visited < cycles && ::access(stop.c_str(), F_OK) != 0; ++visited) {
    const bool kept = p.kind == "W" && !p.counter.empty() ? write_turn(*lock, p, visited)
                                                          : hold_turn(*lock, p, visited, last);
    if (!kept) {
      append_line(p.log, "X " + p.who + " " + std::to_string(visited));
      ++lost;
    }
  }
  std::cout << "visited " << visited << " lost " << lost << std::endl;
  return 0;
}

}  // namespace tokenlock::testing::worker
