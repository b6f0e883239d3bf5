// Uncontended acquire+release against the protocol's physical floor: two bare
// rename(2) calls between the same names on the same filesystem, measured in
// one run with randomly interleaved repetitions, compared by their medians.
// Beside them, a shared holder's acquire+release (a lone share's fast path:
// docs/protocol.md, Shared locks and semaphores, Cost) against the exclusive one, repetition by
// repetition: the ratio's median and its spread.
//
//   bench/acquire_release [DIR] [google-benchmark flags]
// DIR (default: the temporary directory) chooses the filesystem.
#include <benchmark/benchmark.h>

#include <algorithm>
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

// A lone shared holder (lock_options::mode = shared) on its own lock
// directory: the fast path is two renames, as a writer's.
void BM_SharedAcquireRelease(benchmark::State& state) {
  tokenlock::lock_options o;
  o.mode = tokenlock::lock_mode::shared;
  tokenlock::rename_lock lock(g_root / "shared.lock", o);
  lock.acquire().release();
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
// Every repetition reported (capture shows the aggregates only): the
// shared/exclusive pairs need them.
BENCHMARK(BM_AcquireRelease)->Repetitions(40)->MinTime(0.05);
BENCHMARK(BM_AcquireReleaseInterface)->Repetitions(40)->MinTime(0.05)->ReportAggregatesOnly(true);
BENCHMARK(BM_SharedAcquireRelease)->Repetitions(40)->MinTime(0.05);

class capture final : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> medians;
  // Every repetition's time, by benchmark, in the order they ran, of the
  // benchmarks that report them; only aggregates are displayed.
  std::map<std::string, std::vector<double>> each;
  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> shown;
    for (const auto& r : runs) {
      if (r.aggregate_name == "median") medians[r.run_name.function_name] = r.GetAdjustedRealTime();
      if (r.run_type == Run::RT_Iteration) each[r.run_name.function_name].push_back(r.GetAdjustedRealTime());
      else shown.push_back(r);
    }
    ConsoleReporter::ReportRuns(shown);
  }
};

// The shared/exclusive ratio of each pair of repetitions (the i-th of each,
// the pairs interleaved at random), as "median [min, max]" and the
// quartiles.
void print_ratio_spread(const std::vector<double>& shared, const std::vector<double>& exclusive) {
  std::vector<double> r;
  for (std::size_t i = 0; i < shared.size() && i < exclusive.size(); ++i) r.push_back(shared[i] / exclusive[i]);
  if (r.empty()) return;
  std::sort(r.begin(), r.end());
  const auto at = [&](double q) { return r[static_cast<std::size_t>(q * static_cast<double>(r.size() - 1))]; };
  std::printf("shared / exclusive acquire+release, per repetition pair (%zu): median %.3f, "
              "quartiles %.3f..%.3f, range %.3f..%.3f (target <= 1.5)\n",
              r.size(), at(0.5), at(0.25), at(0.75), r.front(), r.back());
}

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
  auto shared = reporter.medians.find("BM_SharedAcquireRelease");
  if (shared != reporter.medians.end()) {
    std::printf("shared acquire+release / exclusive = %.3f (medians %.0f ns / %.0f ns)\n",
                shared->second / lib->second, shared->second, lib->second);
    print_ratio_spread(reporter.each["BM_SharedAcquireRelease"], reporter.each["BM_AcquireRelease"]);
  }
  auto any = reporter.medians.find("BM_AcquireReleaseInterface");
  if (any != reporter.medians.end())
    std::printf("through tokenlock::lock / two bare renames = %.3f (median %.0f ns)\n",
                any->second / bare->second, any->second);
  return 0;
}
