"""What users of py-filelock rely on, with each backend: a lock object
re-entrant in its thread (counted; another thread waits), waiting for ever
(wait=None, -1 or inf), Busy and TimedOut as TimeoutError, and a with-block
that keeps a busy holder's lease alive and reports a lost lock at its end."""

import os
import pickle
import queue
import subprocess
import sys
import threading
import time
import warnings

from support import (BINDING, COMMAND, Child, CommandTestCase, LibraryTestCase, Signal, in_child,
                     tokenlock)

# Every wait below is bounded; none is a sleep standing in for a signal.
BOUND = 10.0


def _hold_until_told(lockdir, held_sig, release_sig):
    held_sig.sender()
    release_sig.receiver()
    lock = tokenlock.Lock.acquire(lockdir)
    held_sig.send()
    release_sig.wait()
    lock.release()
    return True


def _try_take(lockdir):
    other = tokenlock.Lock.try_acquire(lockdir)
    if other is None:
        return False
    other.release()
    return True


_RIVAL = """
import sys
sys.path.insert(0, sys.argv[1])
import tokenlock
tokenlock.use(sys.argv[3])
other = tokenlock.Lock.try_acquire(sys.argv[2])
if other is not None:
    other.release()
print("took" if other is not None else "busy")
"""


def _rival_takes(lockdir):
    """Whether another process takes `lockdir` at once (and gives it back).
    A new interpreter, not a fork: this process runs the keep-alive thread,
    which a forked child would copy in the middle of a refresh."""
    p = subprocess.run([sys.executable, "-c", _RIVAL, BINDING, lockdir, tokenlock.backend],
                       capture_output=True, text=True, timeout=BOUND)
    if p.returncode != 0 or p.stdout.strip() not in ("took", "busy"):
        raise AssertionError("the rival failed: %s%s" % (p.stdout, p.stderr))
    return p.stdout.strip() == "took"


def _kept():
    """The Locks whose leases the module keeps alive now."""
    return tokenlock._keeper.held()


def _keeper_threads():
    return [t for t in threading.enumerate() if t.name == "tokenlock-keep-alive"]


class FilelockSemantics:
    def hold_in_another_process(self, lockdir):
        """A Child holding `lockdir` until its returned signal is sent."""
        held_sig, release_sig = Signal(), Signal()
        child = Child(_hold_until_told, lockdir, held_sig, release_sig)
        held_sig.receiver()
        release_sig.sender()
        held_sig.wait()
        self.addCleanup(_reap, child)
        return child, release_sig

    def in_thread(self, fn, *args):
        """fn(*args) on a thread; a queue that receives ("ok", result) or
        ("raised", exception)."""
        out = queue.Queue()

        def run():
            try:
                out.put(("ok", fn(*args)))
            except BaseException as e:  # noqa: B902 - the test judges it
                out.put(("raised", e))

        t = threading.Thread(target=run, daemon=True)
        t.start()
        self.addCleanup(t.join, BOUND)
        out.thread = t
        return out

    # ---- re-entrant, counted ------------------------------------------------

    def test_a_lock_is_reentrant_in_its_thread_and_the_token_goes_at_the_last_release(self):
        lockdir = self.path("a.lock")
        held = tokenlock.Lock.acquire(lockdir)
        token = held.token
        self.assertIs(held.acquire(), held)
        self.assertIs(held.acquire(wait=0), held)
        self.assertEqual(held.token, token, "a nested acquire took a second token")
        for _ in range(2):
            held.release()
            self.assertTrue(held.held)
            self.assertLockHeld(lockdir, token)
        held.release()
        self.assertFalse(held.held)
        self.assertLockFree(lockdir)
        with self.assertRaises(tokenlock.Error) as cm:
            held.release()
        self.assertEqual(cm.exception.code, "not_owner")

    def test_a_lock_object_made_unheld_is_taken_by_nested_with_blocks(self):
        lockdir = self.path("a.lock")
        lock = tokenlock.Lock(lockdir, wait=5, lease=30)
        self.assertFalse(lock.held)
        self.assertEqual((lock.token, lock.path, lock.expiry_us, lock.expires, lock.backend),
                         (None, None, None, None, None))
        self.assertFalse(os.path.exists(lockdir))
        with lock as outer:
            self.assertIs(outer, lock)
            token = lock.token
            with lock:
                self.assertEqual(lock.token, token)
            self.assertTrue(lock.held)
            self.assertLockHeld(lockdir, token)
        self.assertFalse(lock.held)
        self.assertLockFree(lockdir)
        with lock:  # taken again after the last release
            self.assertTrue(lock.held)
        self.assertLockFree(lockdir)

    def test_another_thread_waits_on_the_same_lock_object_until_the_last_release(self):
        lockdir = self.path("a.lock")
        held = tokenlock.Lock.acquire(lockdir)
        held.acquire()
        first = held.token
        for wait, kind_of in ((0, tokenlock.Busy), (0.05, tokenlock.TimedOut)):
            kind, e = self.in_thread(held.acquire, wait).get(timeout=BOUND)
            self.assertEqual(kind, "raised")
            self.assertIsInstance(e, kind_of)
            self.assertIsInstance(e, TimeoutError)
            self.assertIn(lockdir, str(e))
        waiter = self.in_thread(lambda: (held.acquire(wait=BOUND), held.token)[1])
        held.release()
        # Still counted once: the other thread must not have it.
        with self.assertRaises(queue.Empty):
            waiter.get(timeout=0.3)
        self.assertLockHeld(lockdir, first)
        held.release()
        kind, token = waiter.get(timeout=BOUND)
        self.assertEqual(kind, "ok", token)
        self.assertTrue(held.held)
        self.assertLockHeld(lockdir, token)
        released = self.in_thread(held.release)
        self.assertEqual(released.get(timeout=BOUND), ("ok", None))
        self.assertLockFree(lockdir)

    def test_another_process_waits_while_the_lock_is_held_twice(self):
        lockdir = self.path("a.lock")
        held = tokenlock.Lock.acquire(lockdir)
        held.acquire()
        held.release()
        self.assertFalse(in_child(_try_take, lockdir))
        held.release()
        self.assertTrue(in_child(_try_take, lockdir))

    # ---- waiting for ever -----------------------------------------------------

    def test_wait_none_minus_one_and_inf_wait_for_ever(self):
        lockdir = self.path("a.lock")
        # Each step of the endless wait short, so that several of them pass
        # while the other process holds the lock.
        self.addCleanup(setattr, tokenlock, "_FOREVER_STEP", tokenlock._FOREVER_STEP)
        tokenlock._FOREVER_STEP = 0.1
        for forever in (None, -1, float("inf")):
            child, release_sig = self.hold_in_another_process(lockdir)
            waiter = self.in_thread(tokenlock.Lock.acquire, lockdir, forever)
            with self.assertRaises(queue.Empty, msg="wait=%r gave up" % (forever,)):
                waiter.get(timeout=1.0)
            release_sig.send()
            self.assertTrue(child.result())
            kind, held = waiter.get(timeout=BOUND)
            waiter.thread.join(BOUND)  # gone before the next fork
            self.assertEqual(kind, "ok", held)
            self.assertLockHeld(lockdir, held.token)
            held.release()
            self.assertLockFree(lockdir)

    def test_update_file_and_increment_wait_with_minus_one_and_inf(self):
        lockdir, counter, notes = self.path("a.lock"), self.path("n.count"), self.path("notes")
        child, release_sig = self.hold_in_another_process(lockdir)
        counting = self.in_thread(tokenlock.increment, counter, 1, lockdir, -1)
        updating = self.in_thread(tokenlock.update_file, notes, lambda old: b"x", lockdir,
                                  float("inf"))
        with self.assertRaises(queue.Empty):
            counting.get(timeout=0.5)
        self.assertFalse(os.path.exists(counter))
        self.assertFalse(os.path.exists(notes))
        release_sig.send()
        self.assertTrue(child.result())
        self.assertEqual(counting.get(timeout=BOUND), ("ok", 1))
        self.assertEqual(updating.get(timeout=BOUND), ("ok", b"x"))
        self.assertLockFree(lockdir)
        self.assertNoTempFiles()

    def test_a_nested_acquire_with_wait_none_on_an_unheld_object_takes_the_lock(self):
        lockdir = self.path("a.lock")
        lock = tokenlock.Lock(lockdir, wait=None)
        self.assertIs(lock.acquire(), lock)
        self.assertIs(lock.acquire(wait=-1), lock)
        lock.release()
        lock.release()
        self.assertLockFree(lockdir)

    def test_waits_below_minus_one_are_refused(self):
        lockdir = self.path("a.lock")
        for wait in (-2, -0.5, float("-inf"), float("nan")):
            with self.assertRaises(tokenlock.BadArgument, msg=repr(wait)):
                tokenlock.Lock.acquire(lockdir, wait=wait)
        self.assertFalse(os.path.exists(lockdir))

    # ---- Busy and TimedOut are TimeoutError -----------------------------------

    def test_busy_and_timed_out_are_timeout_errors_and_tokenlock_errors(self):
        lockdir = self.path("a.lock")
        child, release_sig = self.hold_in_another_process(lockdir)
        with self.assertRaises(TimeoutError) as cm:
            tokenlock.Lock.acquire(lockdir, wait=0)
        busy = cm.exception
        self.assertIsInstance(busy, tokenlock.Busy)
        self.assertIsInstance(busy, tokenlock.Error)
        self.assertNotIsInstance(busy, tokenlock.TimedOut)
        self.assertEqual(busy.code, "busy")
        with self.assertRaises(TimeoutError) as cm:
            tokenlock.Lock.acquire(lockdir, wait=0.05)
        timed_out = cm.exception
        self.assertIsInstance(timed_out, tokenlock.TimedOut)
        self.assertIsInstance(timed_out, tokenlock.Busy)
        self.assertEqual(timed_out.code, "timed_out")
        for e in (busy, timed_out):
            self.assertIn(lockdir, str(e))
            self.assertIsNone(e.errno)
            back = pickle.loads(pickle.dumps(e))
            self.assertEqual((type(back), str(back), back.code), (type(e), str(e), e.code))
        with self.assertRaises(TimeoutError):
            tokenlock.increment(self.path("n.count"), lock=lockdir, wait=0)
        self.assertFalse(os.path.exists(self.path("n.count")))
        release_sig.send()
        self.assertTrue(child.result())
        self.assertLockFree(lockdir)

    # ---- the with-block keeps the lease alive ----------------------------------

    def test_the_with_block_refreshes_the_lease_so_a_busy_holder_is_never_taken_over(self):
        lockdir = self.path("a.lock")
        # Refreshed every 0.5 s: a loaded host may delay one refresh by a
        # whole second and the lease still holds.
        lease = 1.5
        with tokenlock.lock(lockdir, lease=lease) as held:
            first = held.expiry_us
            self.assertEqual(_kept(), [held])
            # Busy past the first lease's end, and past the second's.
            deadline = time.monotonic() + BOUND
            while time.time() * 1e6 < first + 2 * lease * 1e6 and time.monotonic() < deadline:
                self.assertFalse(_rival_takes(lockdir), "a live holder was taken over")
            self.assertGreater(time.time() * 1e6, first + 2 * lease * 1e6)
            self.assertGreater(held.expiry_us, first)
        self.assertFalse(held.held)
        self.assertEqual(_kept(), [])
        self.assertLockFree(lockdir)

    def test_without_keep_alive_a_holder_past_its_lease_is_taken_over(self):
        lockdir = self.path("a.lock")
        with self.assertRaises(tokenlock.LockLost):
            with tokenlock.lock(lockdir, lease=0.3, keep_alive=False) as held:
                self.assertEqual(_kept(), [])
                end = held.expiry_us
                deadline = time.monotonic() + BOUND
                taken = False
                while not taken and time.monotonic() < deadline:
                    taken = time.time() * 1e6 > end and _rival_takes(lockdir)
                self.assertTrue(taken)
        self.assertLockFree(lockdir)

    def test_a_lock_lost_under_keep_alive_is_reported_when_the_block_ends(self):
        lockdir = self.path("a.lock")
        if not os.access(COMMAND, os.X_OK):
            self.skipTest("the tokenlock command (%s) is needed to break a lock" % COMMAND)
        with self.assertRaises(tokenlock.LockLost) as cm:
            with tokenlock.lock(lockdir, lease=0.6) as held:
                p = subprocess.run([COMMAND, "break", "--force", lockdir, held.token],
                                   capture_output=True)
                self.assertEqual(p.returncode, 0, p.stderr)
                new_holder = tokenlock.Lock.acquire(lockdir, lease=30)
                # The refresher finds the token gone and stops.
                deadline = time.monotonic() + BOUND
                while held in _kept() and time.monotonic() < deadline:
                    threading.Event().wait(0.01)
                self.assertEqual(_kept(), [])
        self.assertIn(lockdir, str(cm.exception))
        self.assertLockHeld(lockdir, new_holder.token)
        new_holder.release()
        self.assertLockFree(lockdir)

    def test_keep_alive_stops_with_the_last_release_of_nested_blocks(self):
        lockdir = self.path("a.lock")
        lock = tokenlock.Lock(lockdir, lease=30)
        with lock:
            with lock:
                self.assertEqual(_kept(), [lock])
            self.assertEqual(_kept(), [lock])
        self.assertEqual(_kept(), [])
        self.assertLockFree(lockdir)

    def test_one_thread_keeps_every_lease_and_ends_when_none_is_left(self):
        locks = [tokenlock.Lock(self.path("%d.lock" % i), lease=0.6) for i in range(3)]
        first = [lock.__enter__() for lock in locks]
        self.assertEqual(first, locks)
        self.assertEqual(sorted(map(id, _kept())), sorted(map(id, locks)))
        self.assertEqual(len(_keeper_threads()), 1)
        expiries = [lock.expiry_us for lock in locks]
        # Each lease refreshed, by the one thread.
        deadline = time.monotonic() + BOUND
        while (any(lock.expiry_us == e for lock, e in zip(locks, expiries))
               and time.monotonic() < deadline):
            threading.Event().wait(0.02)
        self.assertTrue(all(lock.expiry_us > e for lock, e in zip(locks, expiries)))
        self.assertEqual(len(_keeper_threads()), 1)
        for lock in locks:
            lock.__exit__(None, None, None)
            self.assertLockFree(lock.lockdir)
        self.assertEqual(_kept(), [])
        deadline = time.monotonic() + BOUND
        while _keeper_threads() and time.monotonic() < deadline:
            threading.Event().wait(0.05)
        self.assertEqual(_keeper_threads(), [])

    def test_a_forked_child_leaves_a_kept_alive_lock_to_its_parent(self):
        lockdir = self.path("a.lock")

        def child(held):
            try:
                held.release()
            except tokenlock.Error as e:
                return e.code
            return "released"

        with tokenlock.lock(lockdir, lease=30) as held:
            # Forking with the keep-alive thread running is the case at
            # hand; Python 3.12 and newer warn of any fork of a threaded
            # process.
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "This process .* is multi-threaded",
                                        DeprecationWarning)
                self.assertEqual(in_child(child, held), "not_owner")
            self.assertLockHeld(lockdir, held.token)
        self.assertLockFree(lockdir)


def _reap(child):
    # A child whose result() was taken is reaped already: its pid may be
    # another process's by now.
    try:
        if os.waitpid(child.pid, os.WNOHANG)[0] == 0:
            os.kill(child.pid, 9)
            os.waitpid(child.pid, 0)
    except ChildProcessError:
        pass


class FilelockSemanticsLibraryTest(FilelockSemantics, LibraryTestCase):
    pass


class FilelockSemanticsCommandTest(FilelockSemantics, CommandTestCase):
    pass
