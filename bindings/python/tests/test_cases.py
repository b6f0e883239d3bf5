"""The shared table of error cases (tests/bindings/cases), run on both
backends: the Perl and PHP suites run the same table, so the three modules
agree on the name of every error."""

import errno
import os
import unittest

from support import REPO, BackendTestCase, tokenlock

CASES = os.path.join(REPO, "tests", "bindings", "cases")
HELD_TOKENS = ("lockfile.4102444800000000.h-0000abcd.1.1.0000000000000001",
               "lockfile.4102444800000000.h-0000abcd.1.1.0000000000000002")


def read_cases(path=CASES):
    """[(name, set-up, operation, expected)] from the table."""
    cases = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            fields = line.split()
            if len(fields) != 4:
                raise ValueError("%s:%d: not NAME SET-UP OPERATION EXPECTED: %r"
                                 % (path, number, line))
            cases.append(tuple(fields))
    return cases


class CaseRunner:
    """One case in directory `d`: L is the lock, C the counter."""

    def __init__(self, d):
        self.lock = os.path.join(d, "L")
        self.counter = os.path.join(d, "C")
        self.dir = d
        self.handle = None

    def set_up(self, what):
        if what == "-":
            return
        if what == "held":
            self.handle = tokenlock.Lock.acquire(self.lock, wait=0)
        elif what == "taken_over":
            self.handle = tokenlock.Lock.acquire(self.lock, wait=0)
            os.rename(os.path.join(self.lock, self.handle.token),
                      os.path.join(self.lock, "lockfile"))
        elif what == "released":
            self.handle = tokenlock.Lock.acquire(self.lock, wait=0)
            self.handle.release()
        elif what.startswith("counter="):
            with open(self.counter, "w") as f:
                f.write(what[len("counter="):] + "\n")
        elif what == "world_writable":
            os.makedirs(os.path.join(self.lock, "lockfile"))
            os.chmod(self.lock, 0o777)
        elif what == "no_token":
            os.mkdir(self.lock)
            open(os.path.join(self.lock, "stray"), "w").close()
        elif what == "two_tokens":
            for token in HELD_TOKENS:
                os.makedirs(os.path.join(self.lock, token))
        else:
            raise ValueError("unknown set-up %r" % what)

    def operate(self, what):
        """The value the operation returned (None for none)."""
        if what == "try_lock":
            tokenlock.Lock.acquire(self.lock, wait=0).release()
        elif what == "wait_lock":
            tokenlock.Lock.acquire(self.lock, wait=0.2).release()
        elif what == "lock_lease_0":
            tokenlock.Lock.acquire(self.lock, wait=0, lease=0).release()
        elif what == "release":
            self.handle.release()
        elif what == "refresh":
            self.handle.refresh()
        elif what == "increment":
            return tokenlock.increment(self.counter, wait=0)
        elif what == "read_counter":
            return tokenlock.read_counter(self.counter)
        else:
            raise ValueError("unknown operation %r" % what)
        return None

    def outcome(self, operation):
        """What came out, in the table's words."""
        try:
            value = self.operate(operation)
        except tokenlock.Error as e:
            if e.code == "system":
                return "system:" + errno.errorcode.get(e.errno, str(e.errno))
            return e.code
        return "value:none" if value is None else "value:%d" % value

    def snapshot(self):
        """The counter's contents (None when missing) and the entries of L."""
        try:
            with open(self.counter, "rb") as f:
                counter = f.read()
        except FileNotFoundError:
            counter = None
        entries = sorted(os.listdir(self.lock)) if os.path.isdir(self.lock) else None
        return counter, entries

    def close(self):
        if self.handle is not None and self.handle.held:
            try:
                self.handle.release()
            except tokenlock.Error:
                pass


class CasesTest:
    def test_the_table_has_every_case_the_modules_must_agree_on(self):
        names = {case[0] for case in read_cases()}
        for needed in ("busy", "timed_out", "lock_lost", "not_owner", "corrupt_data", "overflow",
                       "untrusted", "bad_argument", "missing_counter", "token_missing",
                       "lock_corrupt"):
            self.assertIn(needed, names)

    def test_every_case_of_the_shared_table(self):
        for name, set_up, operation, expected in read_cases():
            with self.subTest(case=name):
                d = self.path(name)
                os.mkdir(d)
                runner = CaseRunner(d)
                try:
                    runner.set_up(set_up)
                    before = runner.snapshot()
                    got = runner.outcome(operation)
                    self.assertEqual(got, expected)
                    if not got.startswith("value:"):
                        self.assertEqual(runner.snapshot(), before, "the failure changed something")
                finally:
                    runner.close()
                    if os.path.isdir(runner.lock):
                        os.chmod(runner.lock, 0o755)


class LibraryCasesTest(CasesTest, BackendTestCase):
    backend = "library"


class CommandCasesTest(CasesTest, BackendTestCase):
    backend = "command"


if __name__ == "__main__":
    unittest.main()
