#!/usr/bin/env python3
"""One torture worker in Python, on the C API (ctypes backend): increments
COUNTER with update_file under a lease of LEASE seconds until STOPFILE
exists, logging each step to LOG (see torture.py, Logs).

    worker.py MODULEDIR COUNTER STOPFILE LOG SEED STOP_ONE_IN CHECK

Inside the critical section (update_file's fn) it checks that the lock
directory still holds a token of this pid, and one time in STOP_ONE_IN it
first stops itself (SIGSTOP, logged "s" before), so that a commit comes
late: the driver continues it only once another process has taken the lock
over, and that commit must then be refused. CHECK 0 leaves the token
check out: a client that caches directory listings (sshfs's default
mount) may list the lock directory as it was."""
import errno
import os
import random
import re
import signal
import sys
import time

moduledir, counter, stopfile, logpath, seed, one_in, check = sys.argv[1:8]
sys.path.insert(0, moduledir)
import tokenlock  # noqa: E402

tokenlock.use("library")
log = os.open(logpath, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
rng = random.Random(int(seed))
lockdir = counter + ".lock"
LEASE = 1


def note(what):
    os.write(log, ("%s %.6f\n" % (what, time.time())).encode())


def holds_token():
    pid = str(os.getpid())
    try:
        names = os.listdir(lockdir)
    except OSError:
        return False
    return any(n.startswith("lockfile.") and n.split(".")[-3] == pid for n in names)


def parse(old):
    """The counter's value; like increment(), a text that is not one
    canonical decimal and a newline is refused, nothing written: read
    through a client's cached size where no version mark catches it (see
    torture.py, cut short), it can be cut short ("12" of "12\n", or
    empty), and taking "" for 0 would reset the counter."""
    if old is None:
        return 0
    if not re.fullmatch(rb"(0|[1-9][0-9]{0,19})\n", old):
        shown = "".join(chr(c) if 0x20 <= c < 0x7F else "\\x%02x" % c for c in old[:24])
        raise tokenlock.CorruptData("read counter %s: the file does not hold one unsigned decimal and a "
                                    "newline (it holds \"%s\", %d bytes); nothing was written"
                                    % (counter, shown, len(old)), "corrupt_data")
    return int(old)


def step(old, stop_now):
    value = parse(old) + 1
    if stop_now[0]:
        stop_now[0] = False
        note("s")
        os.kill(os.getpid(), signal.SIGSTOP)
    if check == "1" and not holds_token():
        note("t")
    return b"%d\n" % value


while not os.path.exists(stopfile):
    note("i")
    stop_now = [rng.randrange(int(one_in)) == 0]
    try:
        out = tokenlock.update_file(counter, lambda old: step(old, stop_now), wait=60, lease=LEASE)
        note("d %d" % int(out))
    except tokenlock.LockLost:
        note("l")
    except tokenlock.Error as e:
        note("e %s%s" % (e.code, "/" + errno.errorcode.get(e.errno, str(e.errno)) if getattr(e, "errno", None) else ""))
        print("worker.py: %s" % e, file=sys.stderr)
