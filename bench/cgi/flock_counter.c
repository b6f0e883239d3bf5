/* The reference counter for bench/cgi_bench.sh: what a careful CGI author
 * writes with flock(2). GET ?id=NAME increments FLOCK_COUNTER_DIR/NAME.count
 * under flock on NAME.count.flock, writing a temporary file renamed over
 * the counter; with FLOCK_COUNTER_SYNC=file_and_dir it also fsyncs the file
 * and the directory, like tokenlock's default durability. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

static int fail(const char* what) {
  fprintf(stderr, "flock_counter: %s\n", what);
  fputs("Status: 500 Internal Server Error\r\nContent-Type: text/plain\r\n\r\nerror\n", stdout);
  return 0;
}

int main(void) {
  const char* dir = getenv("FLOCK_COUNTER_DIR");
  const char* q = getenv("QUERY_STRING");
  const char* sync = getenv("FLOCK_COUNTER_SYNC");
  int durable = sync && strcmp(sync, "file_and_dir") == 0;
  char id[65] = "default", path[4096], tmp[4200], lock[4200];
  if (!dir) return fail("no FLOCK_COUNTER_DIR");
  if (q && strncmp(q, "id=", 3) == 0) {
    size_t n = strcspn(q + 3, "&");
    if (n == 0 || n > 64) return fail("bad id");
    memcpy(id, q + 3, n);
    id[n] = 0;
    for (size_t i = 0; i < n; ++i)
      if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= '0' && id[i] <= '9') || id[i] == '_'))
        return fail("bad id");
  }
  snprintf(path, sizeof path, "%s/%s.count", dir, id);
  snprintf(lock, sizeof lock, "%s.flock", path);
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lfd < 0 || flock(lfd, LOCK_EX) != 0) return fail("lock");
  unsigned long long v = 0;
  FILE* f = fopen(path, "r");
  if (f) {
    if (fscanf(f, "%llu", &v) != 1) v = 0;
    fclose(f);
  }
  ++v;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  char buf[32];
  int len = snprintf(buf, sizeof buf, "%llu\n", v);
  if (fd < 0 || write(fd, buf, (size_t)len) != len) return fail("write");
  if (durable && fsync(fd) != 0) return fail("fsync");
  close(fd);
  if (rename(tmp, path) != 0) return fail("rename");
  if (durable) {
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      fsync(dfd);
      close(dfd);
    }
  }
  flock(lfd, LOCK_UN);
  close(lfd);
  printf("Status: 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nCache-Control: no-store\r\n\r\n%llu\n", v);
  return 0;
}
