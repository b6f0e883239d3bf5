/* The lock many shared-hosting scripts use, for comparison: mkdir(lock)
 * to acquire, rmdir to release, and "remove the lock if it is older than
 * the timeout" to recover from crashed holders. The removal is a separate
 * step from the age check, and removes whatever lock is there by then.
 *
 * Checked, as for the rename-token lock: a process commits only while the
 * lock is its own. spin finds the interleavings that break it: a holder
 * that stalls past the timeout commits over its successor, and two takers
 * of one stale lock remove each other's fresh lock. */

#define N        3
#define TIMEOUT  2
#define MAXTIME  6
#define NOBODY   255

bool exists = false;
byte mtime = 0;
byte holder = NOBODY;   /* ghost: whose mkdir created the lock there now */
byte now = 0;
byte rounds = 0;

active proctype clock() {
  do
  :: now < MAXTIME -> now++
  :: else -> break
  od
}

proctype P(byte me) {
acquire:
  if :: rounds > 8 -> goto done :: else -> rounds++ fi;
  atomic {
    if
    :: !exists -> exists = true; mtime = now; holder = me; goto held
    :: else -> skip
    fi
  };
  /* the age check, then (a step later) the removal */
  if
  :: exists && now - mtime > TIMEOUT -> exists = false; holder = NOBODY
  :: else -> skip
  fi;
  goto acquire;
held:
  /* the commit: the process believes the lock is its own */
  assert(holder == me);
  atomic { if :: holder == me -> exists = false; holder = NOBODY :: else -> skip fi };
  goto acquire;
done:
  skip
}

init {
  atomic { run P(0); run P(1); run P(2) }
}
