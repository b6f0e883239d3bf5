// Acquires and releases a lock through the installed package; prints the
// version and the token so the test can check that it ran.
#include <tokenlock/tokenlock.hpp>

#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: consumer LOCKDIR\n";
    return 64;
  }
  tokenlock::rename_lock lock(argv[1]);
  tokenlock::lock_handle h = lock.acquire();
  std::cout << "tokenlock " << TOKENLOCK_VERSION << " held " << h.token() << "\n";
  h.release();
  return lock.holder() ? 1 : 0;
}
