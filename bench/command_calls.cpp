// The cost of one call of a command, for commands compared side by side:
// each round runs every command CALLS times (posix_spawn, then wait), in a
// new random order, so that all see the same drift of the machine's speed;
// the figure of a command is its median over the rounds of the mean time
// per call, and ratios are taken between those medians.
//
//   command_calls [-r ROUNDS] [-n CALLS] LABEL=ARGV... [LABEL=ARGV...]
//
// ARGV is one argument string whose words are separated by '|', so that
// paths may contain spaces: "flock=flock|/tmp/x/f|true". A word ";" ends one
// program and starts the next, run in turn as one call (a lock command
// without a command mode: "lockfile-create|F|;|true|;|lockfile-remove|F").
// Prints a table and one `calls_us_<LABEL>=<microseconds>` line per command.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

extern char** environ;

namespace {

struct command {
  std::string label;
  std::vector<std::vector<std::string>> programs;  // run in turn: one call
  std::vector<double> per_call_us;                 // one per round
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

// Runs the command's programs once; exits the benchmark if one fails, since
// a command that fails fast would look cheap.
void run_once(const command& c) {
  for (const auto& program : c.programs) {
    std::vector<char*> argv;
    for (const auto& a : program) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (int err = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ)) {
      std::cerr << "command_calls: cannot run " << program[0] << ": " << std::strerror(err) << "\n";
      std::exit(1);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::cerr << "command_calls: " << c.label << " failed (status " << status << ")\n";
      std::exit(1);
    }
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 15, calls = 200;
  std::vector<command> commands;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-r" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (a == "-n" && i + 1 < argc) {
      calls = std::atoi(argv[++i]);
    } else if (a.find('=') != std::string::npos) {
      command c;
      c.label = a.substr(0, a.find('='));
      c.programs.emplace_back();
      for (auto& word : split(a.substr(a.find('=') + 1), '|')) {
        if (word == ";")
          c.programs.emplace_back();
        else
          c.programs.back().push_back(std::move(word));
      }
      commands.push_back(std::move(c));
    } else {
      std::cerr << "usage: command_calls [-r ROUNDS] [-n CALLS] LABEL=ARG|ARG|... ...\n";
      return 64;
    }
  }
  if (commands.empty() || rounds < 1 || calls < 1) {
    std::cerr << "usage: command_calls [-r ROUNDS] [-n CALLS] LABEL=ARG|ARG|... ...\n";
    return 64;
  }
  for (auto& c : commands) run_once(c);  // warm caches and check each works
  std::mt19937 rng(std::random_device{}());
  std::vector<size_t> order(commands.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (int r = 0; r < rounds; ++r) {
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t i : order) {
      const auto start = std::chrono::steady_clock::now();
      for (int k = 0; k < calls; ++k) run_once(commands[i]);
      const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
      commands[i].per_call_us.push_back(took.count() / calls);
    }
  }
  std::printf("%-24s %12s %12s %12s\n", "command", "median us", "min us", "max us");
  for (const auto& c : commands) {
    const auto mm = std::minmax_element(c.per_call_us.begin(), c.per_call_us.end());
    std::printf("%-24s %12.1f %12.1f %12.1f\n", c.label.c_str(), median(c.per_call_us), *mm.first,
                *mm.second);
  }
  for (const auto& c : commands)
    std::printf("calls_us_%s=%.1f\n", c.label.c_str(), median(c.per_call_us));
  return 0;
}
