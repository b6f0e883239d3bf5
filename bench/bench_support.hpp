// Start-up shared by the Google Benchmark programs: an optional first
// argument naming the directory (and so the filesystem) to measure in, and
// randomly interleaved repetitions, so that benchmarks compared by ratio
// see the same drift of the machine's speed.
#pragma once

#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <boost/filesystem.hpp>

namespace tokenlock::bench {

// Parses the command line (consuming DIR if given), initialises Google
// Benchmark with `defaults` before the user's flags (so those win), and
// creates and returns a fresh directory for the run.
inline boost::filesystem::path start(int argc, char** argv, const char* tag,
                                     std::vector<std::string> defaults) {
  std::vector<char*> args(argv, argv + argc);
  std::string root;
  if (args.size() > 1 && args[1][0] != '-') {
    root = args[1];
    args.erase(args.begin() + 1);
  }
  defaults.insert(defaults.begin(), "--benchmark_enable_random_interleaving=true");
  static std::vector<std::string> storage;
  storage = std::move(defaults);
  std::vector<char*> merged{args[0]};
  for (auto& d : storage) merged.push_back(&d[0]);
  merged.insert(merged.end(), args.begin() + 1, args.end());
  int n = static_cast<int>(merged.size());
  benchmark::Initialize(&n, merged.data());
  auto dir = (root.empty() ? boost::filesystem::temp_directory_path() : boost::filesystem::path(root)) /
             boost::filesystem::unique_path(std::string("tokenlock-") + tag + "-%%%%-%%%%");
  boost::filesystem::create_directories(dir);
  return dir;
}

}  // namespace tokenlock::bench
