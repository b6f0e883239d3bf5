#!/usr/bin/python3
"""The runner's own test: a driver that lies in each way an implementation
could go wrong must fail the case that catches it, and one that does what
the case asks must pass, so that no check of conformance.py passes by
construction.

    selftest.py
"""

import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# Answers ok to everything; does what its first argument says, once.
LIAR = r'''
import os, sys
how = sys.argv[1]
for line in sys.stdin:
    w = line.split()
    if w == ["quit"]:
        break
    if how == "dies" and w[0] != "ping":
        sys.exit(3)
    if how == "honest-write" and w[0] == "write":
        open(w[1], "w").write(w[2])
    if how == "leaves-temp" and w[0] == "write":
        d, f = os.path.split(w[1])
        open(os.path.join(d, "." + f + ".tmp.0123456789abcdef"), "w").close()
        open(w[1], "w").write(w[2])
    if how == "renames-planted" and w[0] == "acquire":
        for n in os.listdir(w[1]):
            os.rename(os.path.join(w[1], n), os.path.join(w[1], "lockfile"))
    print("ok", flush=True)
'''

CASES = """
case answers_ok_when_busy_is_due
set token L live +60
do acquire L 0 60000 => busy

case takes_no_token
set free L
do acquire L 0 60000 => ok
after L holds held

case writes_nothing
do write F new => ok
after F reads new

case leaves_a_temporary_file
do write F new => ok
after F reads new

case touches_a_live_token
set token L live +60
do acquire L 0 60000 => ok
after L holds T

case dies
do write F new => ok

case known_but_passes
known liar: marked as failing
do write F new => ok
after F reads new

case passes
do write F new => ok
after F reads new
"""

# (case, how the liar behaves, the line the runner must print)
EXPECTED = [
    ("answers_ok_when_busy_is_due", "honest-write", "FAIL answers_ok_when_busy_is_due"),
    ("takes_no_token", "honest-write", "FAIL takes_no_token"),
    ("writes_nothing", "lazy", "FAIL writes_nothing"),
    ("leaves_a_temporary_file", "leaves-temp", "FAIL leaves_a_temporary_file"),
    ("touches_a_live_token", "renames-planted", "FAIL touches_a_live_token"),
    ("dies", "dies", "FAIL dies"),
    ("known_but_passes", "honest-write", "FAIL known_but_passes"),
    ("passes", "honest-write", "ok passes"),
]


def main():
    failures = 0
    with tempfile.NamedTemporaryFile("w", suffix=".cases") as cases:
        cases.write(CASES)
        cases.flush()
        for case, how, due in EXPECTED:
            p = subprocess.run([sys.executable, os.path.join(HERE, "conformance.py"),
                                "--cases", cases.name, "--case", case, "liar", "--",
                                sys.executable, "-c", LIAR, how],
                               capture_output=True, universal_newlines=True)
            lines = p.stdout.splitlines()
            status_due = 0 if due.startswith("ok ") else 1
            if not lines or not lines[0].startswith(due) or p.returncode != status_due:
                failures += 1
                print("FAIL %s: expected %r and status %d, got status %d: %s%s"
                      % (case, due, status_due, p.returncode, p.stdout, p.stderr))
            else:
                print("ok %s: %s" % (case, lines[0]))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
