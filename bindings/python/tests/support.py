"""What the tests share: the module under test and its two backends, forked
processes that report back through pipes, and checks of what a failure
must leave behind.

TOKENLOCK_LIBRARY and TOKENLOCK_COMMAND name the library and command under
test (defaults: the build tree). When one of them is set, its backend must
work; when neither is set and the build tree lacks one, its tests are
skipped with the reason.
"""

import os
import pickle
import re
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback
import unittest

TESTS = os.path.dirname(os.path.abspath(__file__))
BINDING = os.path.dirname(TESTS)
REPO = os.path.dirname(os.path.dirname(BINDING))
sys.path.insert(0, BINDING)

import tokenlock  # noqa: E402

LIBRARY = os.environ.get("TOKENLOCK_LIBRARY") or os.path.join(REPO, "build", "lib",
                                                               "libtokenlock_c.so")
COMMAND = os.environ.get("TOKENLOCK_COMMAND") or os.path.join(REPO, "build", "tools",
                                                               "tokenlock")
COUNTER_PY = os.path.join(REPO, "cgi-examples", "python", "counter.py")
COUNTER_CGI = os.environ.get("COUNTER_CGI") or os.path.join(REPO, "build", "cgi-examples",
                                                             "counter", "counter.cgi")

# docs/protocol.md, Token grammar.
TOKEN_RE = re.compile(r"lockfile\.([1-9][0-9]{0,18})\.([A-Za-z0-9_-]{1,32})-([0-9a-f]{8})\."
                      r"([1-9][0-9]{0,9})\.([0-9]{1,20})\.([0-9a-f]{16})\Z")


def select_backend(test, name):
    """Makes `name` the module's backend for this test, or skips the test
    when its library or command was not built and not asked for."""
    try:
        tokenlock.use(name, library=LIBRARY, command=COMMAND)
    except tokenlock.BackendUnavailable as e:
        if os.environ.get("TOKENLOCK_LIBRARY" if name == "library" else "TOKENLOCK_COMMAND"):
            raise
        test.skipTest("the %s backend is not available: %s" % (name, e))
    test.assertEqual(tokenlock.backend, name)


class BackendTestCase(unittest.TestCase):
    """A test run with the backend named by the subclass, in a fresh
    directory that is removed afterwards."""

    backend = None

    def setUp(self):
        super().setUp()
        if self.backend:
            select_backend(self, self.backend)
        self.dir = tempfile.mkdtemp(prefix="tokenlock-py-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def path(self, *names):
        return os.path.join(self.dir, *names)

    # -- what a failure must leave behind --------------------------------------

    def assertNoTempFiles(self, *roots):
        """No temporary file (".NAME.tmp.<hex>") under the test directory or
        the given roots, lock workspaces included."""
        found = []
        for root in (self.dir,) + roots:
            for d, _, files in os.walk(root):
                found += [os.path.join(d, f) for f in files if ".tmp." in f]
        self.assertEqual(found, [], "temporary files were left behind")

    def assertLockFree(self, lockdir, group=None):
        """The lock directory holds the free token, and another process can
        take the lock at once (naming `group`, for a lock shared with one)."""
        self.assertEqual([n for n in os.listdir(lockdir) if n.startswith("lockfile")],
                         ["lockfile"])
        self.assertTrue(in_child(_try_take, lockdir, group),
                        "another process could not take the lock")

    def assertLockHeld(self, lockdir, token):
        """The lock directory holds exactly `token`, and another process
        finds the lock busy."""
        self.assertEqual([n for n in os.listdir(lockdir) if n.startswith("lockfile")], [token])
        self.assertFalse(in_child(_try_take, lockdir), "another process took a held lock")

    def snapshot(self, path):
        """What must not change when an update fails: contents, inode, mtime."""
        st = os.stat(path)
        with open(path, "rb") as f:
            return f.read(), st.st_ino, st.st_mtime_ns


class LibraryTestCase(BackendTestCase):
    backend = "library"


class CommandTestCase(BackendTestCase):
    backend = "command"


def _try_take(lockdir, group=None):
    # As root, another user's lock directory is refused (docs/security.md):
    # the lock is taken as its owner, who trusts it, a member of `group`.
    st = os.stat(lockdir)
    if os.geteuid() == 0 and group is not None:
        os.setgroups([0, st.st_gid])
    if os.geteuid() == 0 and st.st_uid != 0:
        os.setgid(st.st_gid)
        os.setuid(st.st_uid)
    held = tokenlock.Lock.try_acquire(lockdir, group=group)
    if held is None:
        return False
    held.release()
    return True


# ---- processes and pipes --------------------------------------------------------


class Child:
    """fn(*args) run in a forked child. result() waits for it and returns
    what fn returned (pickled through a pipe), or raises AssertionError
    with the child's traceback."""

    def __init__(self, fn, *args):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            status = 0
            try:
                os.close(r)
                try:
                    out = ("ok", fn(*args))
                except BaseException:  # noqa: B902 - everything goes back to the parent
                    out = ("raised", traceback.format_exc())
                with os.fdopen(w, "wb") as f:
                    f.write(pickle.dumps(out))
            except BaseException:  # noqa: B902
                status = 70
            finally:
                # Never back into the test runner of the parent's copy.
                os._exit(status)
        os.close(w)
        self.pid = pid
        self._r = r

    def result(self):
        with os.fdopen(self._r, "rb") as f:
            data = f.read()
        _, status = os.waitpid(self.pid, 0)
        if not data:
            raise AssertionError("child %d ended (status %#x) without a result"
                                 % (self.pid, status))
        kind, value = pickle.loads(data)
        if kind == "raised":
            raise AssertionError("in child %d:\n%s" % (self.pid, value))
        return value


def in_child(fn, *args):
    """fn(*args) in a forked child, waited for: its result."""
    return Child(fn, *args).result()


def _vm_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s in /proc/self/status" % field)


def _bounded_child(w, memory_mb, fn, args):
    import resource

    # A read without a bound fails here at once instead of eating the host.
    room = (_vm_kb("VmSize") + memory_mb * 1024) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (room, room))
    before = _vm_kb("VmRSS")
    started = time.monotonic()
    try:
        out = ("ok", fn(*args))
    except Exception as e:  # noqa: BLE001 - the parent judges it
        out = ("raised", e)
    took = time.monotonic() - started
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    with os.fdopen(w, "wb") as f:
        f.write(pickle.dumps(out + (took, grew)))


def bounded(fn, *args, seconds=10.0, memory_mb=512):
    """fn(*args) in a forked child given `seconds` and `memory_mb` more of
    address space: (kind, value, seconds taken, KB its resident set grew),
    kind "ok" (value: the result) or "raised" (value: the exception), or
    ("blocked", None, seconds, None) when it was still running at
    `seconds`, and was then killed."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            _bounded_child(w, memory_mb, fn, args)
        finally:
            os._exit(0)
    os.close(w)
    try:
        if not select.select([r], [], [], seconds)[0]:
            os.kill(pid, signal.SIGKILL)
            return ("blocked", None, seconds, None)
        with os.fdopen(r, "rb", closefd=False) as f:
            data = f.read()
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    if not data:
        raise AssertionError("the child ended without a result (out of memory?)")
    return pickle.loads(data)


class Signal:
    """A one-way pipe for "go on" between processes: send() in one, wait()
    in the other. It replaces sleeping until the other side gets there."""

    def __init__(self):
        self.r, self.w = os.pipe()

    def sender(self):
        """After the fork, in the sending process: drops the reading end."""
        os.close(self.r)
        return self

    def receiver(self):
        """After the fork, in the waiting process: drops the sending end, so
        that a sender that dies ends the wait instead of hanging it."""
        os.close(self.w)
        return self

    def send(self):
        os.write(self.w, b"!")

    def wait(self):
        if os.read(self.r, 1) != b"!":
            raise AssertionError("the other process ended without signalling")


class Gate:
    """Holds any number of children until the parent opens it, so that they
    start together."""

    def __init__(self):
        self.r, self.w = os.pipe()

    def wait(self):
        os.close(self.w)  # the child's copy; the parent's close opens the gate
        os.read(self.r, 1)

    def open(self):
        os.close(self.w)


def counter_value(path):
    with open(path, "rb") as f:
        return int(f.read())
