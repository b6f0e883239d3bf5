"""Atomic writes, the fenced update and counters, with each backend, from
several processes at once."""

import errno
import os
import select
import subprocess
import time
import unittest

from support import (COMMAND, Child, CommandTestCase, Gate, LibraryTestCase, Signal,
                     counter_value, tokenlock)


class Boom(Exception):
    pass


# Counter files the library refuses, and must leave as they are.
NOT_COUNTERS = [b"garbage\n", b"", b"\n", b"12", b"007\n", b"-1\n", b"1 \n", b"12\n\n",
                b"\xff\n", b"18446744073709551616\n", b"1" * 21 + b"\n"]


class FileTests:
    def write(self, path, data):
        with open(path, "wb") as f:
            f.write(data)

    # -- write_file -----------------------------------------------------------

    def test_write_file_replaces_the_file_atomically_and_leaves_no_temp_file(self):
        target = self.path("data.bin")
        a = b"a" * (1 << 20)
        b = b"b" * (700 * 1024) + b"\n"
        tokenlock.write_file(target, a, sync="none")
        ready, stop = Signal(), Signal()

        def reader():
            ready.sender()
            stop.receiver()
            reads, torn = 0, []
            ready.send()
            while True:
                with open(target, "rb") as f:
                    data = f.read()
                reads += 1
                if data != a and data != b:
                    torn.append((len(data), data[:1], data[-1:]))
                if select.select([stop.r], [], [], 0)[0]:
                    return reads, torn

        child = Child(reader)
        ready.receiver()
        stop.sender()
        ready.wait()
        for i in range(40):
            tokenlock.write_file(target, b if i % 2 == 0 else a, sync="none")
        stop.send()
        reads, torn = child.result()
        self.assertGreater(reads, 0)
        self.assertEqual(torn, [], "a reader saw a torn file")
        with open(target, "rb") as f:
            self.assertEqual(f.read(), a)
        self.assertNoTempFiles()

    def test_write_file_writes_each_durability_level_and_str_as_utf8(self):
        target = self.path("config.txt")
        for sync in ("none", "file", "file_and_dir"):
            with self.subTest(sync=sync):
                tokenlock.write_file(target, "caf\u00e9 " + sync, sync=sync)
                with open(target, "rb") as f:
                    self.assertEqual(f.read(), ("caf\u00e9 " + sync).encode())
        self.assertNoTempFiles()

    def test_write_file_writes_empty_data(self):
        target = self.path("empty")
        self.write(target, b"something")
        tokenlock.write_file(target, b"")
        self.assertEqual(os.path.getsize(target), 0)
        tokenlock.write_file(self.path("new-empty"), "")
        self.assertEqual(os.path.getsize(self.path("new-empty")), 0)
        self.assertNoTempFiles()

    def test_write_file_into_a_missing_directory_fails_naming_it(self):
        target = self.path("missing", "data")
        with self.assertRaises(FileNotFoundError) as cm:
            tokenlock.write_file(target, b"x")
        self.assertIsInstance(cm.exception, tokenlock.Error)
        self.assertIn(target, str(cm.exception))
        self.assertEqual(os.listdir(self.dir), [])

    def test_write_file_over_a_directory_fails_and_leaves_it(self):
        target = self.path("adir")
        os.mkdir(target)
        self.write(os.path.join(target, "inside"), b"kept")
        with self.assertRaises(tokenlock.Error) as cm:
            tokenlock.write_file(target, b"x")
        self.assertIsInstance(cm.exception, OSError)
        self.assertIn(target, str(cm.exception))
        self.assertEqual(os.listdir(target), ["inside"])
        self.assertNoTempFiles()

    def test_write_file_refuses_a_bad_sync_level_and_writes_nothing(self):
        target = self.path("data")
        self.write(target, b"old")
        before = self.snapshot(target)
        with self.assertRaises(tokenlock.BadArgument):
            tokenlock.write_file(target, b"new", sync="always")
        with self.assertRaises(TypeError):
            tokenlock.write_file(target, 42)
        self.assertEqual(self.snapshot(target), before)
        self.assertNoTempFiles()

    # -- update_file ------------------------------------------------------------

    def test_update_file_gives_none_for_a_missing_file_then_its_bytes(self):
        target = self.path("log")
        seen = []

        def append(current):
            seen.append(current)
            return (current or b"") + b"a\0b\n"

        self.assertEqual(tokenlock.update_file(target, append), b"a\0b\n")
        self.assertEqual(tokenlock.update_file(target, append), b"a\0b\na\0b\n")
        self.assertEqual(tokenlock.update_file(target, lambda cur: "\u00e9"), b"\xc3\xa9")
        self.assertEqual(seen, [None, b"a\0b\n"])
        with open(target, "rb") as f:
            self.assertEqual(f.read(), b"\xc3\xa9")
        self.assertLockFree(target + ".lock")
        self.assertNoTempFiles()

    def test_update_file_whose_function_raises_writes_nothing_and_frees_the_lock(self):
        target = self.path("log")
        self.write(target, b"before\n")
        before = self.snapshot(target)
        raised = Boom("refused")

        def refuse(current):
            self.assertEqual(current, b"before\n")
            raise raised

        with self.assertRaises(Boom) as cm:
            tokenlock.update_file(target, refuse)
        self.assertIs(cm.exception, raised)
        with self.assertRaises(TypeError):
            tokenlock.update_file(target, lambda current: 42)
        self.assertEqual(self.snapshot(target), before)
        self.assertLockFree(target + ".lock")
        self.assertNoTempFiles()

    def test_update_file_uses_the_lock_it_is_given(self):
        target = self.path("data")
        lockdir = self.path("other.lock")
        tokenlock.update_file(target, lambda current: b"x", lock=lockdir, wait=1, lease=30,
                              sync="file")
        self.assertTrue(os.path.isdir(lockdir))
        self.assertFalse(os.path.exists(target + ".lock"))
        self.assertLockFree(lockdir)

    def test_update_file_waits_for_the_lock_then_reports_busy(self):
        target = self.path("data")
        self.write(target, b"old")
        before = self.snapshot(target)
        with tokenlock.lock(target + ".lock"):
            for wait, code in ((0, "busy"), (0.05, "timed_out")):
                with self.assertRaises(tokenlock.Busy) as cm:
                    tokenlock.update_file(target, lambda current: b"new", wait=wait)
                self.assertEqual(cm.exception.code, code)
        self.assertEqual(self.snapshot(target), before)
        self.assertNoTempFiles()

    def test_update_file_after_a_takeover_writes_nothing(self):
        if not os.access(COMMAND, os.X_OK):
            self.skipTest("the tokenlock command (%s) is needed to break a lock" % COMMAND)
        target = self.path("data")
        lockdir = target + ".lock"
        self.write(target, b"old")
        before = self.snapshot(target)

        def stalled(current):
            # Another process takes the lock over while we compute.
            token, = [n for n in os.listdir(lockdir) if n.startswith("lockfile.")]
            p = subprocess.run([COMMAND, "break", "--force", lockdir, token],
                               capture_output=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            return b"late"

        with self.assertRaises(tokenlock.LockLost) as cm:
            tokenlock.update_file(target, stalled)
        self.assertIn(target, str(cm.exception))
        self.assertEqual(self.snapshot(target), before)
        self.assertLockFree(lockdir)
        self.assertNoTempFiles()

    # -- counters -----------------------------------------------------------------

    def test_locked_increments_of_a_plain_file_from_8_processes_lose_nothing(self):
        counter = self.path("plain")
        lockdir = self.path("plain.lock")
        self.write(counter, b"0")
        gate = Gate()

        def worker():
            gate.wait()
            for _ in range(50):
                with tokenlock.lock(lockdir, wait=120):
                    with open(counter, "r+b") as f:
                        n = int(f.read())
                        f.seek(0)
                        f.write(b"%d" % (n + 1))
                        f.truncate()
            return True

        children = [Child(worker) for _ in range(8)]
        gate.open()
        self.assertEqual([c.result() for c in children], [True] * 8)
        self.assertEqual(counter_value(counter), 400)
        self.assertLockFree(lockdir)

    def check_increments_from_processes(self, processes, each, **kwargs):
        counter = self.path("hits.count")
        gate = Gate()

        def worker():
            gate.wait()
            return [tokenlock.increment(counter, **kwargs) for _ in range(each)]

        children = [Child(worker) for _ in range(processes)]
        gate.open()
        values = sorted(v for c in children for v in c.result())
        total = processes * each
        self.assertEqual(values, list(range(1, total + 1)), "lost or repeated increments")
        with open(counter, "rb") as f:
            self.assertEqual(f.read(), b"%d\n" % total)
        self.assertLockFree(counter + ".lock")
        self.assertNoTempFiles()

    def test_increment_from_8_processes_is_exact(self):
        self.check_increments_from_processes(8, 50)

    def test_increment_with_a_wait_from_4_processes_is_exact(self):
        self.check_increments_from_processes(4, 25, wait=120, sync="none")

    def test_increment_waits_its_budget_for_a_held_lock_then_raises_busy(self):
        counter = self.path("c.count")
        self.write(counter, b"5\n")
        before = self.snapshot(counter)
        with tokenlock.lock(counter + ".lock") as held:
            started = time.monotonic()
            with self.assertRaises(tokenlock.Busy) as cm:
                tokenlock.increment(counter, wait=0.3)
            waited = time.monotonic() - started
            self.assertEqual(cm.exception.code, "timed_out")
            self.assertIn(counter + ".lock", str(cm.exception))
            self.assertGreaterEqual(waited, 0.3)
            # The command's default is 10 s: the budget given must be the one kept.
            self.assertLess(waited, 5)
            started = time.monotonic()
            with self.assertRaises(tokenlock.Busy) as cm:
                tokenlock.increment(counter, wait=0)
            self.assertEqual(cm.exception.code, "busy")
            self.assertLess(time.monotonic() - started, 5)
            self.assertLockHeld(counter + ".lock", held.token)
        self.assertEqual(self.snapshot(counter), before)
        self.assertNoTempFiles()
        self.assertLockFree(counter + ".lock")
        self.assertEqual(tokenlock.increment(counter, wait=0), 6)

    def test_increment_takes_any_wait_the_module_accepts(self):
        # The command refuses more than a year; the module accepts up to 1e9 s.
        counter = self.path("c.count")
        self.assertEqual(tokenlock.increment(counter, wait=1e9), 1)
        self.assertEqual(tokenlock.increment(counter, wait=0.0001), 2)
        # -1 and inf: a year, the command's longest.
        self.assertEqual(tokenlock.increment(counter, wait=-1), 3)
        self.assertEqual(tokenlock.increment(counter, wait=float("inf")), 4)
        for wait in (-2, float("-inf"), float("nan"), "1", True):
            with self.assertRaises(tokenlock.BadArgument):
                tokenlock.increment(counter, wait=wait)
        self.assertEqual(tokenlock.read_counter(counter), 4)

    def test_increment_adds_by_and_reads_with_zero(self):
        counter = self.path("c.count")
        self.assertIsNone(tokenlock.read_counter(counter))
        self.assertEqual(tokenlock.increment(counter), 1)
        self.assertEqual(tokenlock.increment(counter, by=41), 42)
        self.assertEqual(tokenlock.increment(counter, by=0), 42)
        self.assertEqual(tokenlock.increment(counter, by=0, wait=1), 42)
        self.assertEqual(tokenlock.read_counter(counter), 42)
        self.assertEqual(tokenlock.increment(counter, lock=self.path("x.lock")), 43)
        self.assertTrue(os.path.isdir(self.path("x.lock")))
        with open(counter, "rb") as f:
            self.assertEqual(f.read(), b"43\n")
        for by in (-1, 2 ** 64, 1.5, "1"):
            with self.assertRaises(tokenlock.BadArgument):
                tokenlock.increment(counter, by=by)
        self.assertEqual(tokenlock.read_counter(counter), 43)

    def test_a_corrupt_counter_raises_corrupt_data_and_is_left_as_it_is(self):
        for wait in (None, 5):
            for text in NOT_COUNTERS:
                with self.subTest(wait=wait, text=text):
                    counter = self.path("c.count")
                    self.write(counter, text)
                    before = self.snapshot(counter)
                    with self.assertRaises(tokenlock.CorruptData) as cm:
                        tokenlock.increment(counter, wait=wait)
                    e = cm.exception
                    self.assertEqual(e.code, "corrupt_data")
                    self.assertIn(counter, str(e))
                    self.assertIn("left as it is", str(e))
                    with self.assertRaises(tokenlock.CorruptData):
                        tokenlock.read_counter(counter)
                    self.assertEqual(self.snapshot(counter), before)
                    self.assertLockFree(counter + ".lock")
                    self.assertNoTempFiles()

    def test_the_module_reads_counters_as_the_library_does(self):
        # read_counter (Python) and increment (the backend) must agree on
        # what a counter is, or a peek and a hit would disagree.
        for text, value in ((b"0\n", 0), (b"7\n", 7), (b"18446744073709551615\n", 2 ** 64 - 1)):
            counter = self.path("c.count")
            self.write(counter, text)
            self.assertEqual(tokenlock.read_counter(counter), value)
            self.assertEqual(tokenlock.increment(counter, by=0), value)

    def test_an_increment_that_would_overflow_fails_and_leaves_the_counter(self):
        counter = self.path("c.count")
        self.write(counter, b"18446744073709551615\n")
        before = self.snapshot(counter)
        for wait in (None, 5):
            with self.assertRaises(OSError) as cm:
                tokenlock.increment(counter, wait=wait)
            self.assertEqual(cm.exception.errno, errno.EOVERFLOW)
            self.assertIsInstance(cm.exception, tokenlock.Error)
            self.assertIn(counter, str(cm.exception))
        self.assertEqual(self.snapshot(counter), before)
        self.assertLockFree(counter + ".lock")
        self.assertNoTempFiles()

    def test_increment_of_a_counter_in_a_missing_directory_names_it(self):
        counter = self.path("missing", "c.count")
        with self.assertRaises(FileNotFoundError) as cm:
            tokenlock.increment(counter)
        self.assertIn(self.path("missing"), str(cm.exception))
        self.assertEqual(os.listdir(self.dir), [])

    def test_an_unflushable_directory_still_commits_and_hands_out_the_count(self):
        # A directory its user can write but not read (mode 0333, as upload
        # drop directories are) cannot be opened for fsync(2): a real
        # dir_sync_failed after each commit. The count is made, so the error
        # carries its value.
        drop = self.path("drop")
        os.mkdir(drop)
        os.chmod(self.dir, 0o755)
        os.chmod(drop, 0o333)
        counter, page = os.path.join(drop, "c.count"), os.path.join(drop, "page")
        got = Child(_calls_in_an_unflushable_directory, counter, page).result()
        os.chmod(drop, 0o755)
        fix = "give this user read permission on " + drop
        (k1, v1, m1), (k2, v2, _), (kw, vw, mw), (ku, vu, mu) = got
        self.assertEqual((k1, v1, k2, v2), ("dir_sync_failed", 1, "dir_sync_failed", 2))
        self.assertIn("sync %s: the update is committed, but flushing the directory %s failed"
                      % (counter, drop), m1)
        self.assertIn(fix, m1)
        self.assertEqual((kw, vw), ("dir_sync_failed", None))
        self.assertIn("the new contents are in place", mw)
        self.assertIn(fix, mw)
        self.assertEqual((ku, vu), ("dir_sync_failed", None))
        self.assertIn("the update is committed", mu)
        self.assertIn(fix, mu)
        with open(counter, "rb") as f:
            self.assertEqual(f.read(), b"2\n")
        with open(page, "rb") as f:
            self.assertEqual(f.read(), b"new\nmore\n")
        self.assertNoTempFiles()
        self.assertLockFree(counter + ".lock")
        self.assertLockFree(page + ".lock")

    def test_a_legacy_token_is_waited_for_until_the_timeout_the_module_sets(self):
        # A token of the deployed Perl rename lock, 30 s old: held under the
        # default timeout of 60 s, stale under one of 10 s.
        counter = self.path("c.count")
        lockdir = counter + ".lock"
        os.mkdir(lockdir)
        legacy = "lockfile%d" % (int(time.time()) - 30)
        os.mkdir(os.path.join(lockdir, legacy))
        with self.assertRaises(tokenlock.Busy) as cm:
            tokenlock.increment(counter, wait=0)
        self.assertIn("legacy rename lock", str(cm.exception))
        self.assertIsNone(tokenlock.Lock.try_acquire(lockdir))
        self.assertEqual(os.listdir(lockdir), [legacy])
        self.assertFalse(os.path.exists(counter))
        for bad in (0, -1, "10"):
            with self.assertRaises(tokenlock.BadArgument):
                tokenlock.set_legacy_timeout(bad)
        tokenlock.set_legacy_timeout(10)
        self.addCleanup(tokenlock.set_legacy_timeout, None)
        self.assertEqual(tokenlock.increment(counter, wait=0), 1)
        self.assertEqual(os.listdir(lockdir), ["lockfile"])
        # An acquire takes over such a token as well.
        os.rename(os.path.join(lockdir, "lockfile"), os.path.join(lockdir, legacy))
        held = tokenlock.Lock.try_acquire(lockdir)
        self.assertIsNotNone(held)
        held.release()
        self.assertEqual(os.listdir(lockdir), ["lockfile"])
        self.assertNoTempFiles()


def _calls_in_an_unflushable_directory(counter, page):
    if os.geteuid() == 0:  # root opens any directory: be nobody
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
    out = []
    for call in (lambda: tokenlock.increment(counter), lambda: tokenlock.increment(counter),
                 lambda: tokenlock.write_file(page, b"new\n"),
                 lambda: tokenlock.update_file(page, lambda old: old + b"more\n")):
        try:
            call()
            out.append(("no error", None, ""))
        except tokenlock.DirSyncFailed as e:
            out.append((e.code, e.value, str(e)))
    return out


class FileLibraryTest(FileTests, LibraryTestCase):
    pass


class FileCommandTest(FileTests, CommandTestCase):
    def command_lines(self, fn):
        """The command lines fn() makes the backend run."""
        backend = tokenlock._current()
        lines = []

        def run(args, *rest, **kwargs):
            lines.append([os.fsdecode(a) for a in args])
            return real(args, *rest, **kwargs)

        real = backend._run
        backend._run = run
        try:
            fn()
        finally:
            del backend._run
        return lines

    def test_update_file_with_a_command_that_has_no_commit_says_so_and_writes_nothing(self):
        # A command from before `commit`: every other subcommand works.
        old = self.path("old-tokenlock")
        with open(old, "w") as f:
            f.write('#!/bin/sh\n[ "$1" = commit ] && { echo "unknown command" >&2; exit 64; }\n'
                    'exec "%s" "$@"\n' % COMMAND)
        os.chmod(old, 0o755)
        tokenlock.use("command", command=old)
        target = self.path("data")
        self.write(target, b"old")
        before = self.snapshot(target)
        called = []
        with self.assertRaises(tokenlock.BackendUnavailable) as cm:
            tokenlock.update_file(target, lambda current: called.append(1) or b"new")
        self.assertIn("has no 'commit'", str(cm.exception))
        self.assertEqual(cm.exception.code, "unavailable")
        self.assertEqual(called, [], "the function ran before the commit was known to work")
        self.assertEqual(self.snapshot(target), before)
        self.assertFalse(os.path.exists(target + ".lock"), "asked before anything was locked")
        self.assertNoTempFiles()

    def test_increment_is_one_incr_with_its_wait_passed_on(self):
        counter = self.path("c.count")
        lockdir = self.path("other.lock")
        for kwargs, wait in (({}, ["-w", "10.000000"]), ({"wait": 0}, ["-n"]),
                             ({"wait": 0.3}, ["-w", "0.300000"]),
                             ({"wait": 1e9}, ["-w", "31536000.000000"])):
            with self.subTest(**kwargs):
                lines = self.command_lines(lambda: tokenlock.increment(counter, **kwargs))
                self.assertEqual(lines, [["incr", "--by", "1", "--sync", "file_and_dir"] + wait
                                         + [counter]])
        lines = self.command_lines(lambda: tokenlock.increment(
            counter, by=3, lock=lockdir, wait=2, lease=5, sync="none"))
        self.assertEqual(lines, [["incr", "--by", "3", "--sync", "none", "-w", "2.000000",
                                  "--lock", lockdir, counter]])
        self.assertEqual(tokenlock.read_counter(counter), 7)
        self.assertLockFree(lockdir)


if __name__ == "__main__":
    unittest.main()
