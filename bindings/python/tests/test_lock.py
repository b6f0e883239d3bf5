"""The lock: acquire, busy, release, the with-block, refresh, takeovers,
fork and garbage collection, with each backend."""

import datetime
import gc
import os
import subprocess
import time
import unittest

from support import (COMMAND, TOKEN_RE, Child, CommandTestCase, LibraryTestCase, Signal,
                     in_child, tokenlock)


class Boom(Exception):
    pass


_kept = []


def _die_holding(lockdir):
    # Kept referenced, the child's Lock is never released: the child ends
    # with os._exit, which runs no finalizer.
    _kept.append(tokenlock.Lock.acquire(lockdir))
    return _kept[-1].token


class LockTests:
    def break_lock(self, lockdir, token):
        """Takes the lock over from under its holder, as a process would whose
        clock says the lease has ended."""
        if not os.access(COMMAND, os.X_OK):
            if os.environ.get("TOKENLOCK_COMMAND"):
                self.fail("%s is not executable" % COMMAND)
            self.skipTest("the tokenlock command (%s) is needed to break a lock" % COMMAND)
        p = subprocess.run([COMMAND, "break", "--force", lockdir, token], capture_output=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn(token, os.listdir(lockdir))

    def test_acquire_gives_a_token_of_the_protocols_grammar_and_release_frees_it(self):
        lockdir = self.path("a.lock")
        before = time.time()
        held = tokenlock.Lock.acquire(lockdir, lease=30)
        m = TOKEN_RE.match(held.token)
        self.assertIsNotNone(m, held.token)
        self.assertEqual(int(m.group(4)), os.getpid())
        self.assertEqual(held.expiry_us, int(m.group(1)))
        self.assertEqual(held.expires.tzinfo, datetime.timezone.utc)
        self.assertAlmostEqual(held.expires.timestamp(), before + 30, delta=5)
        self.assertEqual(held.path, os.path.join(lockdir, held.token))
        self.assertTrue(os.path.isdir(held.path))
        self.assertEqual((held.held, held.backend, held.lockdir), (True, self.backend, lockdir))
        self.assertLockHeld(lockdir, held.token)
        held.release()
        self.assertFalse(held.held)
        self.assertLockFree(lockdir)

    def test_a_second_acquirer_is_busy_while_held_and_takes_the_lock_after_release(self):
        lockdir = self.path("a.lock")
        held = tokenlock.Lock.acquire(lockdir)
        checked, released = Signal(), Signal()

        def second():
            checked.sender()
            released.receiver()
            seen = []
            try:
                tokenlock.Lock.acquire(lockdir, wait=0)
                seen.append("acquired")
            except tokenlock.Busy as e:
                seen.append((e.code, lockdir in str(e)))
            seen.append(tokenlock.Lock.try_acquire(lockdir))
            try:
                tokenlock.Lock.acquire(lockdir, wait=0.05)
                seen.append("acquired")
            except tokenlock.Busy as e:
                seen.append(e.code)
            checked.send()
            released.wait()
            mine = tokenlock.Lock.acquire(lockdir, wait=0)
            mine.release()
            return seen, mine.token, os.getpid()

        child = Child(second)
        checked.receiver()
        released.sender()
        checked.wait()
        held.release()
        released.send()
        seen, token, pid = child.result()
        self.assertEqual(seen, [("busy", True), None, "timed_out"])
        self.assertEqual(int(TOKEN_RE.match(token).group(4)), pid)
        self.assertLockFree(lockdir)

    def test_a_holder_that_died_is_taken_over_at_once(self):
        lockdir = self.path("a.lock")
        dead = in_child(_die_holding, lockdir)
        self.assertEqual([n for n in os.listdir(lockdir) if n.startswith("lockfile")], [dead])
        held = tokenlock.Lock.acquire(lockdir, wait=0)
        self.assertNotEqual(held.token, dead)
        held.release()
        self.assertLockFree(lockdir)

    def test_the_with_block_releases_the_lock_on_return(self):
        lockdir = self.path("a.lock")

        def work():
            with tokenlock.lock(lockdir, wait=10.0, lease=60.0) as held:
                self.assertLockHeld(lockdir, held.token)
                return held

        held = work()
        self.assertFalse(held.held)
        self.assertLockFree(lockdir)

    def test_the_with_block_releases_the_lock_on_an_exception_which_goes_on(self):
        lockdir = self.path("a.lock")
        raised = Boom("from the block")
        with self.assertRaises(Boom) as cm:
            with tokenlock.lock(lockdir) as held:
                raise raised
        self.assertIs(cm.exception, raised)
        self.assertFalse(held.held)
        self.assertLockFree(lockdir)

    def test_releasing_twice_is_an_error_of_kind_not_owner(self):
        lockdir = self.path("a.lock")
        held = tokenlock.Lock.acquire(lockdir)
        held.release()
        for op in (held.release, held.refresh):
            with self.assertRaises(tokenlock.Error) as cm:
                op()
            self.assertEqual(cm.exception.code, "not_owner")
            self.assertIn(lockdir, str(cm.exception))
        self.assertLockFree(lockdir)

    def test_a_lock_left_to_the_garbage_collector_is_released(self):
        lockdir = self.path("a.lock")
        box = [tokenlock.Lock.acquire(lockdir)]
        self.assertLockHeld(lockdir, box[0].token)
        with self.assertWarns(ResourceWarning):
            box.clear()
            gc.collect()
        self.assertLockFree(lockdir)

    def test_refresh_starts_a_new_lease_under_a_new_token(self):
        lockdir = self.path("a.lock")
        held = tokenlock.Lock.acquire(lockdir, lease=5)
        old_token, old_expiry = held.token, held.expiry_us
        held.refresh(lease=120)
        self.assertNotEqual(held.token, old_token)
        self.assertEqual(held.token.split(".", 2)[2], old_token.split(".", 2)[2])
        self.assertGreater(held.expiry_us, old_expiry + 100 * 10 ** 6)
        self.assertEqual(held.expiry_us, int(TOKEN_RE.match(held.token).group(1)))
        self.assertLockHeld(lockdir, held.token)
        held.release()
        self.assertLockFree(lockdir)

    def test_refresh_and_release_after_a_takeover_raise_lock_lost(self):
        lockdir = self.path("a.lock")
        held = tokenlock.Lock.acquire(lockdir)
        self.break_lock(lockdir, held.token)
        with self.assertRaises(tokenlock.LockLost) as cm:
            held.refresh()
        self.assertEqual(cm.exception.code, "lock_lost")
        self.assertIn(lockdir, str(cm.exception))
        with self.assertRaises(tokenlock.LockLost):
            held.release()
        self.assertLockFree(lockdir)

    def test_release_after_a_takeover_raises_lock_lost_and_leaves_the_new_holder_alone(self):
        lockdir = self.path("a.lock")
        held = tokenlock.Lock.acquire(lockdir)
        self.break_lock(lockdir, held.token)
        new_holder = tokenlock.Lock.acquire(lockdir, wait=0)
        with self.assertRaises(tokenlock.LockLost) as cm:
            held.release()
        self.assertIn(lockdir, str(cm.exception))
        self.assertLockHeld(lockdir, new_holder.token)
        new_holder.release()
        self.assertLockFree(lockdir)

    def test_the_with_block_raises_lock_lost_when_the_lock_was_taken_over(self):
        lockdir = self.path("a.lock")
        with self.assertRaises(tokenlock.LockLost):
            with tokenlock.lock(lockdir) as held:
                self.break_lock(lockdir, held.token)
        self.assertLockFree(lockdir)

    def test_a_lost_lock_is_noted_on_the_blocks_own_exception(self):
        lockdir = self.path("a.lock")
        with self.assertRaises(Boom) as cm:
            with tokenlock.lock(lockdir) as held:
                self.break_lock(lockdir, held.token)
                raise Boom()
        self.assertLockFree(lockdir)
        if not hasattr(BaseException, "add_note"):
            return  # exceptions carry notes from Python 3.11 on
        notes = getattr(cm.exception, "__notes__", [])
        self.assertEqual(len(notes), 1, notes)
        self.assertIn("while releasing the lock", notes[0])
        self.assertIn(lockdir, notes[0])

    def test_a_forked_childs_release_and_refresh_leave_the_parents_lock_held(self):
        lockdir = self.path("a.lock")
        held = tokenlock.Lock.acquire(lockdir)
        token = held.token

        def child():
            out = []
            for op in (held.refresh, held.release):
                try:
                    op()
                    out.append("succeeded")
                except tokenlock.Error as e:
                    out.append(e.code)
            return out

        self.assertEqual(in_child(child), ["not_owner", "not_owner"])
        self.assertEqual(held.token, token)
        self.assertLockHeld(lockdir, token)
        held.release()
        self.assertLockFree(lockdir)

    def test_a_forked_child_that_drops_the_lock_leaves_the_parents_lock_held(self):
        lockdir = self.path("a.lock")
        box = [tokenlock.Lock.acquire(lockdir)]
        token = box[0].token

        def child():
            box.clear()
            gc.collect()
            return True

        self.assertTrue(in_child(child))
        self.assertLockHeld(lockdir, token)
        box[0].release()
        self.assertLockFree(lockdir)

    def test_bad_arguments_are_refused_before_anything_is_touched(self):
        for kwargs in ({"wait": -2}, {"lease": 0}, {"wait": "10"}, {"lease": float("nan")}):
            with self.subTest(**{k: repr(v) for k, v in kwargs.items()}):
                with self.assertRaises(tokenlock.BadArgument) as cm:
                    tokenlock.Lock.acquire(self.path("a.lock"), **kwargs)
                self.assertIsInstance(cm.exception, ValueError)
                self.assertEqual(cm.exception.code, "bad_argument")
        for lockdir in ("", self.path("a\0b.lock")):
            with self.assertRaises(tokenlock.BadArgument):
                tokenlock.Lock.acquire(lockdir)
        self.assertEqual(os.listdir(self.dir), [])

    def test_a_lock_directory_without_a_parent_gives_file_not_found_naming_it(self):
        lockdir = self.path("missing", "a.lock")
        with self.assertRaises(FileNotFoundError) as cm:
            tokenlock.Lock.acquire(lockdir)
        e = cm.exception
        self.assertIsInstance(e, tokenlock.Error)
        self.assertEqual((e.code, e.errno), ("system", 2))
        self.assertIn(lockdir, str(e))
        self.assertIn("No such file or directory", str(e))
        self.assertEqual(os.listdir(self.dir), [])


class LockLibraryTest(LockTests, LibraryTestCase):
    pass


class LockCommandTest(LockTests, CommandTestCase):
    pass


if __name__ == "__main__":
    unittest.main()
