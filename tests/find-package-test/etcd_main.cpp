// Links the installed etcd backend and runs it against a port where
// nothing listens: the error it reports proves that libcurl came along and
// that the error names the member.
#include <tokenlock/etcd_lock.hpp>

#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: etcd_consumer URL\n";
    return 64;
  }
  tokenlock::etcd_lock_options o;
  o.command_timeout = std::chrono::milliseconds(500);
  tokenlock::etcd_lock lock(argv[1], "consumer", o);
  std::error_code ec;
  auto h = lock.try_acquire(ec);
  std::cout << (h ? "acquired" : "refused") << ": " << ec.message() << ": "
            << tokenlock::last_error_message() << "\n";
  return ec ? 0 : 1;
}
