/* The C interface from a C99 program, as a CGI author or an FFI uses it.
 * Built twice: against the static library and against libtokenlock_c.so.
 *   c_api_test SCRATCH_DIR
 * Prints one line per check and "N passed, N failed" at the end. */
#define _POSIX_C_SOURCE 200809L
#include <tokenlock/tokenlock.h>

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static int passed, failed;
static char scratch[4096];

#define CHECK(cond, ...)                                      \
  do {                                                        \
    if (cond) {                                               \
      ++passed;                                               \
    } else {                                                  \
      ++failed;                                               \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                           \
      fprintf(stderr, "\n");                                  \
    }                                                         \
  } while (0)

static const char *path_of(const char *name) {
  static char buf[8][4200];
  static int next;
  char *b = buf[next++ % 8];
  snprintf(b, sizeof buf[0], "%s/%s", scratch, name);
  return b;
}

static int exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

static char *slurp(const char *p) {
  static char buf[4096];
  FILE *f = fopen(p, "r");
  size_t n;
  if (!f) return NULL;
  n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static void spit(const char *p, const char *text) {
  FILE *f = fopen(p, "w");
  if (!f) abort();
  fputs(text, f);
  fclose(f);
}

/* Temporary files of atomic writes (".NAME.tmp.*") left in a directory. */
static int temp_files_in(const char *dir) {
  int n = 0;
  struct dirent *e;
  DIR *d = opendir(dir);
  if (!d) return -1;
  while ((e = readdir(d)) != NULL)
    if (strstr(e->d_name, ".tmp.") != NULL) ++n;
  closedir(d);
  return n;
}

static int temp_files(void) { return temp_files_in(scratch); }

static int64_t now_us(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

static void lock_and_release(void) {
  const char *dir = path_of("a.lock");
  tokenlock_lock *lock = NULL;
  int rc = tokenlock_acquire(dir, NULL, &lock);
  CHECK(rc == TOKENLOCK_OK && lock != NULL, "acquire: %d %s", rc, tokenlock_last_error());
  if (!lock) return;
  CHECK(strncmp(tokenlock_token(lock), "lockfile.", 9) == 0, "token %s", tokenlock_token(lock));
  {
    char held[4300];
    snprintf(held, sizeof held, "%s/%s", dir, tokenlock_token(lock));
    CHECK(exists(held), "the token %s is in the lock directory", held);
  }
  CHECK(tokenlock_expiry_us(lock) > now_us() + 50 * 1000000LL, "a lease of about 60 s");
  rc = tokenlock_release(lock);
  CHECK(rc == TOKENLOCK_OK, "release: %d %s", rc, tokenlock_last_error());
  {
    char free_token[4300];
    snprintf(free_token, sizeof free_token, "%s/lockfile", dir);
    CHECK(exists(free_token), "released: lockfile is back");
  }
  CHECK(tokenlock_release(NULL) == TOKENLOCK_OK, "release(NULL) is a no-op");
}

static void busy_and_timeout(void) {
  const char *dir = path_of("b.lock");
  tokenlock_lock *held = NULL, *other = (tokenlock_lock *)1;
  tokenlock_options o;
  int rc;
  tokenlock_options_init(&o);
  CHECK(tokenlock_acquire(dir, NULL, &held) == TOKENLOCK_OK, "acquire");
  rc = tokenlock_try_acquire(dir, NULL, &other);
  CHECK(rc == TOKENLOCK_EBUSY, "try while held: %d", rc);
  CHECK(other == NULL, "no lock on failure");
  CHECK(strstr(tokenlock_last_error(), "b.lock") != NULL, "message names the lock: %s",
        tokenlock_last_error());
  o.wait_ms = 100;
  rc = tokenlock_acquire(dir, &o, &other);
  CHECK(rc == TOKENLOCK_ETIMEDOUT, "wait while held: %d %s", rc, tokenlock_last_error());
  CHECK(strcmp(tokenlock_strerror(rc), "timed_out") == 0, "strerror %s", tokenlock_strerror(rc));
  tokenlock_release(held);
  rc = tokenlock_try_acquire(dir, NULL, &other);
  CHECK(rc == TOKENLOCK_OK, "after release: %d %s", rc, tokenlock_last_error());
  tokenlock_release(other);
}

static void refresh_and_lost(void) {
  const char *dir = path_of("c.lock");
  tokenlock_lock *lock = NULL;
  tokenlock_options o;
  char before[300], from[4400], to[4400];
  int64_t old_expiry;
  int rc;
  tokenlock_options_init(&o);
  o.lease_ms = 5000;
  CHECK(tokenlock_acquire(dir, &o, &lock) == TOKENLOCK_OK, "acquire");
  snprintf(before, sizeof before, "%s", tokenlock_token(lock));
  old_expiry = tokenlock_expiry_us(lock);
  CHECK(old_expiry < now_us() + 6 * 1000000LL, "a lease of 5 s");
  o.lease_ms = 120000;
  rc = tokenlock_refresh(lock, &o);
  CHECK(rc == TOKENLOCK_OK, "refresh: %d %s", rc, tokenlock_last_error());
  CHECK(strcmp(before, tokenlock_token(lock)) != 0, "the token was renamed");
  CHECK(tokenlock_expiry_us(lock) > old_expiry + 100 * 1000000LL, "a lease of 120 s");
  /* Freed behind our back, as a takeover and release by another would. */
  snprintf(from, sizeof from, "%s/%s", dir, tokenlock_token(lock));
  snprintf(to, sizeof to, "%s/lockfile", dir);
  CHECK(rename(from, to) == 0, "rename %s", strerror(errno));
  rc = tokenlock_refresh(lock, NULL);
  CHECK(rc == TOKENLOCK_ELOCK_LOST, "refresh after the takeover: %d", rc);
  rc = tokenlock_release(lock);
  CHECK(rc == TOKENLOCK_ELOCK_LOST, "release after the takeover: %d", rc);
  CHECK(strstr(tokenlock_last_error(), "c.lock") != NULL, "%s", tokenlock_last_error());
  CHECK(exists(to), "the lock stays free: nothing of anyone's was renamed");
}

/* The fenced commit under a lock the caller holds: in place while held, and
 * nothing written once the token was taken over. */
static void commits(void) {
  const char *dir = path_of("notes.txt.lock");
  const char *target = path_of("notes.txt");
  tokenlock_lock *lock = NULL;
  char from[4400], to[4400];
  int rc, status = 0;
  pid_t pid;
  spit(target, "old\n");
  CHECK(tokenlock_acquire(dir, NULL, &lock) == TOKENLOCK_OK, "acquire");
  rc = tokenlock_commit_file(lock, target, "new\n", 4, NULL);
  CHECK(rc == TOKENLOCK_OK, "commit: %d %s", rc, tokenlock_last_error());
  CHECK(strcmp(slurp(target), "new\n") == 0, "committed: %s", slurp(target));
  snprintf(from, sizeof from, "%s/%s", dir, tokenlock_token(lock));
  CHECK(exists(from), "still held after the commit");
  pid = fork();
  if (pid == 0) _exit(tokenlock_commit_file(lock, target, "child\n", 6, NULL) == TOKENLOCK_ENOT_OWNER ? 0 : 1);
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "a forked child's commit says not_owner");
  CHECK(tokenlock_commit_file(lock, target, NULL, 3, NULL) == TOKENLOCK_EBAD_ARGUMENT, "no data");
  CHECK(tokenlock_commit_file(NULL, target, "x", 1, NULL) == TOKENLOCK_EBAD_ARGUMENT, "no lock");
  /* Freed behind our back, as a takeover and release by another would. */
  snprintf(to, sizeof to, "%s/lockfile", dir);
  CHECK(rename(from, to) == 0, "rename %s", strerror(errno));
  rc = tokenlock_commit_file(lock, target, "late\n", 5, NULL);
  CHECK(rc == TOKENLOCK_ELOCK_LOST, "commit after the takeover: %d", rc);
  CHECK(strstr(tokenlock_last_error(), "notes.txt") != NULL, "names the file: %s",
        tokenlock_last_error());
  CHECK(strcmp(slurp(target), "new\n") == 0, "nothing written: %s", slurp(target));
  CHECK(tokenlock_release(lock) == TOKENLOCK_ELOCK_LOST, "the release says lost too");
  CHECK(exists(to), "the lock stays free: nothing of anyone's was renamed");
  CHECK(temp_files() == 0, "no temporary file left");
  snprintf(from, sizeof from, "%s/lockfile/w", dir);
  CHECK(temp_files_in(from) == 0, "none in the workspace either: %d", temp_files_in(from));
}

static void forked_child_never_releases(void) {
  const char *dir = path_of("d.lock");
  tokenlock_lock *lock = NULL;
  char held[4400];
  int status = 0;
  pid_t pid;
  CHECK(tokenlock_acquire(dir, NULL, &lock) == TOKENLOCK_OK, "acquire");
  snprintf(held, sizeof held, "%s/%s", dir, tokenlock_token(lock));
  pid = fork();
  if (pid == 0) _exit(tokenlock_release(lock) == TOKENLOCK_ENOT_OWNER ? 0 : 1);
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "the child's release says not_owner");
  CHECK(exists(held), "the parent still holds its token");
  CHECK(tokenlock_release(lock) == TOKENLOCK_OK, "the parent releases");
}

static void writes(void) {
  const char *target = path_of("page.html");
  int rc;
  tokenlock_options o;
  tokenlock_options_init(&o);
  spit(target, "old\n");
  rc = tokenlock_write_file(target, "new\n", 4, NULL);
  CHECK(rc == TOKENLOCK_OK, "write: %d %s", rc, tokenlock_last_error());
  CHECK(strcmp(slurp(target), "new\n") == 0, "replaced");
  o.sync = TOKENLOCK_SYNC_NONE;
  CHECK(tokenlock_write_file(target, "", 0, &o) == TOKENLOCK_OK, "empty write");
  CHECK(strcmp(slurp(target), "") == 0, "emptied");
  rc = tokenlock_write_file(path_of("missing/x"), "x", 1, NULL);
  CHECK(rc == TOKENLOCK_ESYSTEM && tokenlock_last_errno() == ENOENT, "missing dir: %d %d", rc,
        tokenlock_last_errno());
  CHECK(strstr(tokenlock_last_error(), "missing/x") != NULL, "names the path: %s",
        tokenlock_last_error());
  o.sync = 7;
  rc = tokenlock_write_file(target, "x", 1, &o);
  CHECK(rc == TOKENLOCK_EBAD_ARGUMENT, "bad sync: %d", rc);
  CHECK(strcmp(slurp(target), "") == 0, "untouched by refused writes");
  CHECK(temp_files() == 0, "no temporary file left");
}

struct appender {
  const char *text;
  int calls;
  int saw_missing;
};

static int append(void *arg, const char *current, size_t len, int exists_now,
                  tokenlock_buffer *next) {
  struct appender *a = (struct appender *)arg;
  char buf[1024];
  ++a->calls;
  if (!exists_now) a->saw_missing = 1;
  if (len + strlen(a->text) >= sizeof buf) return 1;
  memcpy(buf, current, len);
  memcpy(buf + len, a->text, strlen(a->text));
  return tokenlock_buffer_set(next, buf, len + strlen(a->text));
}

static int decline(void *arg, const char *current, size_t len, int exists_now,
                   tokenlock_buffer *next) {
  (void)arg, (void)current, (void)len, (void)exists_now;
  tokenlock_buffer_set(next, "never\n", 6);
  return 1;
}

static void updates(void) {
  const char *target = path_of("guestbook.txt");
  struct appender a = {"one\n", 0, 0};
  tokenlock_lock *lock = NULL;
  int rc = tokenlock_update_file(target, NULL, NULL, append, &a);
  CHECK(rc == TOKENLOCK_OK && a.calls == 1 && a.saw_missing, "first update: %d %s", rc,
        tokenlock_last_error());
  a.text = "two\n";
  a.saw_missing = 0;
  rc = tokenlock_update_file(target, NULL, NULL, append, &a);
  CHECK(rc == TOKENLOCK_OK && !a.saw_missing, "second update: %d", rc);
  CHECK(strcmp(slurp(target), "one\ntwo\n") == 0, "both appended: %s", slurp(target));
  rc = tokenlock_update_file(target, NULL, NULL, decline, NULL);
  CHECK(rc == TOKENLOCK_EABORTED, "declined: %d", rc);
  CHECK(strcmp(slurp(target), "one\ntwo\n") == 0, "nothing written when declined");
  CHECK(tokenlock_try_acquire(path_of("guestbook.txt.lock"), NULL, &lock) == TOKENLOCK_OK,
        "the lock was released: %s", tokenlock_last_error());
  tokenlock_release(lock);
  CHECK(tokenlock_update_file(target, NULL, NULL, NULL, NULL) == TOKENLOCK_EBAD_ARGUMENT,
        "no function");
  CHECK(temp_files() == 0, "no temporary file left");
}

static void counters(void) {
  const char *target = path_of("hits.count");
  uint64_t v = 0;
  int rc, i;
  pid_t pids[4];
  rc = tokenlock_increment(target, NULL, 1, NULL, &v);
  CHECK(rc == TOKENLOCK_OK && v == 1, "from nothing: %d %llu", rc, (unsigned long long)v);
  CHECK(tokenlock_increment(target, path_of("hits.count.lock"), 5, NULL, &v) == TOKENLOCK_OK &&
            v == 6,
        "by 5 with the lock named: %llu", (unsigned long long)v);
  for (i = 0; i < 4; ++i) {
    pids[i] = fork();
    if (pids[i] == 0) {
      int k;
      for (k = 0; k < 100; ++k)
        if (tokenlock_increment(target, NULL, 1, NULL, NULL) != TOKENLOCK_OK) _exit(1);
      _exit(0);
    }
  }
  for (i = 0; i < 4; ++i) {
    int status = 0;
    CHECK(waitpid(pids[i], &status, 0) == pids[i] && WIFEXITED(status) &&
              WEXITSTATUS(status) == 0,
          "incrementing process %d", i);
  }
  CHECK(strcmp(slurp(target), "406\n") == 0, "4 x 100 more, none lost: %s", slurp(target));

  spit(path_of("bad.count"), "garbage\n");
  rc = tokenlock_increment(path_of("bad.count"), NULL, 1, NULL, &v);
  CHECK(rc == TOKENLOCK_ECORRUPT_DATA, "corrupt counter: %d", rc);
  CHECK(strcmp(slurp(path_of("bad.count")), "garbage\n") == 0, "left as it was");
  CHECK(strstr(tokenlock_last_error(), "bad.count") != NULL, "%s", tokenlock_last_error());
  CHECK(temp_files() == 0, "no temporary file left");
}

/* A directory its user can write but not read (mode 0333, as upload drop
 * directories are) cannot be opened for fsync(2): each commit is made, then
 * TOKENLOCK_EDIR_SYNC_FAILED, with the count handed out. Root opens any
 * directory: the calls run in a child that is nobody. */
struct unflushable_outcome {
  int rc[3];
  uint64_t value[2];
  int fix_named[3];
};

static void untrusted_directory(void) {
  /* A lock directory every user may write is refused before anything in it
     is touched; with group sharing chosen (dir_mode 0775) a group-writable
     one of ours is used. */
  const char *dir = path_of("u.lock");
  char free_token[4300];
  tokenlock_options o;
  tokenlock_lock *lock = NULL;
  int rc;
  snprintf(free_token, sizeof free_token, "%s/lockfile", dir);
  if (mkdir(dir, 0700) != 0 || mkdir(free_token, 0700) != 0 || chmod(dir, 0777) != 0) abort();
  rc = tokenlock_acquire(dir, NULL, &lock);
  CHECK(rc == TOKENLOCK_EUNTRUSTED && lock == NULL, "0777: %d %s", rc, tokenlock_last_error());
  CHECK(strcmp(tokenlock_strerror(rc), "untrusted") == 0, "strerror %s", tokenlock_strerror(rc));
  CHECK(strstr(tokenlock_last_error(), "refusing") != NULL &&
            strstr(tokenlock_last_error(), "chmod o-w") != NULL,
        "the refusal says why and how to fix it: %s", tokenlock_last_error());
  CHECK(exists(free_token), "the token was not touched");
  if (chmod(dir, 0775) != 0) abort();
  rc = tokenlock_acquire(dir, NULL, &lock);
  CHECK(rc == TOKENLOCK_EUNTRUSTED, "0775 without group sharing: %d", rc);
  tokenlock_options_init(&o);
  o.dir_mode = 0775;
  rc = tokenlock_acquire(dir, &o, &lock);
  CHECK(rc == TOKENLOCK_OK && lock != NULL, "0775 with group sharing: %d %s", rc,
        tokenlock_last_error());
  CHECK(tokenlock_release(lock) == TOKENLOCK_OK, "release");
  o.lease_ms = 24LL * 3600 * 1000 + 1;
  rc = tokenlock_acquire(dir, &o, &lock);
  CHECK(rc == TOKENLOCK_EBAD_ARGUMENT, "a lease above 24 hours: %d", rc);
}

static void unflushable_directory(void) {
  char drop[4200], counter[4300], page[4300];
  struct unflushable_outcome out;
  int fds[2], status = 0;
  pid_t pid;
  snprintf(drop, sizeof drop, "%s", path_of("drop"));
  snprintf(counter, sizeof counter, "%s/c.count", drop);
  snprintf(page, sizeof page, "%s/page", drop);
  memset(&out, 0, sizeof out);
  if (mkdir(drop, 0700) != 0 || chmod(scratch, 0755) != 0 || chmod(drop, 0333) != 0 ||
      pipe(fds) != 0)
    abort();
  pid = fork();
  if (pid == 0) {
    int i;
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(70);
    for (i = 0; i < 3; ++i) {
      out.rc[i] = i < 2 ? tokenlock_increment(counter, NULL, 1, NULL, &out.value[i])
                        : tokenlock_write_file(page, "new\n", 4, NULL);
      out.fix_named[i] = strstr(tokenlock_last_error(), "give this user read permission") != NULL;
    }
    _exit(write(fds[1], &out, sizeof out) == (ssize_t)sizeof out ? 0 : 71);
  }
  close(fds[1]);
  CHECK(read(fds[0], &out, sizeof out) == (ssize_t)sizeof out, "the child's outcome");
  close(fds[0]);
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "the child (status %#x)", status);
  chmod(drop, 0755);
  CHECK(out.rc[0] == TOKENLOCK_EDIR_SYNC_FAILED && out.value[0] == 1 &&
            out.rc[1] == TOKENLOCK_EDIR_SYNC_FAILED && out.value[1] == 2,
        "unflushable: increments %d %llu, %d %llu", out.rc[0], (unsigned long long)out.value[0],
        out.rc[1], (unsigned long long)out.value[1]);
  CHECK(out.rc[2] == TOKENLOCK_EDIR_SYNC_FAILED, "unflushable: write %d", out.rc[2]);
  CHECK(out.fix_named[0] && out.fix_named[1] && out.fix_named[2], "unflushable: the fix named");
  CHECK(slurp(counter) && strcmp(slurp(counter), "2\n") == 0, "unflushable: both counted");
  CHECK(slurp(page) && strcmp(slurp(page), "new\n") == 0, "unflushable: new contents in place");
  CHECK(temp_files_in(drop) == 0, "unflushable: no temporary file left");
}

/* Options and failures of the file calls: a lock directory's mode, a held
 * lock (busy, timed out), an overflow and a commit that cannot rename; each
 * failure leaves the target as it was and no temporary file. */
static void file_call_failures(void) {
  const char *counter = path_of("f.count");
  const char *lockdir = path_of("f.count.lock");
  tokenlock_options o;
  tokenlock_lock *held = NULL;
  struct appender a = {"x\n", 0, 0};
  struct stat st;
  uint64_t v = 7;
  int rc;
  tokenlock_options_init(&o);
  o.dir_mode = 0700;
  o.sync = TOKENLOCK_SYNC_FILE;
  rc = tokenlock_increment(counter, NULL, 1, &o, &v);
  CHECK(rc == TOKENLOCK_OK && v == 1, "sync file: %d %llu", rc, (unsigned long long)v);
  CHECK(stat(lockdir, &st) == 0 && (st.st_mode & 0777) == 0700, "dir_mode 0700: %o",
        (unsigned)(st.st_mode & 0777));

  CHECK(tokenlock_acquire(lockdir, NULL, &held) == TOKENLOCK_OK, "hold: %s",
        tokenlock_last_error());
  o.wait_ms = 0;
  rc = tokenlock_increment(counter, NULL, 1, &o, &v);
  CHECK(rc == TOKENLOCK_EBUSY && tokenlock_last_errno() == 0, "busy: %d errno %d", rc,
        tokenlock_last_errno());
  o.wait_ms = 30;
  rc = tokenlock_increment(counter, NULL, 1, &o, &v);
  CHECK(rc == TOKENLOCK_ETIMEDOUT, "timed out: %d", rc);
  CHECK(strstr(tokenlock_last_error(), "f.count.lock") != NULL, "names the lock: %s",
        tokenlock_last_error());
  rc = tokenlock_update_file(counter, NULL, &o, append, &a);
  CHECK(rc == TOKENLOCK_ETIMEDOUT && a.calls == 0, "update behind a holder: %d", rc);
  tokenlock_release(held);
  CHECK(strcmp(slurp(counter), "1\n") == 0, "left at 1: %s", slurp(counter));

  spit(path_of("max.count"), "18446744073709551615\n");
  rc = tokenlock_increment(path_of("max.count"), NULL, 1, NULL, &v);
  CHECK(rc != TOKENLOCK_OK && strstr(tokenlock_last_error(), "max.count") != NULL,
        "overflow: %d %s", rc, tokenlock_last_error());
  CHECK(strcmp(slurp(path_of("max.count")), "18446744073709551615\n") == 0, "left at the maximum");

  /* A directory where the file goes: the commit's rename fails. */
  if (mkdir(path_of("isdir"), 0755) != 0) abort();
  rc = tokenlock_update_file(path_of("isdir"), path_of("isdir.lock"), NULL, append, &a);
  CHECK(rc == TOKENLOCK_ESYSTEM && tokenlock_last_errno() != 0, "commit over a directory: %d %s",
        rc, tokenlock_last_error());
  CHECK(stat(path_of("isdir"), &st) == 0 && S_ISDIR(st.st_mode), "the directory is left");
  CHECK(tokenlock_try_acquire(path_of("isdir.lock"), NULL, &held) == TOKENLOCK_OK,
        "the lock was released after the failure: %s", tokenlock_last_error());
  tokenlock_release(held);
  CHECK(temp_files() == 0, "no temporary file left");
}

static void bad_arguments(void) {
  tokenlock_lock *lock = (tokenlock_lock *)1;
  tokenlock_options o;
  tokenlock_options_init(&o);
  CHECK(tokenlock_acquire(NULL, NULL, &lock) == TOKENLOCK_EBAD_ARGUMENT && lock == NULL,
        "NULL lockdir");
  CHECK(tokenlock_acquire(path_of("e.lock"), NULL, NULL) == TOKENLOCK_EBAD_ARGUMENT, "NULL out");
  CHECK(tokenlock_acquire("", NULL, &lock) == TOKENLOCK_EBAD_ARGUMENT, "empty lockdir: %s",
        tokenlock_last_error());
  o.lease_ms = -5;
  CHECK(tokenlock_acquire(path_of("e.lock"), &o, &lock) == TOKENLOCK_EBAD_ARGUMENT,
        "negative lease");
  CHECK(!exists(path_of("e.lock")), "nothing created for refused calls");
  CHECK(tokenlock_increment(NULL, NULL, 1, NULL, NULL) == TOKENLOCK_EBAD_ARGUMENT, "NULL path");
  CHECK(strcmp(tokenlock_strerror(12345), "unknown") == 0, "unknown code");
}

/* Each thread sees its own last error. */
struct thread_result {
  const char *dir;
  int rc;
  char message[1024];
};

static pthread_barrier_t both_failed;

static void *fail_in_thread(void *arg) {
  struct thread_result *r = (struct thread_result *)arg;
  tokenlock_lock *lock = NULL;
  r->rc = tokenlock_try_acquire(r->dir, NULL, &lock);
  pthread_barrier_wait(&both_failed); /* both failures happened before either reads */
  snprintf(r->message, sizeof r->message, "%s", tokenlock_last_error());
  return NULL;
}

static void errors_per_thread(void) {
  tokenlock_lock *one = NULL, *two = NULL;
  struct thread_result a, b;
  pthread_t ta, tb;
  CHECK(tokenlock_acquire(path_of("t1.lock"), NULL, &one) == TOKENLOCK_OK, "t1");
  CHECK(tokenlock_acquire(path_of("t2.lock"), NULL, &two) == TOKENLOCK_OK, "t2");
  a.dir = path_of("t1.lock");
  b.dir = path_of("t2.lock");
  pthread_barrier_init(&both_failed, NULL, 2);
  pthread_create(&ta, NULL, fail_in_thread, &a);
  pthread_create(&tb, NULL, fail_in_thread, &b);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  pthread_barrier_destroy(&both_failed);
  CHECK(a.rc == TOKENLOCK_EBUSY && b.rc == TOKENLOCK_EBUSY, "both busy");
  CHECK(strstr(a.message, "t1.lock") && !strstr(a.message, "t2.lock"), "thread 1: %s", a.message);
  CHECK(strstr(b.message, "t2.lock") && !strstr(b.message, "t1.lock"), "thread 2: %s", b.message);
  tokenlock_release(one);
  tokenlock_release(two);
}

/* tokenlock_open: a spec names the lock; a lock directory's lock from it
 * works with every call, its fence is 0; a bad spec, or a server this
 * library lacks, is refused without a lock and without the password. */
static void open_by_spec(void) {
  const char *dir = path_of("spec.lock");
  tokenlock_options o;
  tokenlock_options_init(&o);
  o.wait_ms = 0;
  o.lease_ms = 5000;
  tokenlock_lock *lock = NULL, *other = NULL;
  int rc = tokenlock_open(dir, &o, &lock);
  CHECK(rc == TOKENLOCK_OK && lock != NULL, "open a directory: %d %s", rc, tokenlock_last_error());
  if (!lock) return;
  CHECK(strncmp(tokenlock_token(lock), "lockfile.", 9) == 0, "token %s", tokenlock_token(lock));
  CHECK(tokenlock_fence(lock) == 0, "a lock directory has no fence");
  CHECK(tokenlock_expiry_us(lock) < now_us() + 6 * 1000000LL, "a lease of 5 s");
  rc = tokenlock_open(dir, &o, &other);
  CHECK(rc == TOKENLOCK_EBUSY && other == NULL, "held: busy: %d", rc);
  CHECK(tokenlock_acquire(dir, &o, &other) == TOKENLOCK_EBUSY, "the same lock as tokenlock_acquire's");
  spit(path_of("spec.txt"), "old\n");
  rc = tokenlock_commit_file(lock, path_of("spec.txt"), "new\n", 4, NULL);
  CHECK(rc == TOKENLOCK_OK, "commit under it: %d %s", rc, tokenlock_last_error());
  rc = tokenlock_refresh(lock, NULL);
  CHECK(rc == TOKENLOCK_OK, "refresh: %d %s", rc, tokenlock_last_error());
  rc = tokenlock_release(lock);
  CHECK(rc == TOKENLOCK_OK, "release: %d %s", rc, tokenlock_last_error());
  char *got = slurp(path_of("spec.txt"));
  CHECK(got && strcmp(got, "new\n") == 0, "committed: %s", got ? got : "(none)");
  CHECK(exists(path_of("spec.lock/lockfile")), "released: lockfile is back");

  const char *bad[] = {"", "ftp://h/x#n", "redis://:hunter2@127.0.0.1:1/0",
                       "redis://:hunter2#x@127.0.0.1:1/0#n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    rc = tokenlock_open(bad[i], &o, &other);
    CHECK(rc == TOKENLOCK_EBAD_ARGUMENT && other == NULL, "bad spec %s: %d", bad[i], rc);
    CHECK(strstr(tokenlock_last_error(), "hunter2") == NULL, "no password: %s", tokenlock_last_error());
  }
  CHECK(tokenlock_open(NULL, &o, &other) == TOKENLOCK_EBAD_ARGUMENT, "NULL spec");
  /* Port 1 refuses: a library with etcd says so (a system error); one
   * without it says the backend is missing. Neither shows the password. */
  rc = tokenlock_open("etcd://root:hunter2@127.0.0.1:1#n", &o, &other);
  CHECK((rc == TOKENLOCK_EBACKEND_UNAVAILABLE || rc == TOKENLOCK_ESYSTEM) && other == NULL,
        "an etcd spec: %d %s", rc, tokenlock_last_error());
  if (rc == TOKENLOCK_EBACKEND_UNAVAILABLE) {
    CHECK(strcmp(tokenlock_strerror(rc), "backend_unavailable") == 0, "strerror %s", tokenlock_strerror(rc));
    CHECK(strstr(tokenlock_last_error(), "TOKENLOCK_ETCD") != NULL, "names the build option: %s",
          tokenlock_last_error());
  }
  CHECK(strstr(tokenlock_last_error(), "hunter2") == NULL, "no password: %s", tokenlock_last_error());
}

/* tokenlock_update_file_spec and tokenlock_increment_spec: the updates
 * under a lock named by a spec (a lock directory's here; the servers' go
 * through the same calls of the C++ library, tested on Redis and etcd in
 * tests/contract). The lock is free afterwards and nothing is left. */
static void updates_by_spec(void) {
  char target[4200], dir[4200], hits[4200]; /* path_of's buffers are reused */
  snprintf(target, sizeof target, "%s", path_of("spec-book.txt"));
  snprintf(dir, sizeof dir, "%s", path_of("spec-book.lock"));
  snprintf(hits, sizeof hits, "%s", path_of("spec-hits.count"));
  struct appender a = {"one\n", 0, 0};
  tokenlock_options o;
  tokenlock_lock *lock = NULL;
  uint64_t v = 0;
  int rc = tokenlock_update_file_spec(target, dir, NULL, append, &a);
  CHECK(rc == TOKENLOCK_OK && a.calls == 1 && a.saw_missing, "first update: %d %s", rc,
        tokenlock_last_error());
  a.text = "two\n";
  rc = tokenlock_update_file_spec(target, dir, NULL, append, &a);
  CHECK(rc == TOKENLOCK_OK && strcmp(slurp(target), "one\ntwo\n") == 0, "second update: %d %s",
        rc, tokenlock_last_error());
  rc = tokenlock_update_file_spec(target, dir, NULL, decline, NULL);
  CHECK(rc == TOKENLOCK_EABORTED && strcmp(slurp(target), "one\ntwo\n") == 0, "declined: %d", rc);
  rc = tokenlock_increment_spec(hits, path_of("spec-hits.lock"), 3, NULL, &v);
  CHECK(rc == TOKENLOCK_OK && v == 3, "count 3: %d %llu", rc, (unsigned long long)v);
  rc = tokenlock_increment_spec(hits, path_of("spec-hits.lock"), 2, NULL, &v);
  CHECK(rc == TOKENLOCK_OK && v == 5, "count 5: %d %llu", rc, (unsigned long long)v);

  /* Held by another: busy with no wait, nothing written. */
  tokenlock_options_init(&o);
  o.wait_ms = 0;
  CHECK(tokenlock_open(dir, &o, &lock) == TOKENLOCK_OK, "hold it: %s", tokenlock_last_error());
  rc = tokenlock_update_file_spec(target, dir, &o, append, &a);
  CHECK(rc == TOKENLOCK_EBUSY, "held: busy: %d %s", rc, tokenlock_last_error());
  rc = tokenlock_increment_spec(hits, dir, 1, &o, &v);
  CHECK(rc == TOKENLOCK_EBUSY && v == 5, "held: no count: %d %llu", rc, (unsigned long long)v);
  tokenlock_release(lock);
  CHECK(strcmp(slurp(target), "one\ntwo\n") == 0, "nothing written while held");

  CHECK(tokenlock_update_file_spec(target, NULL, NULL, append, &a) == TOKENLOCK_EBAD_ARGUMENT,
        "NULL spec");
  CHECK(tokenlock_increment_spec(target, "ftp://h/x#n", 1, NULL, &v) == TOKENLOCK_EBAD_ARGUMENT,
        "a spec of no backend");
  rc = tokenlock_increment_spec(hits, "redis://:hunter2@127.0.0.1:1/0#n",
                                1, &o, &v);
  CHECK((rc == TOKENLOCK_EBACKEND_UNAVAILABLE || rc == TOKENLOCK_ESYSTEM) && v == 5,
        "a Redis spec with no server: %d %s", rc, tokenlock_last_error());
  CHECK(strstr(tokenlock_last_error(), "hunter2") == NULL, "no password: %s", tokenlock_last_error());
  CHECK(tokenlock_try_acquire(dir, NULL, &lock) == TOKENLOCK_OK, "free: %s", tokenlock_last_error());
  tokenlock_release(lock);
  CHECK(temp_files() == 0, "no temporary file left");
}

/* Shared holders and a semaphore through the C options; tokenlock_holders
 * lists them; a commit under a shared hold writes nothing. */
static void shared_and_slots(void) {
  const char *dir = path_of("shared.lock");
  const char *target = path_of("shared.txt");
  tokenlock_options o;
  tokenlock_lock *a = NULL, *b = NULL, *w = (tokenlock_lock *)1;
  tokenlock_holder list[4];
  size_t n = 99;
  int rc;
  tokenlock_options_init(&o);
  CHECK(o.mode == -1 && o.slots == -1, "init sets mode and slots to the defaults");
  o.mode = TOKENLOCK_SHARED;
  CHECK(tokenlock_acquire(dir, &o, &a) == TOKENLOCK_OK, "reader a: %s", tokenlock_last_error());
  CHECK(tokenlock_acquire(dir, &o, &b) == TOKENLOCK_OK, "reader b: %s", tokenlock_last_error());
  CHECK(tokenlock_mode(a) == TOKENLOCK_SHARED && tokenlock_mode(NULL) == TOKENLOCK_EXCLUSIVE,
        "tokenlock_mode");
  rc = tokenlock_try_acquire(dir, NULL, &w);
  CHECK(rc == TOKENLOCK_EBUSY && w == NULL, "a writer beside readers: %d", rc);
  rc = tokenlock_holders(dir, NULL, list, 4, &n);
  CHECK(rc == TOKENLOCK_OK && n == 2, "two holders: %d %zu %s", rc, n, tokenlock_last_error());
  CHECK(n == 2 && list[0].mode == TOKENLOCK_SHARED && list[1].mode == TOKENLOCK_SHARED &&
            strncmp(list[0].id, "s.", 2) == 0 && list[0].expiry_us > now_us(),
        "both shared, listed by their entries: %s", list[0].id);
  spit(target, "before\n");
  rc = tokenlock_commit_file(a, target, "x", 1, NULL);
  CHECK(rc == TOKENLOCK_EBAD_ARGUMENT, "a commit under a shared hold: %d", rc);
  CHECK(strcmp(slurp(target), "before\n") == 0, "the target is intact");
  CHECK(temp_files() == 0, "no temporary file left");
  CHECK(tokenlock_release(a) == TOKENLOCK_OK && tokenlock_release(b) == TOKENLOCK_OK, "released");
  CHECK(tokenlock_holders(dir, NULL, NULL, 0, &n) == TOKENLOCK_OK && n == 0, "free: %zu", n);
  tokenlock_options_init(&o);
  o.slots = 1;
  CHECK(tokenlock_acquire(dir, &o, &a) == TOKENLOCK_OK, "the one slot");
  rc = tokenlock_try_acquire(dir, &o, &b);
  CHECK(rc == TOKENLOCK_EBUSY, "a second holder of one slot: %d", rc);
  tokenlock_release(a);
  o.slots = 1000000;
  rc = tokenlock_acquire(dir, &o, &a);
  CHECK(rc == TOKENLOCK_EBAD_ARGUMENT && a == NULL, "slots above 999999: %d", rc);
  o.slots = -1;
  o.mode = 7;
  CHECK(tokenlock_acquire(dir, &o, &a) == TOKENLOCK_EBAD_ARGUMENT, "an unknown mode");
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: c_api_test SCRATCH_DIR\n");
    return 64;
  }
  snprintf(scratch, sizeof scratch, "%s", argv[1]);
  CHECK(strcmp(tokenlock_version(), EXPECTED_VERSION) == 0, "version %s", tokenlock_version());
  lock_and_release();
  busy_and_timeout();
  refresh_and_lost();
  untrusted_directory();
  forked_child_never_releases();
  writes();
  commits();
  updates();
  counters();
  unflushable_directory();
  file_call_failures();
  bad_arguments();
  errors_per_thread();
  open_by_spec();
  updates_by_spec();
  shared_and_slots();
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
