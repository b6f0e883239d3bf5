#!/usr/bin/python3
"""The conformance driver of the tokenlock command (tools/tokenlock.1): the
line protocol of README.md on stdin and stdout, each request one run of the
command, the token passed from acquire to release, refresh and commit as a
script passes it.

    driver_command.py TOKENLOCK
"""

import json
import os
import subprocess
import sys

COMMAND = sys.argv[1] if len(sys.argv) > 1 else "tokenlock"
held = {"lockdir": None, "token": None}


def seconds(ms):
    return "%.3f" % (int(ms) / 1000)


def wait_args(ms):
    return ["-n"] if int(ms) == 0 else ["-w", seconds(ms)]


def run(args, stdin=""):
    """(answer for a failure or None, stdout)."""
    p = subprocess.run([COMMAND, "--errors=json"] + args, input=stdin, capture_output=True,
                       universal_newlines=True)
    if p.returncode == 0:
        return None, p.stdout.strip()
    lines = p.stderr.strip().splitlines()
    try:
        error = json.loads(lines[-1])
    except (IndexError, ValueError):
        return "unanswered: status %d, %s" % (p.returncode, p.stderr.strip()), ""
    if error["error"] == "system":
        return "error system %d" % error["errno"], ""
    return "error " + error["error"], ""


def mode_args(mode):
    """acquire's fourth word: none, "shared" or "slots=N"."""
    if mode is None:
        return []
    if mode.startswith("slots="):
        return ["--slots", mode[len("slots="):]]
    return ["--shared"]


def acquire(lockdir, wait_ms, lease_ms, mode=None):
    # The driver owns the lock, as a script's shell does with --pid $$.
    failed, token = run(["acquire"] + wait_args(wait_ms) + mode_args(mode) +
                        ["--lease", seconds(lease_ms), "--pid", str(os.getpid()), lockdir])
    if not failed:
        held.update(lockdir=lockdir, token=token)
    return failed


def refresh(lease_ms):
    failed, token = run(["refresh", "--lease", seconds(lease_ms), held["lockdir"], held["token"]])
    if not failed:
        held["token"] = token
    return failed


def holder(lockdir):
    failed, out = run(["status", "--json", lockdir])
    if failed:
        return failed
    status = json.loads(out.splitlines()[0])
    if status["state"] == "free":
        return "ok free"
    words = [status["owner"]] + (["stale"] if status["stale"] else []) + \
        (["legacy"] if status.get("legacy") else [])
    return "ok " + ",".join(words)


def holders(lockdir):
    """One word per holder, sorted: exclusive, shared, slot/N, waiting."""
    failed, out = run(["status", "--json", lockdir])
    if failed:
        return failed
    status = json.loads(out.splitlines()[0])
    if status["state"] == "free":
        return "ok free"
    words = []
    for h in status["holders"]:
        words.append("waiting" if h["waiting_writer"] else
                     "exclusive" if h["mode"] == "exclusive" else
                     "slot/%d" % h["slots"] if h.get("slots") else "shared")
    return "ok " + ",".join(sorted(words))


def increment(path, wait_ms):
    failed, out = run(["incr"] + wait_args(wait_ms) + [path])
    return failed or "ok " + out


OPERATIONS = {
    "ping": lambda: None,
    "acquire": acquire,
    "release": lambda: run(["release", held["lockdir"], held["token"]])[0],
    "refresh": refresh,
    "commit": lambda path, text: run(["commit", held["lockdir"], held["token"], path], text)[0],
    "increment": increment,
    "write": lambda path, text: run(["write", path], text)[0],
    "holder": holder,
    "holders": holders,
}


def serve():
    for line in sys.stdin:
        words = line.split()
        if words == ["quit"]:
            return
        op = OPERATIONS.get(words[0])
        if op is None:
            answer = "unsupported %s: the command has no such operation" % words[0]
        else:
            answer = op(*words[1:]) or "ok"
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
