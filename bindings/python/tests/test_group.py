"""Group sharing names one group (docs/security.md, Who is trusted), with
each backend: the `group` option and TOKENLOCK_GROUP reach the library and
the command, the caller must be a member, a lock directory created gets the
group, and being merely in a group trusts nothing. The cross-user cases
run in forked children that take another uid, so they need root and are
skipped otherwise; tests/security/attacks_python.sh plays them with real
accounts."""

import grp
import os
import stat
import unittest

from support import CommandTestCase, LibraryTestCase, in_child, tokenlock

# A group that root is not in by default, and a user to share it with.
SHARED = "users"
OTHER_UID = 65534


def shared_gid():
    return grp.getgrnam(SHARED).gr_gid


def become(uid, gid, groups):
    """In a forked child: runs as uid with these groups from now on."""
    os.setgroups(groups)
    os.setgid(gid)
    if uid != os.getuid():
        os.setuid(uid)


def outcome(call, *args, **kwargs):
    """What a call ended with, in a form a child can send back."""
    try:
        return ("ok", call(*args, **kwargs))
    except tokenlock.Error as e:
        return ("error", e.code, str(e))


def as_member(fn, *args, **kwargs):
    """fn(*args, **kwargs) in a child running as root with SHARED among its
    groups; its outcome."""
    def run():
        become(0, 0, [0, shared_gid()])
        return outcome(fn, *args, **kwargs)
    return in_child(run)


def as_other(fn, *args, env=None, **kwargs):
    """fn(*args, **kwargs) in a child running as OTHER_UID, whose only group
    is SHARED, with `env` added to its environment; its outcome."""
    def run():
        become(OTHER_UID, shared_gid(), [shared_gid()])
        os.environ.update(env or {})
        return outcome(fn, *args, **kwargs)
    return in_child(run)


class GroupTests:
    def setUp(self):
        super().setUp()
        try:
            shared_gid()
        except KeyError:
            self.skipTest("there is no group %r to share with" % SHARED)
        os.environ.pop("TOKENLOCK_GROUP", None)
        os.environ.pop("TOKENLOCK_DIR_MODE", None)

    def need_root(self):
        if os.geteuid() != 0:
            self.skipTest("taking another uid and group needs root")

    def assertShared(self, lockdir):
        st = os.stat(lockdir)
        self.assertEqual(st.st_gid, shared_gid(), "the lock directory's group")
        self.assertEqual(stat.S_IMODE(st.st_mode) & 0o070, 0o070, oct(st.st_mode))

    def assertNamedGroupRefused(self, result, group, cause):
        self.assertEqual(result[:2], ("error", "bad_argument"), result)
        self.assertIn(group, result[2])
        self.assertIn(cause, result[2])

    # -- the caller's own group ---------------------------------------------------

    def test_a_named_group_is_given_to_the_lock_directories_created(self):
        self.need_root()
        counter, data = self.path("c.count"), self.path("d.txt")
        self.assertEqual(as_member(tokenlock.increment, counter, group=SHARED), ("ok", 1))
        self.assertShared(counter + ".lock")
        self.assertEqual(as_member(tokenlock.update_file, data, lambda old: b"new",
                                   group=shared_gid()), ("ok", b"new"))
        self.assertShared(data + ".lock")

        def hold(lockdir):
            os.environ["TOKENLOCK_GROUP"] = SHARED
            with tokenlock.lock(lockdir) as held:
                return sorted(os.listdir(lockdir)) == [held.token]
        self.assertEqual(as_member(hold, self.path("l.lock")), ("ok", True))
        self.assertShared(self.path("l.lock"))
        self.assertLockFree(self.path("l.lock"), SHARED)

    def test_a_group_the_caller_is_not_in_is_bad_argument_with_nothing_made(self):
        self.need_root()
        counter = self.path("c.count")

        def refused(group):
            become(0, 0, [0])
            return [outcome(tokenlock.increment, counter, group=group),
                    outcome(tokenlock.update_file, counter, lambda old: b"x", group=group),
                    outcome(tokenlock.Lock.acquire, self.path("l.lock"), group=group)]
        for group, cause in ((SHARED, "not a member"), ("no-such-group-tl", "no such group")):
            with self.subTest(group=group):
                for result in in_child(refused, group):
                    self.assertNamedGroupRefused(result, group, cause)
        self.assertEqual(os.listdir(self.dir), [])

    def test_an_unusable_group_argument_is_refused_before_anything_is_made(self):
        for group in (-1, 2 ** 32, True, 1.5, "", b"", "a\0b", ["users"]):
            with self.subTest(group=group):
                for call in (lambda: tokenlock.increment(self.path("c.count"), group=group),
                             lambda: tokenlock.Lock.acquire(self.path("l.lock"), group=group),
                             lambda: tokenlock.update_file(self.path("d"), bytes, group=group)):
                    with self.assertRaises(tokenlock.BadArgument):
                        call()
        self.assertEqual(os.listdir(self.dir), [])

    # -- another user ----------------------------------------------------------------

    def shared_data(self):
        """A 2770 data directory in SHARED that both users can reach, with a
        counter at 5 whose lock directory root made for SHARED."""
        os.chmod(self.dir, 0o755)
        data = self.path("data")
        os.mkdir(data)
        os.chown(data, 0, shared_gid())
        os.chmod(data, 0o2770)
        counter = os.path.join(data, "c.count")
        self.assertEqual(as_member(tokenlock.increment, counter, by=5, group=SHARED), ("ok", 5))
        return counter

    def test_being_in_the_group_trusts_nothing_until_it_is_named(self):
        self.need_root()
        counter = self.shared_data()
        for env in ({}, {"TOKENLOCK_DIR_MODE": "0775"}):
            with self.subTest(env=env):
                result = as_other(tokenlock.increment, counter, env=env)
                self.assertEqual(result[:2], ("error", "untrusted"), result)
                self.assertIn("refusing", result[2])
                self.assertIn("not the group chosen for sharing", result[2])
                self.assertIn("TOKENLOCK_GROUP", result[2])
                self.assertIn("the group option", result[2])
        self.assertEqual(tokenlock.read_counter(counter), 5)
        self.assertEqual(as_other(tokenlock.increment, counter, group=SHARED), ("ok", 6))
        self.assertEqual(as_other(tokenlock.increment, counter, env={"TOKENLOCK_GROUP": SHARED}),
                         ("ok", 7))
        self.assertEqual(as_member(tokenlock.increment, counter, group=SHARED), ("ok", 8))
        self.assertLockFree(counter + ".lock", SHARED)
        self.assertNoTempFiles()

    def test_the_group_chosen_by_dir_mode_is_only_that_of_the_callers_own_lock_directory(self):
        self.need_root()
        counter = self.shared_data()
        # The other user's own lock directory, group-shared by its mode.
        mine = os.path.join(os.path.dirname(counter), "mine.count")
        self.assertEqual(as_other(tokenlock.increment, mine, env={"TOKENLOCK_DIR_MODE": "0775"}),
                         ("ok", 1))
        st = os.stat(mine + ".lock")
        self.assertEqual((st.st_uid, stat.S_IMODE(st.st_mode) & 0o070), (OTHER_UID, 0o070))
        self.assertEqual(as_other(tokenlock.increment, mine, env={"TOKENLOCK_DIR_MODE": "0775"}),
                         ("ok", 2))
        # Root's lock directory is not the other user's: it takes the name.
        result = as_other(tokenlock.increment, counter, env={"TOKENLOCK_DIR_MODE": "0770"})
        self.assertEqual(result[:2], ("error", "untrusted"), result)
        self.assertEqual(tokenlock.read_counter(counter), 5)

    def test_a_bad_tokenlock_dir_mode_is_bad_argument_naming_it(self):
        for mode in ("0777", "1775", "0655", "u=rwx", "99"):
            with self.subTest(mode=mode):
                os.environ["TOKENLOCK_DIR_MODE"] = mode
                try:
                    with self.assertRaises(tokenlock.BadArgument) as cm:
                        tokenlock.increment(self.path("c.count"))
                finally:
                    del os.environ["TOKENLOCK_DIR_MODE"]
                self.assertIn("TOKENLOCK_DIR_MODE", str(cm.exception))
                self.assertIn(mode, str(cm.exception))
        self.assertFalse(os.path.exists(self.path("c.count")))


class GroupLibraryTest(GroupTests, LibraryTestCase):
    pass


class GroupCommandTest(GroupTests, CommandTestCase):
    pass


if __name__ == "__main__":
    unittest.main()
