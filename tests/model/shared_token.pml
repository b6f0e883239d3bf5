/* Shared holders and N-slot semaphores over the rename-token lock
 * (docs/protocol.md, Shared locks and semaphores), for spin.
 *
 * The lock directory holds one token directory under one name at a time;
 * renames move that one directory, so the share entries inside it
 * (`s.<lease>.<owner>`) move with every rename. The model keeps:
 *  - `name`: the token's current name, an id compared only for equality
 *    (0 is `lockfile`); a fresh id is the lowest one nobody refers to, as in
 *    rename_token.pml, so every rename of an observed name is the
 *    compare-and-swap of the protocol;
 *  - `kind` and `nown`: what that name says (free, a writer's token, a lone
 *    reader's token, a group cover, a draining cover naming its writer);
 *  - `ent[2p]`, `ent[2p+1]`: the entries of process p in the token
 *    directory (its share, and the new one a refresh makes before it
 *    removes the old).
 * Time is a flag per lease that the environment may set at any moment: the
 * lease in a holder's name (`hend`), in a share entry (`eend`), and the
 * cover's (`cend`), which ends only once every entry in it has ended (a
 * cover's expiry is never below an entry's). Any process may stall between
 * any two steps and die at the marked points; a dead process's token and
 * entries are stale at once to new implementations on its host.
 *
 * Every process loops for ever, as a reader (or slot holder) or as a
 * writer; with -DOLD the last process is an old implementation that knows
 * only the exclusive protocol: it takes `lockfile`, and takes over a name
 * it judges stale by the name alone. Shared names carry a host tag that no
 * host computes as its own, so the old one judges them by their lease only.
 *
 * Checked in every reachable state (assertions, numbered as in
 * docs/verification.md):
 *  S1. never a writer (new or old) with a live lease beside any other
 *      holder with a live lease;
 *  S2. with -DSLOTS=n, never more than n shared holders with live leases;
 *  S3. a live share is never lost: nobody but its owner removes a share
 *      entry or renames a lone reader's token unless its lease ended or its
 *      owner died (a conversion carries the share into an entry);
 *  S4. a takeover renames only the name its listing showed, and only while
 *      what it judged stale is stale.
 * Variants that spin must refute:
 *  -DNO_ONBEHALF  a conversion does not make the lone reader's entry first;
 *  -DNO_JOIN_CAS  a joiner counts itself in once its entry is made, without
 *                 renaming the cover;
 *  -DOLD_LOCAL    shared names carry the real host tag, so the old
 *                 implementation judges them by their owner's life;
 *  -DCLEAR_AFTER_SHARE a reader's takeover renames the stale name to its
 *                 lone share at once and clears the workspace after, where
 *                 a converter may have joined;
 *  -DNO_REFRESH_COUNT (with -DREFRESH and -DSLOTS) a slot holder's refresh
 *                 renames the cover without counting the others, so a share
 *                 whose lease ended and whose slot was taken comes back.
 * -DREFRESH adds the refresh of a group member (a new entry, the cover's
 * rename, the old entry's removal); it multiplies the states by four to nine,
 * so check_models.sh leaves it to check_shared_refresh.sh. */

#ifndef N
#define N 3
#endif
#ifndef SLOTS
#define SLOTS 0          /* 0: readers, unbounded; n: a semaphore of n slots */
#endif
#define K (N + 2)        /* the current name, one observation per process, one spare */
#define NONE 255

#define FREE  0
#define EXCL  1
#define SOLO  2
#define GROUP 3
#define DRAIN 4

#define INNAME  1        /* a shared holder's share is its token's name */
#define INENTRY 2        /* ... or its entry in a cover */

byte name;               /* 0: lockfile */
byte kind;               /* FREE .. DRAIN */
byte nown = NONE;        /* the process the name names (EXCL, SOLO, DRAIN) */
bool cend;               /* the cover's lease ended */
bool ent[2 * N];         /* entry 2p + i of process p is in the token directory */
bool eend[2 * N];        /* its lease ended */
bit cur[N];              /* which of p's two entries is its share (a refresh
                            makes the other, renames the cover, removes this) */
bool hend[N];            /* the lease in p's own name (token or lone share) ended */
bool dead[N];
bool wx[N];              /* ghost: p believes it holds the lock alone */
bool sh[N];              /* ghost: p believes it holds a share */
byte loc[N];             /* ghost: where p's share is */
byte obs[N];             /* the name p's listing showed, or NONE */

inline fresh() {
  c = 1;
  do
  :: c < K ->
     j = 0;
     do
     :: j < N && obs[j] != c -> j++
     :: j < N && obs[j] == c -> break
     :: j == N -> break
     od;
     if
     :: j == N && c != name -> break
     :: else -> c++
     fi
  :: c == K -> break
  od;
  assert(c < K);
  j = 0
}

/* rename the observed name to a fresh one that says KIND and OWNER */
#define rename_to(KIND, OWNER) fresh(); name = c; c = 0; kind = KIND; nown = OWNER; cend = false

#define SH(p) (2 * (p) + cur[p])        /* p's share entry */
#define OT(p) (2 * (p) + 1 - cur[p])    /* p's other entry */
#define confirmed(e) (sh[(e) / 2] && loc[(e) / 2] == INENTRY && SH((e) / 2) == (e))
#define live_share(p) (sh[p] && ((loc[p] == INNAME && !hend[p]) || (loc[p] == INENTRY && ent[SH(p)] && !eend[SH(p)])))
#define live_writer(p) (wx[p] && !hend[p])

/* S1 and S2, checked where a belief starts (leases only ever end) */
inline check() {
  j = 0; k = 0; c = 0;
  do
  :: j < N -> if :: live_writer(j) -> k++ :: else -> skip fi;
              if :: live_share(j) -> c++ :: else -> skip fi; j++
  :: j == N -> break
  od;
  assert(k <= 1 && (k == 0 || c == 0));   /* S1 */
  assert(SLOTS == 0 || c <= SLOTS);       /* S2 */
  j = 0; k = 0; c = 0
}

/* Removing entry e of another process (a stale share, or a takeover that
   clears the workspace): S3. */
inline remove_entry(e) {
  assert(!(confirmed(e) && !eend[e]));   /* S3 */
  ent[e] = false; eend[e] = false
}

/* The workspace clearing of a takeover removes every entry. */
inline clear_entries() {
  j = 0;
  do
  :: j < 2 * N -> if :: ent[j] -> remove_entry(j) :: else -> skip fi; j++
  :: j == 2 * N -> break
  od;
  j = 0
}

/* Any process may remove one stale entry of another, by its exact name
   (one step: a name that changed is not removed, and staleness of an
   existing entry never reverts). */
inline sweep_one() {
  atomic {
    select (j : 0 .. 2 * N - 1);
    if
    :: ent[j] && j / 2 != me && (eend[j] || dead[j / 2]) -> remove_entry(j)
    :: else -> skip
    fi;
    j = 0
  }
}

/* n := the processes but me that a listing of the token shows with a live
   entry. A listing may miss an entry made or removed during it, so it may
   miss any entry but a confirmed share (never renamed, removed only by a
   step that is itself checked). */
inline count_live(n) {
  n = 0; j = 0;
  do
  :: j < 2 * N ->
     if
     :: j / 2 != me && ent[j] && !eend[j] && !dead[j / 2] ->
        if
        :: o = 1
        :: !confirmed(j) -> skip
        fi
     :: else -> skip
     fi;
     if :: j % 2 == 1 -> n = n + o; o = 0 :: else -> skip fi;
     j++
  :: j == 2 * N -> break
  od;
  j = 0
}

/* The environment: leases end. */
active proctype clock() {
  byte p;
  do
  :: atomic { (kind == EXCL || kind == SOLO) && !hend[nown] -> hend[nown] = true }
  :: atomic {
       select (p : 0 .. 2 * N - 1);
       if :: ent[p] && !eend[p] -> eend[p] = true :: else -> skip fi;
       p = 0
     }
  :: atomic {
       (kind == GROUP || kind == DRAIN) && !cend;
       p = 0;
       do
       :: p < 2 * N && (!ent[p] || eend[p]) -> p++
       :: p < 2 * N && ent[p] && !eend[p] -> break
       :: p == 2 * N -> cend = true; break
       od;
       p = 0
     }
  od
}

#define crash_point \
  if \
  :: d_step { dead[me] = true; wx[me] = false; sh[me] = false; loc[me] = 0; obs[me] = NONE } -> goto done \
  :: skip \
  fi

proctype P(byte me) {
  byte c, j, k, n, o;

start:
#ifdef OLD
  if :: me == N - 1 -> goto old :: else -> skip fi;
#endif
#ifdef WRITERS
  /* fixed roles: bit i of WRITERS makes process i a writer, else a reader */
  if :: (WRITERS >> me) & 1 -> goto writer :: else -> goto reader fi;
#else
  if :: goto reader :: goto writer fi;
#endif

/* ---------------- a shared holder (reader, or slot holder) ---------------- */
reader:
  /* the fast path: rename lockfile to my lone reader's token */
  atomic {
    if
    :: kind == FREE -> rename_to(SOLO, me); hend[me] = false; sh[me] = true; loc[me] = INNAME;
       check(); goto r_held
    :: else -> skip
    fi
  };
  /* list the lock directory (and the cover) and act on what it shows */
  atomic {
    obs[me] = name;
    if
    :: kind == EXCL && (hend[nown] || dead[nown]) ->          /* stale writer: take over */
       n = 1
    :: kind == SOLO && nown != me && (hend[nown] || dead[nown]) -> n = 1
    :: kind == SOLO && nown != me && !(hend[nown] || dead[nown]) && SLOTS != 1 ->
       n = 2                                                  /* convert to a group */
    :: kind == GROUP ->
       count_live(k);
       if :: SLOTS == 0 || k < SLOTS -> n = 3 :: else -> n = 0 fi   /* join, or full */
    :: kind == DRAIN && dead[nown] -> n = 4                   /* its writer died: unmark */
    :: else -> n = 0                                          /* wait */
    fi;
    k = 0
  };
  if
  :: n == 0 -> obs[me] = NONE; if :: sweep_one() :: skip fi; goto reader
  :: n == 1 ->
#ifdef CLEAR_AFTER_SHARE
     /* mutant: the taken name is a lone share at once, cleared after; a
        converter may join it in between, and the clearing removes its
        entries */
     atomic {
       if
       :: name == obs[me] ->
          assert(hend[nown] || dead[nown]);                   /* S4 */
          obs[me] = NONE; rename_to(SOLO, me); hend[me] = false; sh[me] = true; loc[me] = INNAME;
          n = 0; check()                     /* and the token opened, to clear it */
       :: else -> obs[me] = NONE; n = 0; goto reader
       fi
     };
     atomic { clear_entries() };
     goto r_held
#else
     /* One step for the protocol's three: the name renamed to a writer's
        token of mine, the workspace cleared under it, that token renamed to
        my lone share. Nobody joins a writer's token, and nobody takes a
        live one, so no step of another process fits between them (but a
        taker stalled past its lease, which is not modelled: see
        docs/protocol.md, Takeovers by a shared holder). */
     atomic {
       if
       :: name == obs[me] ->
          assert(hend[nown] || dead[nown]);                   /* S4 */
          clear_entries();
          obs[me] = NONE; rename_to(SOLO, me); hend[me] = false; sh[me] = true; loc[me] = INNAME;
          n = 0; check(); goto r_held
       :: else -> obs[me] = NONE; n = 0; goto reader
       fi
     }
#endif
  :: n == 4 ->
     atomic {
       if
       :: name == obs[me] -> assert(dead[nown]); rename_to(GROUP, me); cend = false
       :: else -> skip
       fi;
       obs[me] = NONE; n = 0; goto reader
     }
  :: n == 2 || n == 3 -> skip
  fi;
  /* make my entry in the observed token. (The real step makes it through
     the token's descriptor, whatever its name is by then; an entry made
     after the name moved on is removed when the rename below fails, as
     here.) */
  atomic {
    if
    :: name == obs[me] -> ent[SH(me)] = true; eend[SH(me)] = false
    :: else -> obs[me] = NONE; n = 0; goto reader
    fi
  };
  crash_point;             /* a joiner may die with its entry made */
#ifdef NO_JOIN_CAS
  atomic {
    if
    :: n == 3 -> obs[me] = NONE; n = 0; sh[me] = true; loc[me] = INENTRY; check(); goto r_held
    :: else -> skip
    fi
  };
#endif
  /* confirm: rename the observed name to a fresh cover. A conversion makes
     the lone reader's entry first (its name, lease and owner from the lone
     reader's token), as part of this step in the model: should the rename
     fail, that entry is only left over, and its maker removes it. */
  atomic {
    if
    :: name == obs[me] ->
       if
       :: n == 2 ->
          o = nown;
#ifndef NO_ONBEHALF
          ent[SH(o)] = true; eend[SH(o)] = hend[o];
          if :: sh[o] -> loc[o] = INENTRY :: else -> skip fi;   /* the share is that entry now */
#endif
          hend[o] = false; o = 0
       :: else -> skip
       fi;
       rename_to(GROUP, me); cend = false;
       obs[me] = NONE; n = 0; sh[me] = true; loc[me] = INENTRY; check(); goto r_held
    :: else ->
       /* the name moved on: my entry is not a share; remove it */
       ent[SH(me)] = false; eend[SH(me)] = false; obs[me] = NONE; n = 0; goto reader
    fi
  };

r_held:
  crash_point;
  /* refresh a lone reader's token, maybe */
  if
  :: atomic {
       if
       :: sh[me] && loc[me] == INNAME && kind == SOLO && nown == me ->
          rename_to(SOLO, me); hend[me] = false; check()
       :: else -> skip
       fi
     }
#ifdef REFRESH
  :: sh[me] && loc[me] == INENTRY ->
     /* refresh a group member: a new entry, the cover's rename, then the
        old entry's removal */
     atomic { ent[OT(me)] = true; eend[OT(me)] = false };
     crash_point;
g_look:
     /* list the lock directory and the token; with slots, count the others
        as a joiner does: a share whose lease ended may have been counted
        out, and its slot taken */
     atomic {
       obs[me] = name;
#ifndef NO_REFRESH_COUNT
       if :: SLOTS > 0 -> count_live(k) :: else -> k = 0 fi;
#endif
       if :: SLOTS > 0 && k >= SLOTS -> obs[me] = NONE :: else -> skip fi;
       k = 0
     };
     atomic {
       if
       :: obs[me] != NONE && name == obs[me] && (kind == GROUP || kind == DRAIN) && ent[OT(me)] ->
          o = nown;
          if :: kind == GROUP -> rename_to(GROUP, me) :: else -> rename_to(DRAIN, o) fi;
          o = 0; obs[me] = NONE; cur[me] = 1 - cur[me]; check()
       :: obs[me] != NONE && name != obs[me] && (kind == GROUP || kind == DRAIN) && ent[OT(me)] ->
          obs[me] = NONE; goto g_look                         /* list again, rename that */
       :: else ->                                 /* no cover, or full: my share ended */
          ent[0 + 2 * me] = false; eend[0 + 2 * me] = false;
          ent[1 + 2 * me] = false; eend[1 + 2 * me] = false;
          sh[me] = false; loc[me] = 0; cur[me] = 0; obs[me] = NONE; goto start
       fi
     };
     atomic { ent[OT(me)] = false; eend[OT(me)] = false }
#endif
  :: skip
  fi;
  crash_point;
  /* leave */
  atomic {
    if
    :: sh[me] && loc[me] == INNAME && kind == SOLO && nown == me ->
       name = 0; kind = FREE; nown = NONE; sh[me] = false; loc[me] = 0; hend[me] = false; goto start
    :: sh[me] && loc[me] == INNAME && !(kind == SOLO && nown == me) ->   /* taken over: lost */
       sh[me] = false; loc[me] = 0; hend[me] = false; goto start
    :: else -> ent[SH(me)] = false; eend[SH(me)] = false; sh[me] = false; loc[me] = 0; cur[me] = 0   /* remove my entry */
    fi
  };
  /* a live entry left in the token, listed through the descriptor my entry
     was removed by: its holder (or a joiner whose rename fails, and who
     then takes these steps) is the last one out, not me */
  atomic { count_live(k); n = (k > 0); k = 0; if :: n -> n = 0; goto start :: else -> skip fi };
  /* the last one out frees the cover, or hands a draining one to its writer */
r_last:
#ifdef LEAVE_TOKEN_FIRST
  /* mutant: the token listed before D, the name then seen freed; a joiner
     that made its entry after the listing and renamed the cover before
     the look at D loses its share */
  atomic {
    if
    :: kind == GROUP || kind == DRAIN -> count_live(k); n = (k == 0)
    :: else -> n = 0
    fi;
    k = 0;
    if :: n == 0 -> goto start :: else -> skip fi
  };
  atomic {
    obs[me] = name;
    if :: !(kind == GROUP || kind == DRAIN) -> obs[me] = NONE; n = 0; goto start :: else -> skip fi
  };
#else
  atomic {
    obs[me] = name;
    if
    :: kind == GROUP || kind == DRAIN -> count_live(k); n = (k == 0)
    :: else -> n = 0
    fi;
    k = 0;
    if :: n == 0 -> obs[me] = NONE; goto start :: else -> skip fi
  };
#endif
  atomic {
    if
    :: name == obs[me] && kind == GROUP ->
       clear_entries(); name = 0; kind = FREE; nown = NONE; cend = false
    :: name == obs[me] && kind == DRAIN ->
       clear_entries(); o = nown; k = cend; rename_to(EXCL, o); hend[o] = k; o = 0; k = 0
    :: name != obs[me] -> obs[me] = NONE; n = 0; goto r_last
    fi;
    obs[me] = NONE; n = 0; goto start
  };

/* ---------------- a writer ---------------- */
writer:
  atomic {
    if
    :: kind == FREE -> rename_to(EXCL, me); hend[me] = false; wx[me] = true; check(); goto w_held
    :: else -> skip
    fi
  };
w_look:
  crash_point;             /* a waiting writer may die, its mark left behind */
  atomic {
    obs[me] = name;
    if
    :: kind == EXCL && nown == me -> n = 5                    /* handed to me */
    :: kind == EXCL && nown != me && (hend[nown] || dead[nown]) -> n = 1
    :: kind == SOLO && (hend[nown] || dead[nown]) -> n = 1
    :: kind == SOLO && !(hend[nown] || dead[nown]) -> n = 2   /* mark: drain */
    :: kind == GROUP -> count_live(k); if :: k == 0 -> n = 1 :: else -> n = 3 fi
    :: kind == DRAIN && nown == me -> count_live(k); if :: k == 0 -> n = 1 :: else -> n = 6 fi
    :: kind == DRAIN && nown != me && dead[nown] -> n = 4
    :: else -> n = 0
    fi;
    k = 0
  };
  if
  :: n == 0 -> obs[me] = NONE; if :: sweep_one() :: skip fi; goto writer
  :: n == 6 -> obs[me] = NONE; n = 0;
     if
     :: goto w_look                                           /* keep waiting */
     :: sweep_one(); goto w_look
     :: skip                                                  /* give up: unmark */
     fi;
     atomic {
       if
       :: kind == DRAIN && nown == me -> rename_to(GROUP, me); cend = false; goto start
       :: kind == EXCL && nown == me -> wx[me] = true; check(); goto w_held  /* handed over meanwhile */
       :: else -> goto start
       fi
     }
  :: n == 5 -> atomic { obs[me] = NONE; n = 0; wx[me] = true; check(); goto w_held }
  :: else -> skip
  fi;
  atomic {
    if
    :: name == obs[me] ->
       if
       :: n == 1 ->
          assert(kind == DRAIN || kind == GROUP || hend[nown] || dead[nown]);   /* S4 */
          clear_entries(); rename_to(EXCL, me); hend[me] = false; wx[me] = true;
          obs[me] = NONE; n = 0; check(); goto w_held
       :: n == 2 ->
          o = nown;
#ifndef NO_ONBEHALF
          ent[SH(o)] = true; eend[SH(o)] = hend[o];
          if :: sh[o] -> loc[o] = INENTRY :: else -> skip fi;
#endif
          hend[o] = false; o = 0; rename_to(DRAIN, me); cend = false
       :: n == 3 -> rename_to(DRAIN, me); cend = false
       :: n == 4 -> assert(dead[nown]); rename_to(GROUP, me); cend = false
       fi
    :: else -> skip
    fi;
    obs[me] = NONE; n = 0; goto w_look
  };

w_held:
  crash_point;
  atomic {
    if
    :: kind == EXCL && nown == me -> name = 0; kind = FREE; nown = NONE
    :: else -> skip                                           /* lost (its lease ended) */
    fi;
    wx[me] = false; hend[me] = false; goto start
  };

#ifdef OLD
/* ---------------- an old implementation: the exclusive protocol only ---------------- */
old:
  atomic {
    if
    :: kind == FREE -> rename_to(EXCL, me); hend[me] = false; wx[me] = true; check(); goto o_held
    :: else -> skip
    fi
  };
  atomic {
    obs[me] = name;
    if
    :: kind == EXCL && (hend[nown] || dead[nown]) -> n = 1
    :: kind == SOLO && hend[nown] -> n = 1                    /* a foreign tag: lease only */
    :: (kind == GROUP || kind == DRAIN) && cend -> n = 1
#ifdef OLD_LOCAL
    :: (kind == SOLO || kind == GROUP || kind == DRAIN) && dead[nown] -> n = 1
#endif
    :: else -> n = 0
    fi
  };
  atomic {
    if
    :: n == 1 && name == obs[me] ->
       clear_entries(); rename_to(EXCL, me); hend[me] = false; wx[me] = true;
       obs[me] = NONE; n = 0; check(); goto o_held
    :: else -> obs[me] = NONE; n = 0; goto old
    fi
  };
o_held:
  crash_point;
  atomic {
    if
    :: kind == EXCL && nown == me -> name = 0; kind = FREE; nown = NONE
    :: else -> skip
    fi;
    wx[me] = false; hend[me] = false; goto old
  };
#endif

done:
  skip
}

init {
  byte i;
  atomic {
    i = 0;
    do
    :: i < N -> obs[i] = NONE; i++
    :: i == N -> break
    od;
    i = 0;
    do
    :: i < N -> run P(i); i++
    :: i == N -> break
    od
  }
}
