/* The rename-token lock of docs/protocol.md, for spin.
 *
 * The lock directory holds one token, modelled by its name `tok` (FREE is
 * "lockfile", MISSING a directory not yet created). rename(2) of the name a
 * process observed is one atomic step that succeeds only if that name is
 * still the token's. Every acquisition and refresh makes a fresh name.
 * Time advances on its own; any process may crash at any step (its ghost
 * `dead` flag lets same-host takers see it) and stall for any time between
 * steps (leases run out meanwhile).
 *
 * Checked:
 *  - a rename that releases, refreshes or commits through a token succeeds
 *    only for the process that owns that token now;
 *  - a process whose token was taken over never releases, refreshes or
 *    commits successfully again (the fence: its path is gone);
 *  - at no moment do two processes hold tokens with valid leases.
 *
 * With N = 2 (the default, searched exhaustively in the test suite) one
 * process can be owner and taker in turn; N = 3 adds a second taker racing
 * for the same stale token, and needs more memory than a 24 GiB machine has
 * for an exhaustive search at these bounds. */

#ifndef N
#define N        2    /* processes; spin -DN=3 for three (see docs/verification.md) */
#endif
#define LEASE    1
#define MAXTIME  4
#define MAXNAME  8
#define FREE     0
#define MISSING  255

byte tok = MISSING;
byte next_name = 1;
byte now = 0;
byte expiry[MAXNAME];
byte owner[MAXNAME];
bool dead[N];
bool lost[N];         /* ghost: my token was taken over */
bool holds[N];        /* ghost: I believe I hold the lock (only I change it) */
byte held_name[N];    /* ghost: the token I believe is mine */

/* A fresh token name, or 0 when the bounded supply is used up. The check
   and the increment are one step: concurrent callers never overrun it. */
inline fresh(n) {
  atomic {
    if
    :: next_name < MAXNAME -> n = next_name; next_name++
    :: else -> n = 0
    fi
  }
}

active proctype clock() {
  do
  :: now < MAXTIME -> now++
  :: else -> break
  od
}

/* Valid lease: the process believes it holds, and its token's lease runs. */
#define valid(i) (holds[i] && now <= expiry[held_name[i]])

active proctype exclusion() {
#if N == 3
  assert(!(valid(0) && valid(1)) && !(valid(0) && valid(2)) && !(valid(1) && valid(2)))
#else
  assert(!(valid(0) && valid(1)))
#endif
}

proctype P(byte me) {
  byte mine, obs, n;
acquire:
  fresh(n);
  if :: n == 0 -> goto done :: else -> skip fi;   /* names used up: bounds the search */
  /* creation: a populated temporary directory renamed onto a missing one */
  atomic { if :: tok == MISSING -> tok = FREE :: else -> skip fi };
  /* the fast path */
  atomic {
    if
    :: tok == FREE ->
       tok = n; expiry[n] = now + LEASE; owner[n] = me; mine = n;
       lost[me] = false; holds[me] = true; held_name[me] = n
    :: else -> skip
    fi
  };
  if :: holds[me] -> goto held :: else -> skip fi;
  /* the slow path: a listing (one step), a judgement, then a rename of
     exactly the observed name (another step) */
  obs = tok;
  if
  :: obs != FREE && obs != MISSING && (now > expiry[obs] || dead[owner[obs]]) ->
     atomic {
       if
       :: tok == obs ->
          /* whose token is actually taken; that process still believes
             it holds until it finds out (its beliefs are its own) */
          lost[owner[tok]] = true;
          tok = n; expiry[n] = now + LEASE; owner[n] = me; mine = n;
          lost[me] = false; holds[me] = true; held_name[me] = n
       :: else -> skip
       fi
     }
  :: else -> skip
  fi;
  if :: holds[me] -> goto held :: else -> goto acquire fi;

held:
  /* crash anywhere in the critical section */
  if :: atomic { dead[me] = true; holds[me] = false } -> goto done :: skip fi;
  /* refresh, maybe */
  fresh(n);
  if
  :: n != 0 ->
     atomic {
       if
       :: tok == mine ->
          assert(owner[mine] == me && !lost[me]);
          tok = n; expiry[n] = now + LEASE; owner[n] = me; mine = n; held_name[me] = n
       :: else -> assert(lost[me])
       fi
     }
  :: skip
  fi;
  if :: atomic { dead[me] = true; holds[me] = false } -> goto done :: skip fi;
  /* the fenced commit: rename D/<mine>/tmp over the target */
  atomic {
    if
    :: tok == mine -> assert(owner[mine] == me && !lost[me])
    :: else -> assert(lost[me])
    fi
  };
  /* release */
  atomic {
    if
    :: tok == mine -> assert(owner[mine] == me && !lost[me]); tok = FREE; holds[me] = false
    :: else -> assert(lost[me]); holds[me] = false
    fi
  };
  goto acquire;
done:
  skip
}

init {
  atomic {
    run P(0); run P(1);
#if N == 3
    run P(2)
#endif
  }
}
