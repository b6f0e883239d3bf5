#include <cstdio>
#include <cstdlib>

#include "tokenlock/clock_judgement.hpp"

namespace tokenlock {

std::string seconds_text(std::chrono::microseconds d) {
  const long long ms = (std::llabs(d.count()) + 500) / 1000;
  std::string s = std::to_string(ms / 1000);
  if (ms % 1000 != 0) {
    char frac[8];
    std::snprintf(frac, sizeof frac, ".%03lld", ms % 1000);
    s += frac;
    while (s.back() == '0') s.pop_back();
  }
  return (d.count() < 0 && ms != 0 ? "-" : "") + s + " s";
}

clock_judgement judge_clock_offset(const clock_offset& c, std::chrono::microseconds allowance) {
  clock_judgement j;
  const auto magnitude = c.offset < c.offset.zero() ? -c.offset : c.offset;
  const std::string plus_minus = "+/- " + seconds_text(c.uncertainty);
  if (magnitude <= c.uncertainty)
    j.text = "this host's clock agrees with the file server's within " + plus_minus;
  else
    // The offset is the server's clock minus ours: a server ahead means
    // this host is behind.
    j.text = "this host's clock is " + seconds_text(magnitude) +
             (c.offset > c.offset.zero() ? " behind" : " ahead of") + " the file server's (" +
             plus_minus + ")";
  const std::string allowance_text = "the skew allowance of " + seconds_text(allowance);
  if (c.within(allowance)) {
    j.verdict = clock_verdict::within;
    j.text += ", inside " + allowance_text;
  } else if (c.exceeds(allowance)) {
    j.verdict = clock_verdict::beyond;
    j.text += ", more than " + allowance_text +
              ": leases written by other hosts cannot be judged safely";
    j.fix = "synchronise the clocks of the file server and of every host that shares the lock "
            "(NTP: chrony or systemd-timesyncd)";
  } else {
    j.verdict = clock_verdict::unclear;
    j.text += ": too coarse to tell whether that is inside " + allowance_text;
    if (c.granularity >= std::chrono::seconds(1))
      j.text += " (the filesystem stamps whole seconds)";
    j.fix = "make sure the file server and every host that shares the lock keep their clocks "
            "synchronised (NTP: chrony or systemd-timesyncd)";
  }
  return j;
}

}  // namespace tokenlock
