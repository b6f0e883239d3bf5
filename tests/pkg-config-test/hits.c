/* A C hit counter: counts FILE up by one and prints the new value. */
#include <tokenlock/tokenlock.h>

#include <inttypes.h>
#include <stdio.h>

int main(int argc, char **argv) {
  uint64_t hits = 0;
  if (argc != 2) {
    fprintf(stderr, "usage: hits FILE\n");
    return 64;
  }
  if (tokenlock_increment(argv[1], NULL, 1, NULL, &hits) != TOKENLOCK_OK) {
    fprintf(stderr, "%s\n", tokenlock_last_error());
    return 1;
  }
  printf("%" PRIu64 "\n", hits);
  return 0;
}
