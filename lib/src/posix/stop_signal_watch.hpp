// The stop signals' watch of the etcd lock's waits: a pipe that a stop
// signal makes readable, so that a request in flight ends at once
// (etcd/http_client.hpp, set_wake_fd) and the waiter gives its place in
// line back before the process ends.
#pragma once

namespace tokenlock::detail::posix {

// While one lives, SIGTERM, SIGINT and SIGHUP (those the process does not
// ignore) do not end the process at once: the handler notes the signal
// and makes fd() readable, so that every wait given it as its wake
// descriptor ends (io_status::interrupted). The program then does what
// must be done before it dies (an etcd waiter gives its place in line
// back), and finish() restores the actions the signals had and raises the
// signal noted, once the last watch of the process finishes: the process
// then ends as the signal would have ended it (or runs the program's own
// handler, which may return). Watches may be held by several threads at
// once; each must be finished (the destructor does it).
class stop_signal_watch {
 public:
  stop_signal_watch() noexcept;
  ~stop_signal_watch() { finish(); }
  stop_signal_watch(const stop_signal_watch&) = delete;
  stop_signal_watch& operator=(const stop_signal_watch&) = delete;

  // -1 when the watch could not be set up (no pipe): signals then act as
  // before.
  int fd() const noexcept { return fd_; }
  // The stop signal caught since the first watch began, or 0.
  static int caught() noexcept;
  // Restores the signals' actions when this is the last watch, and raises
  // the signal caught, if any; returns when the process survives it.
  void finish() noexcept;

 private:
  int fd_ = -1;
  bool active_ = false;
};

}  // namespace tokenlock::detail::posix
