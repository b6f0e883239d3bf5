"""Shared locks and semaphores: readers together, a writer alone and not
starved, N slots never exceeded, a dead reader's share taken at once, the
mode errors of ReadWriteLock, holders(), and the fenced commit a shared
hold does not get; with each backend."""

import os
import select
import signal
import threading
import time
import unittest

from support import Child, CommandTestCase, LibraryTestCase, Signal, in_child, tokenlock

# The longest any wait here may take on a loaded host; the tests end as
# soon as their condition holds.
BOUND = 20.0
READERS = 8


def _wait_for(condition, what, bound=BOUND):
    deadline = time.monotonic() + bound
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("%s did not happen within %gs" % (what, bound))
        time.sleep(0.01)


class Pipe:
    """A pipe made before the children are forked, closed at the test's end."""

    def __init__(self, test):
        self.r, self.w = os.pipe()
        test.addCleanup(os.close, self.r)
        test.addCleanup(os.close, self.w)


class Gate(Pipe):
    """Holds children until the parent opens it: one byte for each. (Not
    the end of file, which a child forked meanwhile would hold off by
    keeping the writing end open.)"""

    def __init__(self, test, children):
        super().__init__(test)
        self.children, self.opened = children, False

    def wait(self):
        if os.read(self.r, 1) != b"!":
            raise AssertionError("the gate closed without opening")

    def open(self):
        if not self.opened:
            self.opened = True
            os.write(self.w, b"!" * self.children)


class Arrivals(Pipe):
    """A pipe the children write one byte to as each gets somewhere; the
    parent counts them with a bound."""

    def arrive(self):
        os.write(self.w, b"+")

    def count(self, n, bound=BOUND):
        """Waits for n arrivals, at most `bound` seconds; how many came."""
        got, deadline = 0, time.monotonic() + bound
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.r], [], [], left)[0]:
                break
            got += len(os.read(self.r, n - got))
        return got

    def pending(self):
        """Arrivals already there, without waiting."""
        got = 0
        while select.select([self.r], [], [], 0)[0]:
            got += len(os.read(self.r, 64))
        return got


def _read_and_meet(lockdir, arrivals, gate):
    # Holds a read lock until the parent has seen all readers in: only
    # readers that hold together can all arrive.
    rw = tokenlock.ReadWriteLock(lockdir, wait=BOUND)
    with rw.read_lock():
        arrivals.arrive()
        gate.wait()
        return rw.mode


def _take_slot_and_hold(lockdir, slots, arrivals, gate):
    with tokenlock.Semaphore(lockdir, slots, wait=BOUND) as sem:
        arrivals.arrive()
        gate.wait()
        return sem.held


def _write_when_free(lockdir, arrivals, gate):
    rw = tokenlock.ReadWriteLock(lockdir, wait=BOUND)
    with rw.write_lock():
        arrivals.arrive()
        names = [(h.mode, h.waiting_writer) for h in tokenlock.holders(lockdir)]
        gate.wait()
    return names


def _slot_loop(lockdir, inside, rounds):
    """Takes a slot `rounds` times: (the most holders seen inside at once,
    the holds done)."""
    most = done = 0
    me = "%d" % os.getpid()
    while done < rounds:
        with tokenlock.Semaphore(lockdir, 3, wait=BOUND):
            # A marker exists only while its maker holds a slot, so the
            # markers listed are holders inside at the same moment.
            os.mkdir(os.path.join(inside, me))
            most = max(most, len(os.listdir(inside)))
            os.rmdir(os.path.join(inside, me))
            done += 1
    return most, done


def _try_write(lockdir):
    held = tokenlock.Lock.try_acquire(lockdir)
    if held is None:
        return False
    held.release()
    return True


def _try_read(lockdir):
    held = tokenlock.Lock.try_acquire(lockdir, shared=True)
    if held is None:
        return False
    held.release()
    return True


def _read_and_stop(lockdir, ready):
    # Kept referenced: a Lock collected as garbage would be released.
    held = tokenlock.Lock.acquire(lockdir, shared=True, lease=60)
    ready.send()
    while held:
        signal.pause()


def _release_code(rw):
    try:
        rw.release()
    except tokenlock.Error as e:
        return e.code
    return "released"


def _reap(pid):
    """Kills the child `pid` with SIGKILL and waits for it (once)."""
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


class SharedTests:
    # ---- readers and writers ----------------------------------------------------

    def test_eight_readers_hold_at_once(self):
        lockdir = self.path("r.lock")
        arrivals, gate = Arrivals(self), Gate(self, READERS)
        children = [Child(_read_and_meet, lockdir, arrivals, gate) for _ in range(READERS)]
        try:
            self.assertEqual(arrivals.count(READERS), READERS,
                             "not all readers held the lock at once")
            listed = tokenlock.holders(lockdir)
            self.assertEqual(sorted((h.mode, h.waiting_writer, h.stale) for h in listed),
                             [("shared", False, False)] * READERS)
            self.assertFalse(in_child(_try_write, lockdir), "a writer got in beside readers")
        finally:
            gate.open()
        self.assertEqual([c.result() for c in children], ["read"] * READERS)
        self.assertEqual(tokenlock.holders(lockdir), [])
        self.assertLockFree(lockdir)

    def test_a_writer_waits_for_the_readers_bars_new_ones_and_then_holds_alone(self):
        lockdir = self.path("w.lock")
        readers, reader_gate = Arrivals(self), Gate(self, 2)
        held = [Child(_read_and_meet, lockdir, readers, reader_gate) for _ in range(2)]
        self.assertEqual(readers.count(2), 2)
        writer_in, writer_gate = Arrivals(self), Gate(self, 1)
        writer = Child(_write_when_free, lockdir, writer_in, writer_gate)
        try:
            # The writer's mark: it waits, and new readers wait behind it.
            _wait_for(lambda: any(h.waiting_writer for h in tokenlock.holders(lockdir)),
                      "the writer's waiting mark")
            self.assertEqual(writer_in.pending(), 0, "the writer got in beside readers")
            self.assertFalse(in_child(_try_read, lockdir), "a new reader passed a waiting writer")
            reader_gate.open()
            self.assertEqual([c.result() for c in held], ["read", "read"])
            self.assertEqual(writer_in.count(1), 1, "the writer did not get in")
            listed = tokenlock.holders(lockdir)
            self.assertEqual([(h.mode, h.waiting_writer) for h in listed], [("exclusive", False)])
            self.assertFalse(in_child(_try_read, lockdir), "a reader got in beside the writer")
        finally:
            reader_gate.open()
            writer_gate.open()
        self.assertEqual(writer.result(), [("exclusive", False)])
        self.assertLockFree(lockdir)

    def test_a_reader_killed_with_kill_9_is_taken_over_at_once_by_a_writer(self):
        lockdir = self.path("k.lock")
        ready = Signal()
        pid = os.fork()
        if pid == 0:
            try:
                ready.sender()
                _read_and_stop(lockdir, ready)
            finally:
                os._exit(70)
        self.addCleanup(_reap, pid)
        ready.receiver()
        ready.wait()
        self.assertEqual([h.mode for h in tokenlock.holders(lockdir)], ["shared"])
        _reap(pid)
        started = time.monotonic()
        rw = tokenlock.ReadWriteLock(lockdir, wait=BOUND)
        with rw.write_lock():
            took = time.monotonic() - started
            self.assertEqual([h.mode for h in tokenlock.holders(lockdir)], ["exclusive"])
        # The dead reader's lease had 60 s to run: its death was seen.
        self.assertLess(took, 10.0)
        self.assertLockFree(lockdir)

    # ---- semaphores --------------------------------------------------------------

    def test_a_semaphore_of_three_admits_three_and_the_fourth_waits(self):
        lockdir = self.path("s.lock")
        arrivals, gate = Arrivals(self), Gate(self, 3)
        children = [Child(_take_slot_and_hold, lockdir, 3, arrivals, gate) for _ in range(3)]
        try:
            self.assertEqual(arrivals.count(3), 3)
            self.assertIsNone(tokenlock.Lock.try_acquire(lockdir, slots=3))
            with self.assertRaises(tokenlock.Busy):
                tokenlock.Semaphore(lockdir, 3, wait=0).acquire()
            listed = tokenlock.holders(lockdir)
            self.assertEqual(sorted((h.mode, h.slots) for h in listed), [("shared", 3)] * 3)
            # Another limit is another lock's: it waits too.
            self.assertIsNone(tokenlock.Lock.try_acquire(lockdir, slots=5))
        finally:
            gate.open()
        self.assertEqual([c.result() for c in children], [True] * 3)
        with tokenlock.Semaphore(lockdir, 3, wait=0) as sem:
            self.assertTrue(sem.held)
            self.assertEqual((sem.slots, sem.lockdir), (3, lockdir))
        self.assertLockFree(lockdir)

    def test_a_semaphore_of_three_is_never_exceeded_by_eight_looping_processes(self):
        lockdir, inside = self.path("n.lock"), self.path("inside")
        os.mkdir(inside)
        rounds = 6 if self.backend == "command" else 25
        children = [Child(_slot_loop, lockdir, inside, rounds) for _ in range(8)]
        most, done = zip(*[c.result() for c in children])
        self.assertLessEqual(max(most), 3, "more than 3 holders at once: %s" % (most,))
        self.assertEqual(done, (rounds,) * 8)
        self.assertEqual(os.listdir(inside), [])
        self.assertLockFree(lockdir)

    # ---- mode errors and arguments ----------------------------------------------

    def test_asking_for_the_other_mode_while_holding_is_refused_and_changes_nothing(self):
        lockdir = self.path("m.lock")
        rw = tokenlock.ReadWriteLock(lockdir, wait=0)
        with rw.read_lock():
            with rw.read_lock():  # re-entrant within its mode
                with self.assertRaises(tokenlock.ModeConflict) as cm:
                    rw.acquire_write()
                self.assertIsInstance(cm.exception, RuntimeError)
                self.assertEqual(cm.exception.code, "mode_conflict")
                self.assertIn("upgraded", str(cm.exception))
                self.assertIn(lockdir, str(cm.exception))
                self.assertEqual(rw.mode, "read")
            self.assertEqual([h.mode for h in tokenlock.holders(lockdir)], ["shared"])
        self.assertFalse(rw.held)
        self.assertLockFree(lockdir)
        with rw.write_lock():
            with rw.write_lock():
                with self.assertRaises(tokenlock.ModeConflict) as cm:
                    rw.acquire_read()
                self.assertIn("downgraded", str(cm.exception))
            self.assertEqual(rw.mode, "write")
            self.assertEqual([h.mode for h in tokenlock.holders(lockdir)], ["exclusive"])
        self.assertLockFree(lockdir)
        with self.assertRaises(tokenlock.Error) as cm:
            rw.release()
        self.assertEqual(cm.exception.code, "not_owner")

    def test_acquire_read_and_write_return_holds_a_with_block_ends(self):
        lockdir = self.path("h.lock")
        rw = tokenlock.ReadWriteLock(lockdir)
        with rw.acquire_read(wait=1) as got:
            self.assertIs(got, rw)
            self.assertFalse(in_child(_try_write, lockdir))
            self.assertTrue(in_child(_try_read, lockdir))
        self.assertFalse(rw.held)
        hold = rw.acquire_write(wait=1)
        self.assertFalse(in_child(_try_read, lockdir))
        rw.release()
        self.assertIsNotNone(hold)
        self.assertLockFree(lockdir)

    def test_another_thread_of_the_same_reader_waits_for_its_release(self):
        lockdir = self.path("t.lock")
        rw = tokenlock.ReadWriteLock(lockdir, wait=BOUND)
        rw.acquire_write()
        got = []
        t = threading.Thread(target=lambda: got.append(rw.acquire_read() and rw.release()))
        t.start()
        t.join(0.2)
        self.assertEqual(got, [], "another thread read beside this thread's write")
        rw.release()
        t.join(BOUND)
        self.assertEqual(got, [None])
        self.assertLockFree(lockdir)

    def test_threads_sharing_one_object_are_holders_of_their_own(self):
        lockdir = self.path("p.lock")
        rw = tokenlock.ReadWriteLock(lockdir, wait=BOUND)
        sem = tokenlock.Semaphore(self.path("q.lock"), 2, wait=BOUND)
        # Both threads inside at once, or the barrier breaks at its bound.
        meet = threading.Barrier(2, timeout=BOUND)
        seen, errors = [], []

        def both():
            try:
                with rw.read_lock(), sem:
                    meet.wait()
                    seen.append((rw.mode, sem.held, len(tokenlock.holders(lockdir))))
                    meet.wait()
            except BaseException as e:  # noqa: B902 - reported by the test's thread
                errors.append(e)

        threads = [threading.Thread(target=both) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(BOUND)
        self.assertEqual(errors, [])
        self.assertEqual(seen, [("read", True, 2)] * 2)
        # A thread releases only what it acquired.
        rw.acquire_read()
        t = threading.Thread(target=lambda: errors.append(_release_code(rw)))
        t.start()
        t.join(BOUND)
        self.assertEqual(errors, ["not_owner"])
        self.assertEqual(rw.mode, "read")
        rw.release()
        self.assertLockFree(lockdir)
        self.assertLockFree(self.path("q.lock"))

    def test_bad_slots_are_refused_before_anything_is_made(self):
        for slots in (0, -1, 1000000, 2.5, True, "3"):
            with self.subTest(slots=slots):
                with self.assertRaises(tokenlock.BadArgument):
                    tokenlock.Semaphore(self.path("b.lock"), slots)
                with self.assertRaises(tokenlock.BadArgument):
                    tokenlock.Lock(self.path("b.lock"), slots=slots)
        self.assertFalse(os.path.exists(self.path("b.lock")))

    # ---- holders -----------------------------------------------------------------

    def test_holders_lists_each_holder_with_its_mode_slots_and_lease(self):
        lockdir = self.path("l.lock")
        self.assertEqual(tokenlock.holders(lockdir), [])
        before = time.time() * 1e6
        with tokenlock.lock(lockdir, lease=30) as held:
            (h,) = tokenlock.holders(lockdir)
            self.assertEqual((h.id, h.mode, h.slots, h.waiting_writer, h.stale),
                             (held.token, "exclusive", 0, False, False))
            self.assertAlmostEqual(h.expiry_us, before + 30e6, delta=10e6)
            self.assertAlmostEqual(h.expires.timestamp() * 1e6, h.expiry_us, delta=1)
        first = tokenlock.Lock.acquire(lockdir, slots=2, lease=30)
        second = tokenlock.Lock.acquire(lockdir, slots=2, lease=30)
        try:
            listed = tokenlock.holders(lockdir)
            self.assertEqual(sorted((h.mode, h.slots, h.stale) for h in listed),
                             [("shared", 2, False)] * 2)
            self.assertEqual((first.mode, first.slots, first.path), ("shared", 2, None))
            self.assertIn(second.token, [h.id for h in listed])
        finally:
            first.release()
            second.release()
        self.assertEqual(tokenlock.holders(lockdir), [])

    # ---- the lease and the fence ---------------------------------------------------

    def test_a_shared_with_block_keeps_its_lease_alive(self):
        lockdir = self.path("a.lock")
        lease = 1.5
        with tokenlock.lock(lockdir, lease=lease, shared=True) as held:
            first = held.expiry_us
            deadline = time.monotonic() + BOUND
            while time.time() * 1e6 < first + 2 * lease * 1e6 and time.monotonic() < deadline:
                self.assertFalse(in_child(_try_write, lockdir), "a live reader was taken over")
            self.assertGreater(time.time() * 1e6, first + 2 * lease * 1e6)
            self.assertGreater(held.expiry_us, first)
        self.assertLockFree(lockdir)

    def test_a_shared_holds_commit_is_refused_and_writes_nothing(self):
        lockdir, target = self.path("c.lock"), self.path("data.txt")
        with open(target, "w") as f:
            f.write("before\n")
        before = self.snapshot(target)
        for how in ({"shared": True}, {"slots": 2}):
            with self.subTest(**how):
                with tokenlock.lock(lockdir, **how) as held:
                    with self.assertRaises(tokenlock.BadArgument) as cm:
                        held.commit_file(target, "after\n")
                    self.assertIn("shared hold gives no fence", str(cm.exception))
                    self.assertEqual([h.mode for h in tokenlock.holders(lockdir)], ["shared"])
                    self.assertTrue(held.held)
                self.assertEqual(self.snapshot(target), before)
                self.assertNoTempFiles()
                self.assertLockFree(lockdir)
        with tokenlock.lock(lockdir) as held:
            held.commit_file(target, "after\n")
        with open(target) as f:
            self.assertEqual(f.read(), "after\n")
        self.assertNoTempFiles()
        self.assertLockFree(lockdir)


class LibrarySharedTest(SharedTests, LibraryTestCase):
    pass


class CommandSharedTest(SharedTests, CommandTestCase):
    pass


if __name__ == "__main__":
    unittest.main()
