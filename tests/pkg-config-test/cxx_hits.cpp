// The same counter through the C++ interface.
#include <tokenlock/tokenlock.hpp>

#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: cxx_hits FILE\n";
    return 64;
  }
  std::cout << tokenlock::increment_counter(argv[1], tokenlock::rename_lock(std::string(argv[1]) + ".lock"))
            << "\n";
  return 0;
}
