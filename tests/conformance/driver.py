#!/usr/bin/python3
"""The conformance driver of the Python module (bindings/python/tokenlock.py):
the line protocol of README.md on stdin and stdout.

    driver.py library|command
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "bindings", "python"))
import tokenlock  # noqa: E402

handle = None


def answer(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def acquire(path, wait_ms, lease_ms, how=None):
    global handle
    if how is None:
        share = {}
    elif how == "shared":
        share = {"shared": True}
    elif how.startswith("slots="):
        share = {"slots": int(how[len("slots="):])}
    else:
        raise tokenlock.BadArgument("acquire: %s is neither shared nor slots=N" % how)
    handle = tokenlock.Lock.acquire(path, wait=int(wait_ms) / 1000, lease=int(lease_ms) / 1000,
                                    **share)


def holder_word(h):
    if h.waiting_writer:
        return "waiting"
    if h.mode == "exclusive":
        return "exclusive"
    return "slot/%d" % h.slots if h.slots else "shared"


def holders(path):
    words = sorted(holder_word(h) for h in tokenlock.holders(path))
    return "ok " + (",".join(words) if words else "free")


def update(path, text, pause=None):
    def fn(_current):
        if pause:
            # The conformance runner moves the lock while we hold still.
            answer("paused")
            if sys.stdin.readline().split() != ["go"]:
                raise RuntimeError("expected go")
        return text.encode()
    tokenlock.update_file(path, fn, wait=0)


def count(value):
    return "ok %d" % value


def read(value):
    return "ok none" if value is None else count(value)


OPERATIONS = {
    "ping": lambda: None,
    "acquire": acquire,
    "release": lambda: handle.release(),
    "refresh": lambda lease_ms: handle.refresh(int(lease_ms) / 1000),
    "commit": lambda path, text: handle.commit_file(path, text),
    "holders": holders,
    "update": update,
    "increment": lambda path, wait_ms: count(tokenlock.increment(path, wait=int(wait_ms) / 1000)),
    "read": lambda path: read(tokenlock.read_counter(path)),
    "write": lambda path, text: tokenlock.write_file(path, text),
}


def serve():
    for line in sys.stdin:
        words = line.split()
        if words == ["quit"]:
            return
        op = OPERATIONS.get(words[0])
        if op is None:
            answer("unsupported %s: not in the Python module's API" % words[0])
            continue
        try:
            result = op(*words[1:])
        except tokenlock.Error as e:
            answer("error %s%s" % (e.code, " %d" % e.errno if e.code == "system" else ""))
            continue
        answer(result if isinstance(result, str) else "ok")


if __name__ == "__main__":
    tokenlock.use(sys.argv[1])
    serve()
