/* The rename-token lock of docs/protocol.md, for spin.
 *
 * The lock directory is the set of names present in it (`present`): name 0
 * is "lockfile" (the lock is free), names 1..K-1 are tokens. rename(2) is
 * one atomic step that moves one present name to one absent name, and fails
 * when its source is gone. Nothing in the protocol looks inside a name but
 * the lease and owner it carries, and names are only ever compared for
 * equality, so two abstractions keep the search finite without losing a
 * behaviour:
 *  - a fresh name is the lowest one that neither the directory nor any
 *    process refers to. Renaming to it cannot be told apart from renaming to
 *    a never-used name, and processes can run forever;
 *  - time is a flag per token, "lease ended", that the environment may set at
 *    any moment on any present token. That covers every clock, every stall
 *    of its holder and every skew allowance; it also lets two leases end in
 *    either order, which is more than real clocks do and only makes the
 *    check stricter.
 * Any process may crash at any step (a ghost `dead` flag lets same-host
 * takers see it) and stall between any two steps.
 *
 * Checked, in every reachable state:
 *  1. once created, the directory holds exactly one name;
 *  2. a takeover renames only the token it observed, and only while that
 *     token is stale;
 *  3. a release, refresh or commit through a token succeeds only for the
 *     process that owns that token now; a process whose token was taken
 *     over never succeeds at any of them again (the fence);
 *  4. no update is lost: a commit succeeds only if nobody committed since
 *     the committing process read the data;
 *  5. no two processes believe they hold the lock with a lease that has not
 *     ended.
 * With -DUNFENCED the commit is the unfenced one (check ownership by a
 * refresh rename, then rename a temp file beside the target in a second
 * step); spin must then find property 4 broken. */

#ifndef N
#define N        3    /* processes: spin -DN=4 for four */
#endif
#define K        (2 * N + 2)   /* lockfile, the token, two names per process */
#define FREE     0
#define NONE     255

bool present[K];
bool created;
bool ended[K];        /* the lease carried by this name has ended */
byte owner[K];
bool dead[N];
bool lost[N];         /* ghost: my token was taken over */
bool holds[N];        /* ghost: I believe I hold the lock (only I change it) */
bool stale_read[N];   /* ghost: someone committed since I read the data */
byte mine[N];         /* the token I believe is mine, or NONE */
byte obs[N];          /* the token a listing showed me, or NONE */

/* c := the lowest name that neither the directory nor any process refers
   to. Used inside the step that renames to it: making the name earlier
   would change nothing, since nobody else can see it before. */
inline fresh() {
  c = 1;
  do
  :: c < K ->
     j = 0;
     do
     :: j < N && mine[j] != c && obs[j] != c -> j++
     :: j < N && (mine[j] == c || obs[j] == c) -> break
     :: j == N -> break
     od;
     if
     :: j == N && !present[c] -> break
     :: else -> c++
     fi
  :: c == K -> break
  od;
  assert(c < K);   /* K is enough: two names per process and the token */
  ended[c] = false; j = 0
}

/* rename(src, dst) in the lock directory; the caller decides what a success
   means. */
#define renamed(src, dst)  assert(!present[dst]); present[src] = false; present[dst] = true

/* The environment: any present token's lease may end at any moment. */
active proctype leases() {
  byte k;
  do
  :: d_step {
       k = 1;
       do
       :: k < K && !(present[k] && !ended[k]) -> k++
       :: k < K && present[k] && !ended[k] -> ended[k] = true; break
       :: k == K -> break
       od;
       k = 0
     }
  od
}

#define valid(i) (holds[i] && !ended[mine[i]])

/* Exclusion can only break when a process comes to believe it holds a fresh
   lease, so it is checked right there instead of by a monitor process
   (which would double the states): names reach `ended = false` only when
   nobody refers to them. */
#define exclusive \
  j = 0; k = 0; \
  do \
  :: j < N -> if :: valid(j) -> k++ :: else -> skip fi; j++ \
  :: j == N -> break \
  od; \
  assert(k <= 1); j = 0; k = 0

/* A process may die at these points (and stall at any): it keeps nothing,
   and same-host takers see that its token's owner is dead. Dying elsewhere
   is the same as stalling forever at the point before. */
#define crash_point  if :: d_step { dead[me] = true; holds[me] = false; \
                                    mine[me] = NONE; stale_read[me] = false } -> goto done \
                        :: skip fi

/* Everything I believed about my token, forgotten once I let it go or learn
   it is gone (so that equal situations are equal states). */
#define give_up  holds[me] = false; mine[me] = NONE; lost[me] = false; stale_read[me] = false

/* I hold fresh_name[me] now, and read the data (as one step: reading later
   cannot lose an update that reading now would not). */
#define got_it   owner[c] = me; mine[me] = c; c = 0; \
                 holds[me] = true; stale_read[me] = false; exclusive

/* A successful commit makes every other holder's read stale. */
#define committed \
  assert(!stale_read[me]); \
  j = 0; \
  do \
  :: j < N -> if :: j != me -> stale_read[j] = holds[j] :: else -> skip fi; j++ \
  :: j == N -> break \
  od; \
  j = 0

proctype P(byte me) {
  byte c, j, k;   /* scratch, zero between steps */
acquire:
  /* creation: a populated temporary directory renamed onto a missing lock
     directory (it fails, harmlessly, when the directory exists) */
  atomic { if :: !created -> created = true; present[FREE] = true :: else -> skip fi };
  /* the fast path: rename lockfile to my fresh token */
  atomic {
    if
    :: present[FREE] -> fresh(); renamed(FREE, c); got_it; goto held
    :: else -> skip
    fi
  };
  /* the slow path: a listing that shows a stale token (one step: the
     judgement reads only the name), then a rename of exactly that name
     (another step) */
  d_step {
    k = 1;
    do
    :: k < K && !present[k] -> k++
    :: k < K && present[k] -> break
    :: k == K -> break
    od;
    if
    :: k < K && (ended[k] || dead[owner[k]]) -> obs[me] = k
    :: else -> skip
    fi;
    k = 0
  };
#ifndef CLOBBER
  atomic {
    if
    :: obs[me] != NONE && present[obs[me]] ->
       assert(ended[obs[me]] || dead[owner[obs[me]]]);   /* property 2 */
       if :: !dead[owner[obs[me]]] -> lost[owner[obs[me]]] = true :: else -> skip fi;
       fresh(); renamed(obs[me], c); obs[me] = NONE; got_it; goto held
    :: else -> obs[me] = NONE; goto acquire
    fi
  };
#else
  /* A mutant, to show the checks can fail: the takeover renames whatever
     token is there by now ("remove the stale lock, then take it"). */
  atomic {
    if
    :: obs[me] != NONE ->
       obs[me] = NONE; k = 1;
       do
       :: k < K && !present[k] -> k++
       :: k < K && present[k] -> break
       :: k == K -> break
       od;
       if
       :: k < K ->
          if :: !dead[owner[k]] -> lost[owner[k]] = true :: else -> skip fi;
          fresh(); renamed(k, c); k = 0; got_it; goto held
       :: else -> k = 0; goto acquire
       fi
    :: else -> goto acquire
    fi
  };
#endif

held:
  crash_point;
  /* refresh, maybe: rename my token to a fresh one with a new lease */
  if
  :: atomic {
       if
       :: present[mine[me]] ->
          assert(owner[mine[me]] == me && !lost[me]);           /* property 3 */
          fresh(); renamed(mine[me], c); got_it
       :: else -> assert(lost[me]); give_up; goto acquire
       fi
     }
  :: skip
  fi;
  crash_point;
#ifndef UNFENCED
  /* the fenced commit: rename <dir>/<mine>/tmp over the target, one step
     that fails when my token's path is gone */
  atomic {
    if
    :: present[mine[me]] -> assert(owner[mine[me]] == me && !lost[me]); committed
    :: else -> assert(lost[me]); give_up; goto acquire
    fi
  };
#else
  /* the unfenced commit: prove ownership with a refresh rename, then (a
     separate step) rename a temp file beside the target */
  atomic {
    if
    :: present[mine[me]] -> fresh(); renamed(mine[me], c); got_it
    :: else -> assert(lost[me]); give_up; goto acquire
    fi
  };
  atomic { committed };
#endif
  crash_point;
  /* release: rename my token back to lockfile */
  atomic {
    if
    :: present[mine[me]] ->
       assert(owner[mine[me]] == me && !lost[me]);              /* property 3 */
       renamed(mine[me], FREE); give_up
    :: else -> assert(lost[me]); give_up
    fi
  };
  goto acquire;
done:
  skip
}

init {
  byte i;
  atomic {
    i = 0;
    do
    :: i < N -> mine[i] = NONE; obs[i] = NONE; i++
    :: i == N -> break
    od;
    i = 0;
    do
    :: i < N -> run P(i); i++
    :: i == N -> break
    od
  }
}
