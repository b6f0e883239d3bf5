#!/usr/bin/env python3
"""One worker of the shared torture in Python (shared.py has the log format
and the checks): until STOPFILE exists, takes COUNTER.lock shared and reads
the counter, or exclusively and increments it with the held lock's fenced
commit_file, or one of SLOTS slots of SEMDIR, each hold logged to the
shared event LOG. The holds keep no lease alive (keep_alive=False), as the
PHP and Perl workers', so that a stop past the lease loses them.

    shared_worker.py MODULEDIR COUNTER SEMDIR SLOTS LEASE STOPFILE LOG SEED KINDS

KINDS: the kinds of hold it chooses among, of r (reader), s (slot), w
(writer). With TOKENLOCK_LIBRARY set the module runs on the C API, else on
the command."""
import os
import random
import re
import signal
import sys
import time

moduledir, counter, semdir, slots, lease, stopfile, logpath, seed, kinds = sys.argv[1:10]
sys.path.insert(0, moduledir)
import tokenlock  # noqa: E402

tokenlock.use("library" if os.environ.get("TOKENLOCK_LIBRARY") else "command")
log = os.open(logpath, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
rng = random.Random(int(seed))
hold = 0


def note(what):
    """One write per line: with O_APPEND the line is whole in the shared
    log before the next step, whatever signal comes next."""
    os.write(log, ("python %d %d %s %.6f\n" % (os.getpid(), hold, what, time.time())).encode())


def read_note():
    """The counter as read inside a hold: "r V", or "r torn:HEX"."""
    try:
        with open(counter, "rb") as f:
            text = f.read()
    except OSError:
        text = b""
    m = re.fullmatch(rb"(0|[1-9][0-9]*)\n", text)
    return "r %s" % m.group(1).decode() if m else "r torn:" + text.hex()


def write(held):
    old = read_note()
    if old.startswith("r torn:"):
        note(old)    # a failure of the run (shared.py): nothing is written over it
        return False
    v = int(old[2:]) + 1
    note("c %d" % v)
    if rng.randrange(16) == 0:
        note("s")    # shared.py continues it past the lease: the commit must then be refused
        os.kill(os.getpid(), signal.SIGSTOP)
    try:
        held.commit_file(counter, b"%d\n" % v, sync="none")
    except tokenlock.LockLost as e:
        note("l")
        print("shared_worker.py: %s" % e, file=sys.stderr)
        return True
    note("W %d" % v)
    return False


def hold_once(kind):
    opts = {"shared": True} if kind == "r" else {"slots": int(slots)} if kind == "s" else {}
    held = tokenlock.Lock.acquire(semdir if kind == "s" else counter + ".lock", wait=60, lease=float(lease),
                                  keep_alive=False, **opts)
    note("+ " + kind)
    lost = False
    if kind == "r":
        note(read_note())
    elif kind == "w":
        lost = write(held)
    # A hold of some length, for overlaps to check; one in ten long enough
    # for shared.py to stop it inside past its lease.
    time.sleep(rng.uniform(0.2, 0.4) if kind != "w" and rng.randrange(10) == 0
               else rng.uniform(0, 0.005 if kind == "w" else 0.03))
    note("-")
    try:
        held.release()
        note("l" if lost else "ok")
    except tokenlock.LockLost as e:
        note("l")
        print("shared_worker.py: %s" % e, file=sys.stderr)    # names the token, for shared.py's reader


while not os.path.exists(stopfile):
    hold += 1
    r = rng.randrange(100)
    kind = "r" if r < 45 else "s" if r < 75 else "w"
    try:
        hold_once(kind if kind in kinds else "r")
    except tokenlock.Error as e:
        note("e %s" % e.code)
        print("shared_worker.py: %s" % e, file=sys.stderr)
