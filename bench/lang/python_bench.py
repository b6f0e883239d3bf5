#!/usr/bin/python3
"""The cost per call of the Python binding against what a Python programmer
writes by hand, side by side in one run:

  lock: `with tokenlock.lock(...)` around an empty block, through the library
        (ctypes) and through the tokenlock command,
        vs two bare os.rename() calls in a directory (lockfile to a token
        name and back: the protocol's floor), for the library,
        and vs `with open(...)` + fcntl.flock(LOCK_EX) of a lock file;
  incr: tokenlock.increment() through the library
        vs a flock'ed counter: flock, read, write a temporary file, rename,
        with the same durability (--sync: fsync of the file, and of the
        directory for file_and_dir, as bench/cgi/flock_counter.c does).

  python_bench.py [-q] [-n CALLS] [-r ROUNDS] [--sync none|file|file_and_dir] [-d DIR]

Each round times CALLS calls of each variant (the command backend a tenth
as many: each of its locks starts two processes), in an order that
alternates between rounds; the ratios are medians over rounds of
tokenlock / other. The last lines are for machines:
  python_lock_rename_ratio=W  library backend / two renames
  python_lock_ratio=X         library backend / flock
  python_cmd_lock_ratio=Y     command backend / flock
  python_keep_alive_ratio=K   the with-block / the same with keep_alive=False
  python_bare_lock_rename_ratio=B  keep_alive=False / two renames
  python_incr_ratio=Z         library backend / flock'ed counter
-q: a quick run to check that it works (few calls, two rounds); take
figures from a full run on a quiet machine.

The library and command are TOKENLOCK_LIBRARY and TOKENLOCK_COMMAND, else
the build tree's.
"""

import argparse
import fcntl
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "bindings", "python"))

import tokenlock  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-q", "--quick", action="store_true", help="few calls, two rounds")
    p.add_argument("-n", "--calls", type=int, default=2000, help="calls per variant and round")
    p.add_argument("-r", "--rounds", type=int, default=5)
    p.add_argument("--sync", default="none", choices=("none", "file", "file_and_dir"))
    p.add_argument("-d", "--dir", help="where to make the scratch directory (default: TMPDIR)")
    a = p.parse_args()
    if a.quick:
        a.calls, a.rounds = 100, 2
    if a.calls < 10 or a.rounds < 1:
        p.error("CALLS must be at least 10 and ROUNDS at least 1")
    return a


def main():
    a = parse_args()
    library = os.environ.get("TOKENLOCK_LIBRARY") or os.path.join(REPO, "build", "lib",
                                                                   "libtokenlock_c.so")
    command = os.environ.get("TOKENLOCK_COMMAND") or os.path.join(REPO, "build", "tools",
                                                                   "tokenlock")
    try:
        tokenlock.use("library", library=library)
        tokenlock.use("command", command=command)
    except tokenlock.Error as e:
        sys.exit("python_bench.py: %s" % e)

    scratch = tempfile.mkdtemp(prefix="python-bench-", dir=a.dir)
    try:
        run(a, library, command, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run(a, library, command, d):
    tl_lock_dir = os.path.join(d, "tl.lock")
    fl_lock_file = os.path.join(d, "fl.lock")
    tl_count = os.path.join(d, "tl.count")
    fl_count = os.path.join(d, "fl.count")
    # The floor is the protocol's own renames: a directory named lockfile
    # and a name as long as a real token (docs/protocol.md, Token grammar).
    rn_file = os.path.join(d, "rn.lock", "lockfile")
    host = re.sub(r"[^A-Za-z0-9-]", "_", (os.uname().nodename or "host")[:32])
    rn_token = os.path.join(d, "rn.lock", "lockfile.%d.%s-%08x.%d.%d.%016x" % (
        (int(time.time()) + 3600) * 1000000, host, 0, os.getpid(), 1234567, 0))
    os.mkdir(os.path.dirname(rn_file))
    os.mkdir(rn_file)
    added = {"tl": 0, "fl": 0}

    def tl_lock():
        with tokenlock.lock(tl_lock_dir):
            pass

    def tl_lock_bare():
        with tokenlock.lock(tl_lock_dir, keep_alive=False):
            pass

    def rn_lock():
        os.rename(rn_file, rn_token)
        os.rename(rn_token, rn_file)

    def fl_lock():
        with open(fl_lock_file, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)

    def tl_incr():
        tokenlock.increment(tl_count, sync=a.sync)
        added["tl"] += 1

    def fl_incr():
        with open(fl_count + ".flock", "a") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            try:
                with open(fl_count, "rb") as f:
                    v = int(f.read())
            except FileNotFoundError:
                v = 0
            tmp = "%s.tmp.%d" % (fl_count, os.getpid())
            with open(tmp, "wb") as out:
                out.write(b"%d\n" % (v + 1))
                if a.sync != "none":
                    out.flush()
                    os.fsync(out.fileno())
            os.rename(tmp, fl_count)
            if a.sync == "file_and_dir":
                dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
        added["fl"] += 1

    def per_call_us(fn, backend, n):
        tokenlock.use(backend, library=library, command=command)
        t = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - t) / n * 1e6

    # (name, function, backend, calls); the flock variants ignore the backend.
    cmd_calls = max(2, a.calls // 10)
    pairs = [
        ("lock_rename", (("tl_lock", tl_lock, "library", a.calls), ("rn_lock", rn_lock, "library", a.calls))),
        ("lock", (("tl_lock", tl_lock, "library", a.calls), ("fl_lock", fl_lock, "library", a.calls))),
        # What the with-block's lease keeping adds (one shared thread).
        ("keep_alive", (("tl_lock", tl_lock, "library", a.calls),
                        ("tl_lock_bare", tl_lock_bare, "library", a.calls))),
        ("bare_rename", (("tl_lock_bare", tl_lock_bare, "library", a.calls),
                         ("rn_lock", rn_lock, "library", a.calls))),
        ("cmd_lock", (("tl_cmd_lock", tl_lock, "command", cmd_calls),
                      ("fl_lock", fl_lock, "library", cmd_calls))),
        ("incr", (("tl_incr", tl_incr, "library", a.calls // 4),
                  ("fl_incr", fl_incr, "library", a.calls // 4))),
    ]
    # One warm-up call each: the first creates the lock directory or file.
    for _, variants in pairs:
        for _, fn, backend, _ in variants:
            tokenlock.use(backend, library=library, command=command)
            fn()

    times = {}
    ratios = {name: [] for name, _ in pairs}
    for rnd in range(a.rounds):
        for name, variants in pairs:
            # Alternating which goes first keeps a drift of the machine's
            # speed within a round from favouring one side.
            order = variants if rnd % 2 == 0 else variants[::-1]
            r = {v[0]: per_call_us(v[1], v[2], v[3]) for v in order}
            for key, us in r.items():
                times.setdefault((name, key), []).append(us)
            ratios[name].append(r[variants[0][0]] / r[variants[1][0]])

    # Both counters must hold exactly what was added, or the figures mean nothing.
    for path, n in ((tl_count, added["tl"]), (fl_count, added["fl"])):
        with open(path, "rb") as f:
            v = f.read()
        if v != b"%d\n" % n:
            sys.exit("python_bench.py: %s holds %r after %d increments" % (path, v, n))
    if not os.path.isdir(rn_file) or os.path.exists(rn_token):
        sys.exit("python_bench.py: the rename lock %s did not end released" % rn_file)

    print("python %s, library %s, command %s; %d rounds, sync=%s"
          % (sys.version.split()[0], library, command, a.rounds, a.sync))
    print("%-52s %12s %12s %8s" % ("", "tokenlock us", "other us", "ratio"))
    labels = {"lock_rename": "with tokenlock.lock() (library) / two renames",
              "lock": "with tokenlock.lock() (library) / with flock",
              "cmd_lock": "with tokenlock.lock() (command) / with flock",
              "keep_alive": "with tokenlock.lock() / the same, keep_alive=False",
              "bare_rename": "with lock(keep_alive=False) (library) / two renames",
              "incr": "increment() (library) / flock'ed counter"}
    for name, variants in pairs:
        tl = statistics.median(times[(name, variants[0][0])])
        fl = statistics.median(times[(name, variants[1][0])])
        print("%-52s %12.1f %12.1f %8.2f" % (labels[name] + " x%d" % variants[0][3], tl, fl,
                                              statistics.median(ratios[name])))
    print("python_lock_rename_ratio=%.2f" % statistics.median(ratios["lock_rename"]))
    print("python_lock_ratio=%.2f" % statistics.median(ratios["lock"]))
    print("python_cmd_lock_ratio=%.2f" % statistics.median(ratios["cmd_lock"]))
    print("python_keep_alive_ratio=%.2f" % statistics.median(ratios["keep_alive"]))
    print("python_bare_lock_rename_ratio=%.2f" % statistics.median(ratios["bare_rename"]))
    print("python_incr_ratio=%.2f" % statistics.median(ratios["incr"]))


if __name__ == "__main__":
    main()
