"""Bounded reads (docs/security.md, Writes, reads and run): a FIFO, a device
or a link planted at a counter or an update's target is refused at once,
before the first byte is read, and a file larger than its limit is refused
unread; each time with the path and the cause in the message, the lock free
and nothing written. Each test runs with each backend, its reads in a child
given a few seconds and a few hundred MB, so that a read without a bound
fails the test instead of hanging it or eating the host."""

import errno
import os
import stat
import unittest

from support import CommandTestCase, LibraryTestCase, bounded, tokenlock

# What a refused read may take: far from a blocked read or one of /dev/zero.
PROMPT_SECONDS = 5.0
SMALL_GROWTH_KB = 32 * 1024


def never_called(_current):
    raise AssertionError("the update function was called for a target that was refused")


class ReadTests:
    def assertRefusedAtOnce(self, outcome, what):
        """The child raised (not blocked, not done) promptly and with little
        memory; returns the exception."""
        kind, value, took, grew = outcome
        self.assertNotEqual(kind, "blocked", "%s still blocked after %.0f s" % (what, took))
        self.assertEqual(kind, "raised", "%s did not fail: it returned %r" % (what, value))
        self.assertLess(took, PROMPT_SECONDS, "%s took %.1f s to fail" % (what, took))
        self.assertLess(grew, SMALL_GROWTH_KB, "%s grew by %d KB" % (what, grew))
        return value

    def assertSystemError(self, e, err, path, *words):
        self.assertIsInstance(e, tokenlock.Error)
        self.assertEqual((e.code, e.errno), ("system", err), str(e))
        self.assertIn(path, str(e))
        for word in words:
            self.assertIn(word, str(e))

    def assertNothingWritten(self, path, before):
        """`path` is what it was (the same inode, type, size and time), its
        lock free and no temporary file left."""
        st = os.lstat(path)
        self.assertEqual((st.st_ino, stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns), before)
        if os.path.lexists(path + ".lock"):
            self.assertLockFree(path + ".lock")
        self.assertNoTempFiles()

    def fingerprint(self, path):
        st = os.lstat(path)
        return st.st_ino, stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns

    def fifo(self, name):
        path = self.path(name)
        os.mkfifo(path, 0o666)
        return path

    # -- FIFOs ---------------------------------------------------------------------

    def test_read_counter_of_a_fifo_is_refused_at_once(self):
        fifo = self.fifo("f.count")
        before = self.fingerprint(fifo)
        e = self.assertRefusedAtOnce(bounded(tokenlock.read_counter, fifo), "read_counter(FIFO)")
        self.assertSystemError(e, errno.EINVAL, fifo, "a FIFO, not a regular file", "not read")
        self.assertFalse(os.path.lexists(fifo + ".lock"), "read_counter made a lock directory")
        self.assertNothingWritten(fifo, before)

    def test_increment_of_a_fifo_is_refused_at_once_with_the_lock_free(self):
        fifo = self.fifo("f.count")
        before = self.fingerprint(fifo)
        e = self.assertRefusedAtOnce(bounded(tokenlock.increment, fifo), "increment(FIFO)")
        self.assertIsInstance(e, OSError)
        self.assertIn(fifo, str(e))
        self.assertNothingWritten(fifo, before)

    def test_update_file_of_a_fifo_is_refused_at_once_with_the_lock_free(self):
        fifo = self.fifo("f.txt")
        before = self.fingerprint(fifo)
        e = self.assertRefusedAtOnce(bounded(tokenlock.update_file, fifo, never_called),
                                     "update_file(FIFO)")
        self.assertSystemError(e, errno.EINVAL, fifo, "not a regular file")
        self.assertNothingWritten(fifo, before)

    # -- links ---------------------------------------------------------------------

    def test_read_counter_does_not_follow_a_link_to_dev_zero(self):
        link = self.path("z.count")
        os.symlink("/dev/zero", link)
        before = self.fingerprint(link)
        e = self.assertRefusedAtOnce(bounded(tokenlock.read_counter, link),
                                     "read_counter(link to /dev/zero)")
        self.assertSystemError(e, errno.ELOOP, link, "symbolic link", "not followed",
                               "remove the link")
        self.assertNothingWritten(link, before)

    def test_increment_and_update_do_not_follow_a_link_to_dev_zero(self):
        link = self.path("z.count")
        os.symlink("/dev/zero", link)
        before = self.fingerprint(link)
        for name, call in (("increment", lambda: tokenlock.increment(link)),
                           ("update_file", lambda: tokenlock.update_file(link, never_called))):
            with self.subTest(call=name):
                e = self.assertRefusedAtOnce(bounded(call), name + "(link to /dev/zero)")
                self.assertSystemError(e, errno.ELOOP, link, "symbolic link")
                self.assertEqual(os.readlink(link), "/dev/zero")
                self.assertNothingWritten(link, before)

    def test_read_counter_does_not_follow_a_link_to_a_counter(self):
        # increment() replaces such a link with a file of its own: what the
        # link names is not the counter, and may be another user's file.
        real, link = self.path("real.count"), self.path("c.count")
        with open(real, "wb") as f:
            f.write(b"41\n")
        os.symlink(real, link)
        with self.assertRaises(OSError) as cm:
            tokenlock.read_counter(link)
        self.assertSystemError(cm.exception, errno.ELOOP, link, "symbolic link")
        with open(real, "rb") as f:
            self.assertEqual(f.read(), b"41\n")

    def test_read_counter_of_a_directory_is_eisdir(self):
        d = self.path("d.count")
        os.mkdir(d)
        with self.assertRaises(IsADirectoryError) as cm:
            tokenlock.read_counter(d)
        self.assertSystemError(cm.exception, errno.EISDIR, d, "is a directory")

    # -- sizes ---------------------------------------------------------------------

    def test_a_counter_of_65_bytes_is_corrupt_data_unread_and_left_as_it_is(self):
        counter = self.path("c.count")
        for size, over in ((64, False), (65, True)):
            with self.subTest(size=size):
                with open(counter, "wb") as f:
                    f.write(b"1" * (size - 1) + b"\n")
                before = self.fingerprint(counter)
                for name, call in (("read_counter", tokenlock.read_counter),
                                   ("increment", tokenlock.increment)):
                    with self.assertRaises(tokenlock.CorruptData, msg=name) as cm:
                        call(counter)
                    self.assertIn(counter, str(cm.exception))
                    self.assertIn("left as it is", str(cm.exception))
                    # Past 64 bytes the file is refused by its size, unread.
                    self.assertEqual("more than a counter's 64" in str(cm.exception), over,
                                     str(cm.exception))
                    self.assertNothingWritten(counter, before)

    def test_a_counter_of_2_gib_is_refused_unread(self):
        counter = self.path("c.count")
        with open(counter, "wb") as f:
            f.truncate(2 << 30)  # sparse: costs no disk
        before = self.fingerprint(counter)
        e = self.assertRefusedAtOnce(bounded(tokenlock.read_counter, counter),
                                     "read_counter(2 GiB)")
        self.assertIsInstance(e, tokenlock.CorruptData)
        self.assertIn("holds %d bytes" % (2 << 30), str(e))
        self.assertNothingWritten(counter, before)

    def test_update_file_of_a_target_over_the_read_limit_fails_with_efbig(self):
        target = self.path("big.bin")
        with open(target, "wb") as f:
            f.truncate(tokenlock.READ_LIMIT + 1)
        before = self.fingerprint(target)
        e = self.assertRefusedAtOnce(bounded(tokenlock.update_file, target, never_called),
                                     "update_file(READ_LIMIT + 1 bytes)")
        self.assertSystemError(e, errno.EFBIG, target, "too large")
        self.assertNothingWritten(target, before)


class ReadLibraryTest(ReadTests, LibraryTestCase):
    pass


class ReadCommandTest(ReadTests, CommandTestCase):
    pass


if __name__ == "__main__":
    unittest.main()
