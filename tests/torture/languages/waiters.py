#!/usr/bin/env python3
"""C++ waiters in line beside native Perl and PHP lockers, which never map
the wait board: each C++ waiter must still take the lock within the
documented bound of its release (docs/protocol.md, The line of waiters:
sleeper_look_interval = 4 x (2 x backoff_max + 10 ms) = 440 ms with the
default options, plus one round of the protocol).

    waiters.py --lock-worker W --tokenlock T --source ROOT [--rounds N] [--seed N]

Each round: a native holder (Perl, then PHP, alternately: holder.pl,
holder.php) holds the lock; the five other native lockers each ask for two
short holds, and three `lock_worker wait` (the C++ library, default
options) line up behind it. The round goes on only once the line is formed:
the board (LOCKDIR.wait) exists and two of the C++ waiters sleep on its
futex (read from /proc, not guessed with a sleep). Then the holder
releases, and every process takes the lock once, in an order nobody
chooses. Every process stamps CLOCK_MONOTONIC when it holds the lock ("A")
and just before it releases ("R"; for a C++ waiter its "A", which comes
before its release, so its hold counts as zero and a gap is only ever
measured longer than it was).

The native lockers (three Perl, one PHP, and the holder of the round
before) wait in their own line, the turnstile D/turnstile
(docs/waiting-turnstile.md): the round goes on only once it exists and a
native waiter, its head, holds its flock (read from /proc/locks).

Checked: every C++ waiter gets the lock (none times out after its 30 s);
and for each, the time from the release just before its acquisition to the
acquisition is at most 440 ms + SLACK (one round of the protocol, and the
scheduling of two shared cores). Every native locker gets the lock too, each
time within NATIVE_BOUND + SLACK of the release before it (a sleeper's own
look at the lock every 100 ms bounds what the head's line can miss). Each such gap is also a moment when the
lock was free while C++ waiters waited, so a line whose head or sleepers
missed a release by a native locker shows here as a gap past the bound.
"""
import argparse
import glob
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BOUND_NS = 440 * 10**6
SLACK_NS = 250 * 10**6
NATIVE_BOUND_NS = 100 * 10**6
CXX_WAITERS = 3


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--lock-worker", required=True)
    p.add_argument("--tokenlock", required=True, help="the command, for a module that runs it")
    p.add_argument("--source", required=True)
    p.add_argument("--php-module", default=None,
                   help="the PHP module file the workers require (default: the source tree's "
                        "bindings/php/Tokenlock.php, the module in one file, as hosts deploy it)")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seed", type=int, default=None)
    return p.parse_args()


class Native:
    def __init__(self, name, argv):
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stamp(self, tag):
        line = self.proc.stdout.readline().split()
        if len(line) != 2 or line[0] != tag:
            raise RuntimeError("%s printed %r, expected %s <ns> (did it fail to lock?)" % (self.name, line, tag))
        return int(line[1])


def futex_sleepers(pids):
    """How many of pids sleep on a futex. Where the kernel does not name
    the wait channel (wchan "0": no kallsyms), a sleeping process (state S)
    counts: the head sleeps too, in its watch, so this is one too many at
    most, and the round then starts with the line perhaps not complete."""
    n = 0
    for pid in pids:
        try:
            with open("/proc/%d/wchan" % pid) as f:
                wchan = f.read()
            if wchan in ("", "0"):
                with open("/proc/%d/stat" % pid) as f:
                    n += f.read().rsplit(")", 1)[1].split()[0] == "S"
            else:
                n += wchan.startswith("futex")
        except (OSError, IndexError):
            pass
    return n


def turnstile_head(lockdir, pids):
    """Whether one of pids holds the flock of LOCKDIR/turnstile."""
    try:
        ino = os.lstat(os.path.join(lockdir, "turnstile")).st_ino
        with open("/proc/locks") as f:
            rows = [line.split() for line in f]
    except OSError:
        return False
    for row in rows:
        # "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"
        if len(row) >= 6 and row[1] == "FLOCK" and row[5].endswith(":%d" % ino) and row[4].isdigit():
            if int(row[4]) in pids:
                return True
    return False


def await_line(lockdir, waiters, native_pids):
    """Until the board exists and all but the head sleep on its futex, and
    a native waiter heads the turnstile."""
    deadline = time.monotonic() + 20
    pids = [w.pid for w in waiters]
    while time.monotonic() < deadline:
        if (os.path.exists(lockdir + ".wait") and futex_sleepers(pids) >= len(pids) - 1
                and turnstile_head(lockdir, native_pids)):
            return True
        if any(w.poll() is not None for w in waiters):
            return False
        time.sleep(0.002)   # polling a condition, with a deadline
    return False


def play_round(r, natives, lockdir, lock_worker, rng):
    """Returns (events, failures): events (A ns, R ns, name) of every hold."""
    holder = natives[r % 2]
    others = [n for n in natives if n is not holder]
    holder.send("hold")
    events = [[holder.stamp("A"), None, holder.name]]
    for n in others:
        for _ in range(2):
            n.send("cycle")
    waiters = [subprocess.Popen([lock_worker, "--lock", lockdir, "wait"], stdout=subprocess.PIPE, text=True)
               for _ in range(CXX_WAITERS)]
    for w in waiters:
        if w.stdout.readline().strip() != "W":
            return events, ["round %d: a lock_worker wait did not start" % r]
    native_pids = [n.proc.pid for n in others]
    if not await_line(lockdir, waiters, native_pids):
        holder.send("go")
        return events, ["round %d: the C++ and native waiters did not line up behind the %s holder within 20 s "
                        "(board %s, futex sleepers %d, turnstile headed %s)"
                        % (r, holder.name, os.path.exists(lockdir + ".wait"),
                           futex_sleepers([w.pid for w in waiters]), turnstile_head(lockdir, native_pids))]
    # The line is formed: a random moment to release, so that the natives'
    # polls fall anywhere against it.
    time.sleep(rng.uniform(0, 0.05))
    holder.send("go")
    events[0][1] = holder.stamp("R")
    for n in others:
        for _ in range(2):
            events.append([n.stamp("A"), n.stamp("R"), n.name])
    failures = []
    for i, w in enumerate(waiters):
        out = w.stdout.read().split()
        if w.wait() != 0 or len(out) != 2 or out[0] != "A":
            failures.append("round %d: C++ waiter %d did not get the lock (exit %d, %r)" % (r, i, w.returncode, out))
        else:
            events.append([int(out[1]), int(out[1]), "c++ waiter %d" % i])
    return events, failures


def gaps(events):
    """For each C++ acquisition and each of a native locker, the time since
    the release before it."""
    events = sorted(events)
    out = []
    for prev, cur in zip(events, events[1:]):
        if cur[2].startswith("c++") or " locker" in cur[2]:
            out.append((cur[0] - prev[1], prev[2], cur[2]))
    return out


def main():
    a = parse_args()
    if shutil.which("perl") is None or shutil.which("php") is None:
        print("SKIP: perl and php are needed (scripts/install-deps installs them)")
        return 77
    if not os.access(a.lock_worker, os.X_OK):
        print("SKIP: %s is not built" % a.lock_worker)
        return 77
    if a.seed is None:
        a.seed = int.from_bytes(os.urandom(4), "little")
    print("seed %d (replay: --seed %d)" % (a.seed, a.seed), flush=True)
    rng = random.Random(a.seed)
    os.environ["TOKENLOCK_COMMAND"] = a.tokenlock
    work = tempfile.mkdtemp(prefix="tl-waiters-")
    lockdir = os.path.join(work, "data.lock")
    php_module = a.php_module or os.path.join(a.source, "bindings/php/Tokenlock.php")
    perl_lib = os.path.join(a.source, "bindings/perl/lib")
    natives = [Native("perl holder", ["perl", os.path.join(HERE, "holder.pl"), perl_lib, lockdir]),
               Native("php holder", ["php", os.path.join(HERE, "holder.php"), php_module, lockdir]),
               Native("perl locker", ["perl", os.path.join(HERE, "holder.pl"), perl_lib, lockdir]),
               Native("php locker", ["php", os.path.join(HERE, "holder.php"), php_module, lockdir]),
               Native("perl locker 2", ["perl", os.path.join(HERE, "holder.pl"), perl_lib, lockdir]),
               Native("perl locker 3", ["perl", os.path.join(HERE, "holder.pl"), perl_lib, lockdir])]
    failures, all_gaps = [], []
    try:
        for r in range(a.rounds):
            try:
                events, f = play_round(r, natives, lockdir, a.lock_worker, rng)
            except RuntimeError as e:
                events, f = [], ["round %d: %s" % (r, e)]
            failures += f
            if f:
                break
            all_gaps += gaps(events)
    finally:
        for n in natives:
            n.proc.stdin.close()
            n.proc.wait(30)
    for g, before, who in all_gaps:
        bound = BOUND_NS if who.startswith("c++") else NATIVE_BOUND_NS
        if g > bound + SLACK_NS:
            failures.append("%s took the lock %.1f ms after the %s released it (bound %d ms + %d ms)"
                            % (who, g / 1e6, before, bound // 10**6, SLACK_NS // 10**6))
    for kind, shown in (("c++", "C++"), ("perl locker", "native Perl"), ("php locker", "native PHP")):
        mine = [g for g, _, who in all_gaps if who.startswith(kind)]
        print("%d %s acquisitions; the longest from a release: %.1f ms"
              % (len(mine), shown, max(mine, default=0) / 1e6))
    for f in failures:
        print("FAIL: " + f)
    if failures:
        print("FAIL with seed %d; lock directory kept in %s" % (a.seed, work))
        return 1
    shutil.rmtree(work, ignore_errors=True)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
