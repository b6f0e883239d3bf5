// The conformance driver of the C++ library: the line protocol of
// tests/conformance/README.md on stdin and stdout.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tokenlock/tokenlock.hpp"

namespace {

using std::chrono::milliseconds;
using words = std::vector<std::string>;

std::optional<tokenlock::rename_lock> the_lock;  // keeps the handle's lock alive
tokenlock::lock_handle handle;

std::string failure(std::error_code ec) {
  std::string name = tokenlock::error_name(ec);
  if (name == "system") name += " " + std::to_string(ec.value());
  return "error " + name;
}

std::string answer_of(std::error_code ec, const std::string& value = "") {
  if (ec) return failure(ec);
  return value.empty() ? "ok" : "ok " + value;
}

// TOKENLOCK_DIR_MODE and TOKENLOCK_GROUP, as an application reads its
// configuration (the command reads the same variables).
tokenlock::lock_options configured() {
  tokenlock::lock_options o;
  if (const char* mode = std::getenv("TOKENLOCK_DIR_MODE"); mode && *mode)
    o.dir_mode = static_cast<unsigned>(std::stoul(mode, nullptr, 8));
  if (const char* group = std::getenv("TOKENLOCK_GROUP"); group && *group) o.group = group;
  return o;
}

// The fourth word of acquire: none (exclusive), "shared" or "slots=N".
void apply_mode(const words& w, tokenlock::lock_options& o) {
  if (w.size() < 5) return;
  o.mode = tokenlock::lock_mode::shared;
  if (w[4].compare(0, 6, "slots=") == 0) o.slots = static_cast<std::uint32_t>(std::stoul(w[4].substr(6)));
}

std::string acquire(const words& w) {
  tokenlock::lock_options o = configured();
  o.wait = milliseconds(std::stoll(w.at(2)));
  o.lease = milliseconds(std::stoll(w.at(3)));
  apply_mode(w, o);
  std::error_code ec;
  tokenlock::rename_lock lock(w.at(1), o);
  auto h = lock.acquire(ec);
  if (!ec) {
    the_lock.emplace(lock);
    handle = std::move(h);
  }
  return answer_of(ec);
}

std::string refresh(const words& w) {
  std::error_code ec;
  handle.refresh(milliseconds(std::stoll(w.at(1))), ec);
  return answer_of(ec);
}

std::string commit(const words& w) {
  std::error_code ec;
  tokenlock::commit_file(handle, w.at(1), w.at(2), {}, ec);
  return answer_of(ec);
}

std::string update(const words& w) {
  tokenlock::lock_options o = configured();
  o.wait = milliseconds(0);
  const bool pause = w.size() > 3 && w[3] == "pause";
  auto fn = [&](const std::optional<std::string>&) {
    if (pause) {
      // The conformance runner moves the lock while we hold still.
      std::cout << "paused" << std::endl;
      std::string go;
      std::getline(std::cin, go);
    }
    return w.at(2);
  };
  std::error_code ec;
  tokenlock::rename_lock lock(w.at(1) + ".lock", o);
  tokenlock::update_file(w.at(1), lock, fn, {}, ec);
  return answer_of(ec);
}

std::string increment(const words& w) {
  tokenlock::lock_options o = configured();
  o.wait = milliseconds(std::stoll(w.at(2)));
  std::error_code ec;
  auto n = tokenlock::increment_counter(w.at(1), tokenlock::rename_lock(w.at(1) + ".lock", o), 1, {}, ec);
  return answer_of(ec, std::to_string(n));
}

std::string read(const words& w) {
  std::error_code ec;
  auto n = tokenlock::read_counter(w.at(1), ec);
  return answer_of(ec, n ? std::to_string(*n) : "none");
}

std::string write(const words& w) {
  std::error_code ec;
  tokenlock::atomic_write(w.at(1), w.at(2), {}, ec);
  return answer_of(ec);
}

std::string holder(const words& w) {
  std::error_code ec;
  auto h = tokenlock::rename_lock(w.at(1)).holder(ec);
  if (ec) return failure(ec);
  if (!h) return "ok free";
  const char* owner = h->owner == tokenlock::owner_liveness::alive ? "alive"
                      : h->owner == tokenlock::owner_liveness::dead ? "dead" : "unknown";
  return std::string("ok ") + owner + (h->stale ? ",stale" : "") + (h->legacy ? ",legacy" : "");
}

// "ok free", or one word per holder, sorted: exclusive, shared, slot/N,
// waiting.
std::string holders(const words& w) {
  std::error_code ec;
  auto all = tokenlock::rename_lock(w.at(1)).holders(ec);
  if (ec) return failure(ec);
  if (all.empty()) return "ok free";
  std::vector<std::string> kinds;
  for (const auto& h : all)
    kinds.push_back(h.waiting_writer ? "waiting"
                    : h.mode == tokenlock::lock_mode::exclusive ? "exclusive"
                    : h.slots ? "slot/" + std::to_string(h.slots) : "shared");
  std::sort(kinds.begin(), kinds.end());
  std::string out = "ok ";
  for (std::size_t i = 0; i < kinds.size(); ++i) out += (i ? "," : "") + kinds[i];
  return out;
}

std::string serve(const words& w) {
  const std::string& op = w.at(0);
  std::error_code ec;
  if (op == "ping") return "ok";
  if (op == "acquire") return acquire(w);
  if (op == "release") return handle.release(ec), answer_of(ec);
  if (op == "refresh") return refresh(w);
  if (op == "commit") return commit(w);
  if (op == "update") return update(w);
  if (op == "increment") return increment(w);
  if (op == "read") return read(w);
  if (op == "write") return write(w);
  if (op == "holder") return holder(w);
  if (op == "holders") return holders(w);
  return "unsupported " + op;
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    words w;
    for (std::string word; in >> word;) w.push_back(word);
    if (w.empty() || w[0] == "quit") break;
    std::cout << serve(w) << std::endl;
  }
}
