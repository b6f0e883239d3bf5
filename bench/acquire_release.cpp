// Uncontended acquire+release against the protocol's physical floor: two bare
// rename(2) calls between the same names on the same filesystem, measured in
// one run with randomly interleaved repetitions, compared by their medians.
//
//   bench/acquire_release [DIR] [google-benchmark flags]
// DIR (default: the temporary directory) chooses the filesystem.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <boost/filesystem.hpp>

#include "bench_support.hpp"
#include "tokenlock/tokenlock.hpp"

namespace fs = boost::filesystem;

namespace {

fs::path g_root;

void BM_TwoRenames(benchmark::State& state) {
  // The same names the lock renames between, so that only the protocol's
  // own work differs.
  const fs::path d = g_root / "bare.lock";
  fs::create_directories(d / "lockfile");
  const std::string free_name = (d / "lockfile").string();
  const std::string held_name =
      (d / "lockfile.1800000000000000.benchhost-0123abcd.123456.987654321.0123456789abcdef")
          .string();
  for (auto _ : state) {
    if (std::rename(free_name.c_str(), held_name.c_str()) != 0) state.SkipWithError("rename");
    if (std::rename(held_name.c_str(), free_name.c_str()) != 0) state.SkipWithError("rename");
  }
}

void BM_AcquireRelease(benchmark::State& state) {
  tokenlock::rename_lock lock(g_root / "lib.lock");
  lock.acquire().release();  // create the directory and read our identity once
  for (auto _ : state) {
    tokenlock::lock_handle h = lock.acquire();
    h.release();
  }
}

// The same through the interface (tokenlock/lock.hpp), as a program that
// opened its lock with open_lock calls it: a virtual call, and the grant
// behind the handle allocated.
void BM_AcquireReleaseInterface(benchmark::State& state) {
  tokenlock::rename_lock directory(g_root / "any.lock");
  tokenlock::lock& lock = directory;
  lock.acquire().release();
  for (auto _ : state) {
    tokenlock::handle h = lock.acquire();
    h.release();
  }
}

BENCHMARK(BM_TwoRenames)->Repetitions(40)->MinTime(0.05)->ReportAggregatesOnly(true);
BENCHMARK(BM_AcquireRelease)->Repetitions(40)->MinTime(0.05)->ReportAggregatesOnly(true);
BENCHMARK(BM_AcquireReleaseInterface)->Repetitions(40)->MinTime(0.05)->ReportAggregatesOnly(true);

class capture final : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> medians;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs)
      if (r.aggregate_name == "median") medians[r.run_name.function_name] = r.GetAdjustedRealTime();
    ConsoleReporter::ReportRuns(runs);
  }
};

}  // namespace

int main(int argc, char** argv) {
  g_root = tokenlock::bench::start(argc, argv, "bench", {});
  capture reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  fs::remove_all(g_root);
  auto bare = reporter.medians.find("BM_TwoRenames");
  auto lib = reporter.medians.find("BM_AcquireRelease");
  if (bare == reporter.medians.end() || lib == reporter.medians.end()) return 0;
  std::printf("\nacquire+release / two bare renames = %.3f (medians %.0f ns / %.0f ns; target <= 1.15)\n",
              lib->second / bare->second, lib->second, bare->second);
  auto any = reporter.medians.find("BM_AcquireReleaseInterface");
  if (any != reporter.medians.end())
    std::printf("through tokenlock::lock / two bare renames = %.3f (median %.0f ns)\n",
                any->second / bare->second, any->second);
  return 0;
}
