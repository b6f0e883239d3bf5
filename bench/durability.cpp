// The cost of atomic writes at each durability level, as ratios measured
// in one run: against a plain in-place rewrite of the same bytes (open with
// O_TRUNC, write, close: what tears files), and against durability none.
// Also increment_counter at each level against a bare acquire+release.
//
//   bench/durability [DIR] [google-benchmark flags]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <boost/filesystem.hpp>

#include "bench_support.hpp"
#include "tokenlock/tokenlock.hpp"

namespace fs = boost::filesystem;

namespace {

fs::path g_root;
const char* level_name[] = {"none", "file", "file_and_dir"};

void BM_PlainRewrite(benchmark::State& state) {
  const std::string data(static_cast<std::size_t>(state.range(0)), 'x');
  const std::string path = (g_root / "plain").string();
  for (auto _ : state) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || ::write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size()))
      state.SkipWithError("write");
    ::close(fd);
  }
}

void BM_AtomicWrite(benchmark::State& state) {
  const std::string data(static_cast<std::size_t>(state.range(0)), 'x');
  tokenlock::write_options o;
  o.sync = static_cast<tokenlock::durability>(state.range(1));
  const fs::path path = g_root / ("atomic" + std::to_string(state.range(1)));
  for (auto _ : state) tokenlock::atomic_write(path, data, o);
}

void BM_AcquireRelease(benchmark::State& state) {
  tokenlock::rename_lock lock(g_root / "ar.lock");
  for (auto _ : state) lock.acquire().release();
}

void BM_IncrementCounter(benchmark::State& state) {
  tokenlock::update_options o;
  o.write.sync = static_cast<tokenlock::durability>(state.range(0));
  const fs::path file = g_root / ("counter" + std::to_string(state.range(0)));
  tokenlock::rename_lock lock(file.string() + ".lock");
  for (auto _ : state) tokenlock::increment_counter(file, lock, 1, o);
}

const std::vector<long> sizes{64, 64 << 10, 1 << 20};

void register_all() {
  for (long size : sizes) {
    benchmark::RegisterBenchmark("PlainRewrite", BM_PlainRewrite)->Arg(size);
    for (long level = 0; level < 3; ++level)
      benchmark::RegisterBenchmark("AtomicWrite", BM_AtomicWrite)->Args({size, level});
  }
  benchmark::RegisterBenchmark("AcquireRelease", BM_AcquireRelease);
  for (long level = 0; level < 3; ++level)
    benchmark::RegisterBenchmark("IncrementCounter", BM_IncrementCounter)->Arg(level);
}

class capture final : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> medians;  // run name -> ns
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs)
      if (r.aggregate_name == "median") medians[r.run_name.str()] = r.GetAdjustedRealTime();
    ConsoleReporter::ReportRuns(runs);
  }
  double get(const std::string& name) const {
    auto it = medians.find(name);
    return it == medians.end() ? 0 : it->second;
  }
};

}  // namespace

int main(int argc, char** argv) {
  g_root = tokenlock::bench::start(argc, argv, "durability",
                                   {"--benchmark_repetitions=9",
                                    "--benchmark_report_aggregates_only=true",
                                    "--benchmark_min_time=0.05"});
  register_all();
  capture reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  fs::remove_all(g_root);

  std::printf("\n%-9s %-13s %12s %16s\n", "size", "durability", "vs none", "vs plain rewrite");
  for (long size : sizes) {
    const double plain = reporter.get("PlainRewrite/" + std::to_string(size));
    const double none = reporter.get("AtomicWrite/" + std::to_string(size) + "/0");
    for (int level = 0; level < 3; ++level) {
      const double t =
          reporter.get("AtomicWrite/" + std::to_string(size) + "/" + std::to_string(level));
      std::printf("%-9ld %-13s %11.2fx %15.2fx\n", size, level_name[level], none > 0 ? t / none : 0,
                  plain > 0 ? t / plain : 0);
    }
  }
  const double ar = reporter.get("AcquireRelease");
  std::printf("\nincrement_counter vs bare acquire+release:\n");
  for (int level = 0; level < 3; ++level) {
    const double t = reporter.get("IncrementCounter/" + std::to_string(level));
    std::printf("  %-13s %8.2fx\n", level_name[level], ar > 0 ? t / ar : 0);
  }
  return 0;
}
