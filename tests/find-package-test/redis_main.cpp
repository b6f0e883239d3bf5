// Links the installed Redis backend and runs it against a port where
// nothing listens: the error it reports proves that hiredis came along and
// that the error names the server.
#include <tokenlock/redis_lock.hpp>

#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: redis_consumer URL\n";
    return 64;
  }
  tokenlock::redis_lock lock(argv[1], "consumer");
  std::error_code ec;
  auto h = lock.try_acquire(ec);
  std::cout << (h ? "acquired" : "refused") << ": " << ec.message() << ": "
            << tokenlock::last_error_message() << "\n";
  return ec ? 0 : 1;
}
