/* tokenlock/tokenlock.h — the C interface to tokenlock.
 *
 * Purpose
 *   The rename-token lock, atomic writes and the fenced read-modify-write
 *   for C programs (CGI programs, tools) and for other languages' foreign
 *   function interfaces (Python's ctypes, PHP's FFI, Perl's FFI modules).
 *   It is a thin layer over the C++ library: the same lock directory, the
 *   same protocol (docs/protocol.md), the same messages. C99; no C++
 *   exception ever crosses it.
 *
 * Calling sequence
 *     tokenlock_lock *lock;
 *     if (tokenlock_acquire("/srv/app/data/guestbook.lock", NULL, &lock) != 0) {
 *       fprintf(stderr, "%s\n", tokenlock_last_error());
 *       return 1;
 *     }
 *     ... work on what the lock guards ...
 *     if (tokenlock_release(lock) != 0)    // frees `lock` whatever it returns
 *       fprintf(stderr, "%s\n", tokenlock_last_error());
 *
 *     uint64_t hits;
 *     tokenlock_increment("/srv/app/data/hits.count", NULL, 1, NULL, &hits);
 *
 *   Options: NULL means the defaults; otherwise fill a tokenlock_options
 *   with tokenlock_options_init() and change what you need.
 *
 * Errors
 *   Every fallible call returns 0 on success or one of the TOKENLOCK_E*
 *   codes below; TOKENLOCK_ESYSTEM means a system call failed, and
 *   tokenlock_last_errno() says which errno. tokenlock_last_error() returns
 *   the full message of the calling thread's last failure — the path, the
 *   step, the cause and, where known, the fix — the same text the C++
 *   library and the tokenlock command print. A success does not clear it.
 *
 * Thread safety
 *   Every function may be called from any thread. A tokenlock_lock belongs
 *   to one thread at a time. The error message and errno are kept per
 *   thread. A forked child never releases its parent's lock: its
 *   tokenlock_release() fails with TOKENLOCK_ENOT_OWNER and leaves the
 *   parent's token alone.
 *
 * Linking
 *   With the static library and a C compiler, add the C++ runtime:
 *   `cc prog.c $(pkg-config --cflags --libs tokenlock)`. The shared object
 *   libtokenlock_c.so carries everything it needs (C++ runtime and Boost
 *   linked in) and exports only these functions: it is the one to load
 *   through an FFI on a host that has no Boost.
 */
#ifndef TOKENLOCK_TOKENLOCK_H
#define TOKENLOCK_TOKENLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TOKENLOCK_C_API __attribute__((visibility("default")))
#else
#define TOKENLOCK_C_API
#endif

/* Raised when the interface changes in a way a binding must notice. */
#define TOKENLOCK_C_API_VERSION 2

/* Return codes. The values 1..13 equal tokenlock::errc (errors.hpp). */
enum {
  TOKENLOCK_OK = 0,
  TOKENLOCK_EBUSY = 1,            /* held by another; one attempt only (wait 0) */
  TOKENLOCK_ETIMEDOUT = 2,        /* still held when the wait budget ran out */
  TOKENLOCK_ELOCK_LOST = 3,       /* our token was taken over: we no longer hold it */
  TOKENLOCK_ETOKEN_MISSING = 4,   /* the lock directory holds no token: fix by hand */
  TOKENLOCK_ELOCK_CORRUPT = 5,    /* two tokens or a broken name: fix by hand */
  TOKENLOCK_ECORRUPT_DATA = 6,    /* a counter file holds something else; left as it is */
  TOKENLOCK_EBAD_ARGUMENT = 7,    /* an unusable argument (NULL, empty path, bad option) */
  TOKENLOCK_ENOT_OWNER = 8,       /* released already, or inherited across fork */
  TOKENLOCK_EDIR_SYNC_FAILED = 9, /* written and renamed, but the directory sync failed */
  TOKENLOCK_ENOT_FENCED = 10,     /* require_fence and the commit could not be fenced */
  TOKENLOCK_ESTALE_DATA = 11,     /* a network filesystem served an old version */
  TOKENLOCK_ESERVER = 12,         /* a lock server answered an error */
  TOKENLOCK_ENOT_REPLICATED = 13, /* replicas did not acknowledge a grant */
  TOKENLOCK_EUNTRUSTED = 14,      /* another user could change the lock directory */
  TOKENLOCK_EBACKEND_UNAVAILABLE = 15, /* tokenlock_open: this build has no such backend */
  TOKENLOCK_ENOT_SUPPORTED = 16,  /* a shared lock where holders leave owner marks (GlusterFS) */
  TOKENLOCK_EABORTED = 50,        /* the update callback declined: nothing written */
  TOKENLOCK_ESYSTEM = 100,        /* a system call failed: see tokenlock_last_errno() */
  TOKENLOCK_ENOMEM = 101          /* out of memory */
};

/* Durability of a write (tokenlock_options.sync). */
enum {
  TOKENLOCK_SYNC_NONE = 0,        /* rename only: atomic for readers, not across power loss */
  TOKENLOCK_SYNC_FILE = 1,        /* fsync the new file before the rename */
  TOKENLOCK_SYNC_FILE_AND_DIR = 2 /* also fsync the directory after it (the default) */
};

/* How a lock is held (tokenlock_options.mode): docs/protocol.md, Shared
 * locks and semaphores. */
enum {
  TOKENLOCK_EXCLUSIVE = 0, /* one holder at a time (the default) */
  TOKENLOCK_SHARED = 1     /* held together with other shared holders, never beside an
                            * exclusive one; a waiting exclusive holder bars new ones */
};

/* Settings for a call; -1 in a field means the library's default (NULL for
 * `group`). Since 0.3.0 the structure ends with `slots`: a program built
 * against an older header must be rebuilt (tokenlock_version() says which
 * library is loaded). */
typedef struct tokenlock_options {
  int64_t wait_ms;           /* wait for a busy lock (10000); 0: one attempt */
  int64_t lease_ms;          /* lease of a token (60000) */
  int64_t legacy_timeout_ms; /* age at which a legacy "lockfile<seconds>" token is stale (60000) */
  int dir_mode;              /* mode of a lock directory that acquire creates (0755) */
  int sync;                  /* TOKENLOCK_SYNC_* for writes (TOKENLOCK_SYNC_FILE_AND_DIR) */
  const char *group;         /* the one group the lock is shared with, by name or decimal gid
                              * (NULL: none; the caller must be a member, else
                              * TOKENLOCK_EBAD_ARGUMENT): docs/security.md, Who is trusted */
  int mode;                  /* TOKENLOCK_EXCLUSIVE (the default) or TOKENLOCK_SHARED */
  int slots;                 /* a semaphore: at most `slots` holders at once (1 to 999999),
                              * each with its own lease; implies TOKENLOCK_SHARED. Every
                              * user of the lock must give the same number. -1: none */
} tokenlock_options;

/* Sets every field to -1 (the defaults), and `group` to NULL. */
TOKENLOCK_C_API void tokenlock_options_init(tokenlock_options *options);

/* ---- the lock -------------------------------------------------------------- */

typedef struct tokenlock_lock tokenlock_lock;

/* Acquires the lock directory `lockdir` (created if missing), waiting up to
 * options->wait_ms. On success *out is a held lock, to be given back with
 * tokenlock_release(). On failure *out is NULL: TOKENLOCK_ETIMEDOUT (or
 * TOKENLOCK_EBUSY with wait 0) when another holds it, otherwise the error. */
TOKENLOCK_C_API int tokenlock_acquire(const char *lockdir, const tokenlock_options *options,
                                      tokenlock_lock **out);

/* One attempt: as tokenlock_acquire() with wait 0. */
TOKENLOCK_C_API int tokenlock_try_acquire(const char *lockdir, const tokenlock_options *options,
                                          tokenlock_lock **out);

/* Frees the lock and frees `lock` (also when it fails; NULL is ignored).
 * TOKENLOCK_ELOCK_LOST: the token had been taken over, so whatever was
 * done under it may have overlapped with the new holder. Any other
 * failure leaves the token held until its lease ends (or its owner, this
 * process, is gone). */
TOKENLOCK_C_API int tokenlock_release(tokenlock_lock *lock);

/* Starts a new lease of options->lease_ms (the acquire's lease when
 * options is NULL) from now. TOKENLOCK_ELOCK_LOST: taken over; `lock`
 * must still be given to tokenlock_release(), which frees it, renames
 * nothing, and returns TOKENLOCK_ELOCK_LOST again. */
TOKENLOCK_C_API int tokenlock_refresh(tokenlock_lock *lock, const tokenlock_options *options);

/* The token's name in the lock directory ("lockfile.<expiry>.<owner>"), valid
 * until the next refresh or release of `lock`; for a Redis or etcd lock
 * (tokenlock_open), the grant's owner id. */
TOKENLOCK_C_API const char *tokenlock_token(const tokenlock_lock *lock);

/* When the lease ends, in microseconds since the Unix epoch. */
TOKENLOCK_C_API int64_t tokenlock_expiry_us(const tokenlock_lock *lock);

/* TOKENLOCK_SHARED for a shared hold or a semaphore's slot (which has no
 * fence: tokenlock_commit_file refuses it), TOKENLOCK_EXCLUSIVE otherwise
 * (also for NULL). */
TOKENLOCK_C_API int tokenlock_mode(const tokenlock_lock *lock);

/* One holder of a lock (tokenlock_holders). */
typedef struct tokenlock_holder {
  char id[256];       /* what tokenlock_adopt-style tools take: a token, a share entry
                       * ("s.<...>") or a server grant's owner; cut short (and still
                       * NUL-terminated) if longer */
  int mode;           /* TOKENLOCK_EXCLUSIVE or TOKENLOCK_SHARED */
  int slots;          /* the semaphore's size; 0 when none */
  int waiting_writer; /* 1: not a holder but an exclusive waiter that bars new shared ones */
  int stale;          /* 1: its lease ended or its process is gone */
  int64_t expiry_us;  /* when its lease ends, microseconds since the epoch */
} tokenlock_holder;

/* Who holds the lock `spec` names (a lock directory's path, or a server
 * spec as for tokenlock_open): up to `capacity` holders into `out`, and
 * their number, which may be more, into *count (0: free). Like
 * tokenlock_open, it is in tokenlock::open (libtokenlock_c.so has it). */
TOKENLOCK_C_API int tokenlock_holders(const char *spec, const tokenlock_options *options,
                                      tokenlock_holder *out, size_t capacity, size_t *count);

/* ---- a lock of any backend ------------------------------------------------- */

/* Acquires the lock that `spec` names, waiting up to options->wait_ms (0:
 * one attempt, TOKENLOCK_EBUSY): a lock directory's path, or a lock NAME in
 * Redis (redis://[:PASSWORD@]HOST[:PORT][/DB]#NAME, unix:///SOCKET#NAME) or
 * etcd (etcd[s]://HOST:PORT[,HOST:PORT...]#NAME); docs/api.md has the
 * format. *out is then a held lock for tokenlock_refresh(),
 * tokenlock_token() (the grant's id: a token name, or a Redis or etcd owner
 * id), tokenlock_expiry_us(), tokenlock_fence(), tokenlock_commit_file()
 * and tokenlock_release(). lease_ms,
 * legacy_timeout_ms, dir_mode and group apply as for tokenlock_acquire()
 * (the last three to lock directories). TOKENLOCK_EBAD_ARGUMENT for a spec
 * that is none of these; TOKENLOCK_EBACKEND_UNAVAILABLE when the library
 * was built without that backend (libtokenlock_c.so has lock directories
 * only). Messages never show a password. A C program that calls it links
 * tokenlock::open (CMake) rather than the core library. */
TOKENLOCK_C_API int tokenlock_open(const char *spec, const tokenlock_options *options,
                                   tokenlock_lock **out);

/* The fencing token of a Redis or etcd lock (strictly increasing per lock);
 * 0 for a lock directory's, which has none. */
TOKENLOCK_C_API uint64_t tokenlock_fence(const tokenlock_lock *lock);

/* ---- atomic writes and updates ---------------------------------------------- */

/* Replaces `path` with `len` bytes of `data` atomically: readers see the old
 * or the new contents, never a mixture; on failure the file is untouched
 * and no temporary file is left. options->sync sets the durability. */
TOKENLOCK_C_API int tokenlock_write_file(const char *path, const void *data, size_t len,
                                         const tokenlock_options *options);

/* The fenced commit under a lock the caller holds: writes `len` bytes of
 * `data` to a temporary file in the held token's workspace and renames it
 * over `path` through the token's current name (docs/atomic-writes.md).
 * Under a Redis or etcd lock (tokenlock_open) it claims the entry of the
 * fence directory PATH.fence for the lock's fence first and commits through
 * that entry (docs/redis.md, The file fence); the caller's own read of
 * `path` came before that claim, so an older holder's late commit in
 * between is overwritten: use tokenlock_update_file_spec() to read and
 * write under one fence. The lock stays held; release it afterwards.
 * Nothing is written when: TOKENLOCK_ELOCK_LOST, the token was taken over
 * or a newer holder claimed the fence entry (the lock's release then says
 * so too); TOKENLOCK_ENOT_FENCED, the lock directory and `path` are on
 * different filesystems (tokenlock_update_file commits there with a
 * checked fallback); TOKENLOCK_ENOT_OWNER, `lock` was inherited through
 * fork(). TOKENLOCK_EDIR_SYNC_FAILED: committed, but the directory flush
 * options->sync asked for failed; do not repeat the commit. */
TOKENLOCK_C_API int tokenlock_commit_file(tokenlock_lock *lock, const char *path,
                                          const void *data, size_t len,
                                          const tokenlock_options *options);

/* Where an update callback puts the new contents. */
typedef struct tokenlock_buffer tokenlock_buffer;

/* Copies `len` bytes of `data` into `buffer` (replacing what it held). */
TOKENLOCK_C_API int tokenlock_buffer_set(tokenlock_buffer *buffer, const void *data, size_t len);

/* The update callback: `current` is the file's contents (`exists` is 0
 * and current_len 0 when it does not exist), valid during the call. It sets
 * the new contents with tokenlock_buffer_set() and returns 0 to commit, or
 * non-zero to write nothing (tokenlock_update_file then returns
 * TOKENLOCK_EABORTED). Runs with the lock held: keep it short, or give a
 * lease that covers it. */
typedef int (*tokenlock_update_fn)(void *arg, const char *current, size_t current_len,
                                   int exists, tokenlock_buffer *next);

/* Lock `lockdir` (NULL: path + ".lock"), read `path`, call `fn`, write its
 * result atomically and fenced through the held token, unlock. If the lock
 * was taken over meanwhile, nothing is written (TOKENLOCK_ELOCK_LOST). */
TOKENLOCK_C_API int tokenlock_update_file(const char *path, const char *lockdir,
                                          const tokenlock_options *options,
                                          tokenlock_update_fn fn, void *arg);

/* Adds `by` to the decimal counter in `path` (a missing file counts as 0)
 * under the lock `lockdir` (NULL: path + ".lock") and sets *value (may be
 * NULL) to the new count. A file that holds anything but one unsigned
 * decimal and a newline is left as it is: TOKENLOCK_ECORRUPT_DATA. With
 * TOKENLOCK_EDIR_SYNC_FAILED the count was made and *value is set too. */
TOKENLOCK_C_API int tokenlock_increment(const char *path, const char *lockdir, uint64_t by,
                                        const tokenlock_options *options, uint64_t *value);

/* tokenlock_update_file() and tokenlock_increment() under the lock that
 * `spec` names, as tokenlock_open() reads it (a lock directory's path, or
 * redis://...#NAME, etcd://...#NAME), acquired for the update and released
 * after it. A lock directory's commit is fenced through its token, a Redis
 * or etcd lock's through the fence directory PATH.fence beside the file
 * (docs/redis.md, The file fence). Errors as those two calls and
 * tokenlock_open() (TOKENLOCK_EBAD_ARGUMENT for a bad spec,
 * TOKENLOCK_EBACKEND_UNAVAILABLE for a backend this library lacks); a C
 * program that calls them links tokenlock::open. */
TOKENLOCK_C_API int tokenlock_update_file_spec(const char *path, const char *spec,
                                               const tokenlock_options *options,
                                               tokenlock_update_fn fn, void *arg);
TOKENLOCK_C_API int tokenlock_increment_spec(const char *path, const char *spec, uint64_t by,
                                             const tokenlock_options *options, uint64_t *value);

/* ---- errors and version ------------------------------------------------------ */

/* The calling thread's last failure message; "" before the first. Valid
 * until this thread's next failing call. */
TOKENLOCK_C_API const char *tokenlock_last_error(void);

/* The errno of the calling thread's last TOKENLOCK_ESYSTEM failure (0 when
 * the last failure was not a system call's). */
TOKENLOCK_C_API int tokenlock_last_errno(void);

/* A short name for a return code ("busy", "lock_lost", "system", ...); never
 * NULL: "unknown" for a code not listed above. It reads the library's one
 * table of names, the same that the C++ tokenlock::error_name() reads
 * (tokenlock/errors.hpp, Names), so a code and the C++ error it stands for
 * have one name; only "aborted" (TOKENLOCK_EABORTED) is the C interface's
 * alone. */
TOKENLOCK_C_API const char *tokenlock_strerror(int code);

/* The library's version, "MAJOR.MINOR.PATCH". */
TOKENLOCK_C_API const char *tokenlock_version(void);

#ifdef __cplusplus
}
#endif

#endif /* TOKENLOCK_TOKENLOCK_H */
