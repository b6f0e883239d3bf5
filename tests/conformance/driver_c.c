/* The conformance driver of the C API (tokenlock/tokenlock.h): the line
 * protocol of tests/conformance/README.md on stdin and stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenlock/tokenlock.h"

#define MAX_WORDS 8

static tokenlock_lock *handle;

static void answer(int rc, const char *value) {
  if (rc == TOKENLOCK_ESYSTEM)
    printf("error system %d\n", tokenlock_last_errno());
  else if (rc != 0)
    printf("error %s\n", tokenlock_strerror(rc));
  else if (value)
    printf("ok %s\n", value);
  else
    printf("ok\n");
  fflush(stdout);
}

static tokenlock_options options(const char *wait_ms, const char *lease_ms) {
  tokenlock_options o;
  tokenlock_options_init(&o);
  /* As an application reads its configuration (the command reads the same
   * variables). */
  const char *mode = getenv("TOKENLOCK_DIR_MODE"), *group = getenv("TOKENLOCK_GROUP");
  if (mode && *mode) o.dir_mode = (int)strtol(mode, NULL, 8);
  if (group && *group) o.group = group;
  if (wait_ms) o.wait_ms = strtoll(wait_ms, NULL, 10);
  if (lease_ms) o.lease_ms = strtoll(lease_ms, NULL, 10);
  return o;
}

static int pause_in_update;

static int update_fn(void *arg, const char *current, size_t current_len, int exists,
                     tokenlock_buffer *next) {
  char go[64];
  (void)current, (void)current_len, (void)exists;
  if (pause_in_update) {
    /* The conformance runner moves the lock while we hold still. */
    printf("paused\n");
    fflush(stdout);
    if (!fgets(go, sizeof go, stdin)) return 1;
  }
  return tokenlock_buffer_set(next, arg, strlen(arg));
}

static void count(int rc, uint64_t value) {
  char text[32];
  snprintf(text, sizeof text, "%llu", (unsigned long long)value);
  answer(rc, rc == 0 ? text : NULL);
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "ok free", or one word per holder, sorted: exclusive, shared, slot/N, waiting. */
static void holders(const char *lockdir) {
  tokenlock_holder list[16];
  char words[16][32], out[600] = "ok ";
  const char *sorted[16];
  size_t n = 0, i;
  int rc = tokenlock_holders(lockdir, NULL, list, 16, &n);
  if (rc != 0 || n == 0) {
    answer(rc, rc == 0 ? "free" : NULL);
    return;
  }
  for (i = 0; i < n && i < 16; ++i) {
    if (list[i].waiting_writer) snprintf(words[i], sizeof words[i], "waiting");
    else if (list[i].mode == TOKENLOCK_EXCLUSIVE) snprintf(words[i], sizeof words[i], "exclusive");
    else if (list[i].slots) snprintf(words[i], sizeof words[i], "slot/%d", list[i].slots);
    else snprintf(words[i], sizeof words[i], "shared");
    sorted[i] = words[i];
  }
  qsort(sorted, i, sizeof sorted[0], by_name);
  for (n = 0; n < i; ++n) {
    if (n) strcat(out, ",");
    strcat(out, sorted[n]);
  }
  printf("%s\n", out);
  fflush(stdout);
}

static void serve(char **w, int n) {
  tokenlock_options o = options(n > 2 ? w[2] : NULL, n > 3 ? w[3] : NULL);
  uint64_t value = 0;
  if (!handle && (!strcmp(w[0], "release") || !strcmp(w[0], "refresh") || !strcmp(w[0], "commit"))) {
    /* tokenlock_release() freed it: a call on it would use freed memory. */
    printf("unsupported %s: no handle (the C API frees it at release)\n", w[0]);
    fflush(stdout);
  } else if (!strcmp(w[0], "ping")) {
    answer(0, NULL);
  } else if (!strcmp(w[0], "acquire") && (n == 4 || n == 5)) {
    if (n == 5) {
      o.mode = TOKENLOCK_SHARED;
      if (!strncmp(w[4], "slots=", 6)) o.slots = atoi(w[4] + 6);
    }
    answer(tokenlock_acquire(w[1], &o, &handle), NULL);
  } else if (!strcmp(w[0], "holders") && n == 2) {
    holders(w[1]);
  } else if (!strcmp(w[0], "release")) {
    int rc = tokenlock_release(handle);
    handle = NULL; /* freed whatever it returned */
    answer(rc, NULL);
  } else if (!strcmp(w[0], "refresh") && n == 2) {
    o = options(NULL, w[1]);
    answer(tokenlock_refresh(handle, &o), NULL);
  } else if (!strcmp(w[0], "commit") && n == 3) {
    answer(tokenlock_commit_file(handle, w[1], w[2], strlen(w[2]), NULL), NULL);
  } else if (!strcmp(w[0], "update") && n >= 3) {
    pause_in_update = n > 3 && !strcmp(w[3], "pause");
    o = options("0", NULL);
    answer(tokenlock_update_file(w[1], NULL, &o, update_fn, w[2]), NULL);
  } else if (!strcmp(w[0], "increment") && n == 3) {
    o = options(w[2], NULL);
    int rc = tokenlock_increment(w[1], NULL, 1, &o, &value);
    count(rc, value);
  } else if (!strcmp(w[0], "write") && n == 3) {
    answer(tokenlock_write_file(w[1], w[2], strlen(w[2]), NULL), NULL);
  } else {
    printf("unsupported %s: not in the C API\n", w[0]);
    fflush(stdout);
  }
}

int main(void) {
  char line[4096];
  while (fgets(line, sizeof line, stdin)) {
    char *w[MAX_WORDS];
    int n = 0;
    for (char *t = strtok(line, " \n"); t && n < MAX_WORDS; t = strtok(NULL, " \n")) w[n++] = t;
    if (n == 0 || !strcmp(w[0], "quit")) break;
    serve(w, n);
  }
  return 0;
}
