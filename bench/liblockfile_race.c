/* Two holders of one liblockfile lock, step by step.
 *
 * bench/peers once lost 177 of about 18,000 increments under liblockfile's
 * lockfile_create(path, 0, L_PID) with 16 processes (docs/benchmarks.md).
 * This program replays the interleaving that allows it, deterministically,
 * by interposing the two calls of liblockfile 1.17 between which another
 * process must run (lockfile.c, lockfile_create_save_tmplock and
 * lockfile_check):
 *
 *   1. H holds the lock.
 *   2. A's link(2) of its temporary file fails; A checks whether the lock
 *      is stale. Just before A's stat(2) of the lock file, H releases it.
 *   3. A's stat fails with ENOENT, which lockfile_check takes for "stale".
 *   4. Just before A unlinks the lock file by name, B takes the lock.
 *   5. A's unlink removes B's lock file; A links its own and succeeds.
 *   Now A and B both hold the lock.
 *
 * A stale lock removed by name, not by the identity that was judged, is the
 * flaw: tokenlock takes over a stale token by renaming the exact name it
 * judged, and if that name has gone the rename fails (docs/protocol.md).
 *
 *   liblockfile_race [DIR]
 * Exit 0 when both processes hold the lock (the race is there), 1 when the
 * steps did not lead to two holders (a liblockfile that fixed it), 2 on a
 * set-up error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <lockfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static char lock_path[4096];
/* Set in A only: its calls on lock_path run the steps. */
static int armed;
static int stat_step_done, unlink_step_done;
/* A -> H: "release now"; H -> A: done. A -> B: "take it now"; B -> A: result. */
static int to_h[2], from_h[2], to_b[2], from_b[2];

static void die(const char* what) {
  fprintf(stderr, "liblockfile_race: %s: %s\n", what, strerror(errno));
  exit(2);
}

static void send_byte(int fd, char c) {
  if (write(fd, &c, 1) != 1) die("write to a pipe");
}

static char receive_byte(int fd) {
  char c;
  if (read(fd, &c, 1) != 1) die("read from a pipe");
  return c;
}

/* liblockfile 1.17 was built against a glibc whose stat(2) wrapper is
 * __xstat; an executable's definition interposes the library's reference. */
int __xstat(int ver, const char* path, struct stat* st) {
  (void)ver;
  if (armed && !stat_step_done && strcmp(path, lock_path) == 0) {
    stat_step_done = 1;
    send_byte(to_h[1], 'r'); /* step 2: H releases ... */
    receive_byte(from_h[0]); /* ... before this stat looks */
  }
  return fstatat(AT_FDCWD, path, st, 0);
}

int unlink(const char* path) {
  if (armed && stat_step_done && !unlink_step_done && strcmp(path, lock_path) == 0) {
    unlink_step_done = 1;
    send_byte(to_b[1], 'g'); /* step 4: B takes the lock ... */
    if (receive_byte(from_b[0]) != 'y') {
      fprintf(stderr, "liblockfile_race: B did not get the lock\n");
      exit(2);
    }
    fprintf(stderr, "step 4: B holds the lock; A now unlinks %s by name\n", path);
  }
  return (int)syscall(SYS_unlink, path);
}

static pid_t lock_owner(void) {
  FILE* f = fopen(lock_path, "r");
  long pid = 0;
  if (!f) return 0;
  if (fscanf(f, "%ld", &pid) != 1) pid = 0;
  fclose(f);
  return (pid_t)pid;
}

int main(int argc, char** argv) {
  char dir_template[] = "/tmp/liblockfile-race.XXXXXX";
  const char* dir = argc > 1 ? argv[1] : mkdtemp(dir_template);
  if (!dir) die("mkdtemp");
  snprintf(lock_path, sizeof lock_path, "%s/race.lock", dir);
  if (pipe(to_h) || pipe(from_h) || pipe(to_b) || pipe(from_b)) die("pipe");

  /* Step 1: H (this process) holds the lock. */
  if (lockfile_create(lock_path, 0, L_PID) != L_SUCCESS) die("H: lockfile_create");
  fprintf(stderr, "step 1: H (pid %d) holds %s\n", (int)getpid(), lock_path);

  int b_result[2], a_result[2], release[2];
  if (pipe(b_result) || pipe(a_result) || pipe(release)) die("pipe");
  const pid_t b = fork();
  if (b < 0) die("fork");
  if (b == 0) {
    receive_byte(to_b[0]);
    const char got = lockfile_create(lock_path, 0, L_PID) == L_SUCCESS ? 'y' : 'n';
    send_byte(from_b[1], got);
    send_byte(b_result[1], got);
    receive_byte(release[0]); /* holds it until the parent has looked */
    _exit(0);
  }
  const pid_t a = fork();
  if (a < 0) die("fork");
  if (a == 0) {
    armed = 1;
    const char got = lockfile_create(lock_path, 0, L_PID) == L_SUCCESS ? 'y' : 'n';
    /* A liblockfile that never made these calls would leave H waiting. */
    if (!stat_step_done) send_byte(to_h[1], 'n');
    send_byte(a_result[1], got);
    send_byte(a_result[1], unlink_step_done ? 'u' : '-');
    receive_byte(release[0]);
    _exit(0);
  }

  /* H: release when A asks (step 2). */
  if (receive_byte(to_h[0]) == 'r') {
    if (lockfile_remove(lock_path) != 0) die("H: lockfile_remove");
    fprintf(stderr, "step 2: H released the lock just before A's stat of it\n");
    send_byte(from_h[1], 'd');
  } else {
    fprintf(stderr, "A never stat'ed the lock file: not the liblockfile these steps are for\n");
  }
  const char a_got = receive_byte(a_result[0]);
  const int unlinked = receive_byte(a_result[0]) == 'u';
  char b_got = 'n';
  if (unlinked) b_got = receive_byte(b_result[0]);
  else kill(b, SIGKILL); /* B was never told to take the lock */
  const pid_t owner = lock_owner();
  fprintf(stderr,
          "step 5: B's lockfile_create returned %s, then A's %s; the lock file names pid %d "
          "(A is %d, B %d)\n",
          b_got == 'y' ? "L_SUCCESS" : "an error", a_got == 'y' ? "L_SUCCESS" : "an error",
          (int)owner, (int)a, (int)b);
  send_byte(release[1], 'x');
  send_byte(release[1], 'x');
  int status;
  waitpid(a, &status, 0);
  waitpid(b, &status, 0);
  unlink(lock_path);
  if (argc <= 1) rmdir(dir);
  if (unlinked && a_got == 'y' && b_got == 'y' && owner == a) {
    printf("two holders: B took the lock after H released it, A removed B's lock file by name "
           "and took the lock too; both hold it now\n");
    return 0;
  }
  printf("no double hold: the steps did not give A the lock while B held it\n");
  return 1;
}
