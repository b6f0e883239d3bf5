#include "doctor/clock_offset.hpp"

#include "core/errno_advice.hpp"

#include <cerrno>
#include <cstdio>
#include <vector>

namespace tokenlock {
namespace detail {
namespace {

// Linux stamps a file with the time of the last timer tick (the coarse
// clock), so a stamp may be up to one tick older than the write that made
// it: 1 ms with CONFIG_HZ=1000, 4 ms with 250 (as measured on the machine
// this was written on), 10 ms with 100. The file server's tick is unknown,
// so the coarsest in use is assumed.
constexpr std::int64_t tick_granule_us = 10'000;

struct sample {
  std::int64_t stamp_us;       // the file's modification time after the write
  std::int64_t midpoint_us;    // this host's clock halfway through the round trip
  std::int64_t round_trip_us;  // write + fstat, on the monotonic clock
};

const char* const step = "estimate clock offset in";

std::string hint(std::error_code ec, const std::string& dir) {
  const std::string fix = errno_fix(ec, errno_context::clock_probe, dir);
  return fix.empty() ? fix : "; " + fix;
}

failure os_failure(const std::string& dir, const std::string& what, std::error_code ec) {
  return make_failure(ec, describe(step, dir, what, ec) + hint(ec, dir));
}

// Whole seconds in every stamp mean a filesystem that keeps seconds only;
// nanosecond stamps are whole seconds by chance once in a million. Even
// seconds (FAT) tell only when the stamps differ: samples taken within one
// second all carry the same stamp, even half the time.
std::int64_t granule_of(const std::vector<sample>& samples) {
  bool seconds = true, even_seconds = true, differ = false;
  for (const auto& s : samples) {
    seconds = seconds && s.stamp_us % 1'000'000 == 0;
    even_seconds = even_seconds && s.stamp_us % 2'000'000 == 0;
    differ = differ || s.stamp_us != samples.front().stamp_us;
  }
  if (!seconds) return tick_granule_us;
  return even_seconds && differ ? 2'000'000 : 1'000'000;
}

// The directory and the number of samples, checked before anything is made.
failure refuse_bad_arguments(const std::string& dir, const clock_offset_options& options) {
  if (dir.empty())
    return make_failure(errc::bad_argument,
                        "tokenlock: estimate clock offset: the directory name is empty");
  if (options.samples < 1 || options.samples > 100)
    return make_failure(errc::bad_argument,
                        describe(step, dir,
                                 "clock_offset_options::samples must be 1 to 100, not " +
                                     std::to_string(options.samples),
                                 {}));
  return {};
}

// A name of our own: several processes may measure in one directory.
std::string probe_name(os& sys) {
  char nonce[17];
  std::snprintf(nonce, sizeof nonce, "%016llx",
                static_cast<unsigned long long>(sys.random_u64()));
  return std::string(clock_probe_prefix) + nonce;
}

// Writes a byte to the probe file and reads back its modification time,
// `count` times; stops at the first failure.
failure take_samples(os& sys, int fd, const std::string& dir, const std::string& name, int count,
                     std::vector<sample>& samples) {
  for (int i = 0; i < count; ++i) {
    const std::int64_t wall0 = sys.wall_now_us();
    const std::int64_t steady0 = sys.steady_now_us();
    std::size_t written = 0;
    std::error_code ec = sys.write(fd, "x", 1, written);
    if (!ec && written != 1) ec = std::make_error_code(std::errc::io_error);
    if (ec) return os_failure(dir, "cannot write to the probe file " + name, ec);
    file_status st;
    if ((ec = sys.file_status_of(fd, st)))
      return os_failure(dir, "cannot read the modification time of the probe file " + name, ec);
    // The monotonic clock times the round trip, so that a step of the wall
    // clock in between cannot make it negative or huge.
    const std::int64_t round_trip = sys.steady_now_us() - steady0;
    if (st.mtime_us <= 0) {
      const auto unsupported = std::make_error_code(std::errc::not_supported);
      return make_failure(
          unsupported,
          describe(step, dir,
                   "the filesystem reports no modification time for the probe file " + name,
                   unsupported));
    }
    samples.push_back({st.mtime_us, wall0 + round_trip / 2, round_trip});
  }
  return {};
}

// Closes and removes the probe file; `f` is what failed before, if
// anything, and stays the failure to explain.
failure close_and_remove_probe(os& sys, int fd, const std::string& dir, const std::string& path,
                               const std::string& name, failure f) {
  // close's error counts (NFS reports failed writes there), but only when
  // nothing failed before it: the first failure is the one to explain.
  if (auto ec = sys.close(fd); ec && !f)
    f = os_failure(dir, "cannot close the probe file " + name, ec);
  if (auto ec = sys.remove_file(path); ec && ec != std::errc::no_such_file_or_directory) {
    const std::string left =
        "cannot remove the probe file " + path + ": " + ec.message() + "; remove it by hand";
    if (f)
      f.message += "; and " + left;
    else
      f = make_failure(ec, "tokenlock: " + std::string(step) + " " + dir + ": " + left);
  }
  return f;
}

// The estimate from the sample with the shortest round trip, the least
// uncertain one.
clock_offset estimate_from(const std::vector<sample>& samples) {
  const sample* best = &samples.front();
  for (const auto& s : samples)
    if (s.round_trip_us < best->round_trip_us) best = &s;
  // The stamp lies in (write - granule, write] on the server's clock, and
  // the write within the round trip on ours: centring both intervals gives
  // the estimate, their half-widths its uncertainty.
  const std::int64_t granule = granule_of(samples);
  clock_offset out;
  out.offset = std::chrono::microseconds(best->stamp_us - best->midpoint_us + granule / 2);
  // One microsecond more: both clocks are read truncated to microseconds
  // (a local probe was once off by exactly that).
  out.uncertainty = std::chrono::microseconds((best->round_trip_us + 1) / 2 + granule / 2 + 1);
  out.round_trip = std::chrono::microseconds(best->round_trip_us);
  out.granularity = std::chrono::microseconds(granule);
  return out;
}

}  // namespace

failure estimate_clock_offset(os& sys, const std::string& dir, const clock_offset_options& options,
                              clock_offset& out) {
  if (failure f = refuse_bad_arguments(dir, options)) return f;
  const std::string name = probe_name(sys);
  const std::string path = dir.back() == '/' ? dir + name : dir + "/" + name;
  int fd = -1;
  if (auto ec = sys.create_exclusive(path, 0600, fd))
    return os_failure(dir, "cannot create the probe file " + name, ec);
  std::vector<sample> samples;
  failure f = take_samples(sys, fd, dir, name, options.samples, samples);
  f = close_and_remove_probe(sys, fd, dir, path, name, std::move(f));
  if (f) return f;
  out = estimate_from(samples);
  return {};
}

}  // namespace detail

clock_offset estimate_clock_offset(const boost::filesystem::path& dir,
                                   clock_offset_options options) {
  clock_offset out;
  detail::run_throwing(
      [&] { return detail::estimate_clock_offset(*detail::system_os(), dir.string(), options, out); });
  return out;
}

clock_offset estimate_clock_offset(const boost::filesystem::path& dir,
                                   std::error_code& ec) noexcept {
  return estimate_clock_offset(dir, clock_offset_options{}, ec);
}

clock_offset estimate_clock_offset(const boost::filesystem::path& dir,
                                   clock_offset_options options, std::error_code& ec) noexcept {
  clock_offset out;
  detail::run_noexcept(ec, [&] {
    return detail::estimate_clock_offset(*detail::system_os(), dir.string(), options, out);
  });
  return out;
}

}  // namespace tokenlock
