"""Choosing the backend: where the library and the command are looked for,
the errors when neither is there, and the two backends sharing one lock."""

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from support import BINDING, COMMAND, LIBRARY, REPO, select_backend, tokenlock

# Run in a fresh interpreter: what `import tokenlock` chose, and what the
# first call does with it.
PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import tokenlock
out = {"backend": tokenlock.backend, "load_error": tokenlock.load_error}
try:
    out["value"] = tokenlock.increment(sys.argv[2])
except tokenlock.Error as e:
    out["error"] = [type(e).__name__, e.code, str(e)]
print(json.dumps(out))
"""


class BackendChoiceTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tokenlock-py-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.addCleanup(self.restore, tokenlock._backend)
        os.mkdir(os.path.join(self.dir, "empty-path"))

    def restore(self, previous):
        tokenlock._backend = previous
        tokenlock._publish()

    def need(self, path, what):
        if not os.path.exists(path):
            if os.environ.get("TOKENLOCK_LIBRARY" if what == "library" else "TOKENLOCK_COMMAND"):
                self.fail("%s does not exist" % path)
            self.skipTest("the %s (%s) was not built" % (what, path))

    def probe(self, **env):
        """Imports the module in a fresh interpreter whose environment holds
        nothing but `env`; what it chose and what an increment did."""
        full = {"PATH": os.path.join(self.dir, "empty-path"), "HOME": self.dir}
        full.update(env)
        p = subprocess.run([sys.executable, "-c", PROBE, BINDING, os.path.join(self.dir, "c.count")],
                           env=full, capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def test_a_missing_library_asked_for_by_name_is_a_clear_error(self):
        before = tokenlock.backend
        missing = os.path.join(self.dir, "nowhere", "libtokenlock_c.so")
        with self.assertRaises(tokenlock.BackendUnavailable) as cm:
            tokenlock.use("library", library=missing)
        self.assertEqual(cm.exception.code, "unavailable")
        self.assertIn(missing, str(cm.exception))
        self.assertIn("TOKENLOCK_LIBRARY", str(cm.exception))
        self.assertEqual(tokenlock.backend, before)

    def test_a_file_that_is_not_the_library_is_a_clear_error(self):
        impostor = os.path.join(self.dir, "libtokenlock_c.so")
        with open(impostor, "w") as f:
            f.write("not a shared object\n")
        with self.assertRaises(tokenlock.BackendUnavailable) as cm:
            tokenlock.use("library", library=impostor)
        self.assertIn(impostor, str(cm.exception))

    def fake_library(self, version):
        """A shared object exporting every function the module binds, whose
        tokenlock_version() says `version`; skipped without a C compiler."""
        cc = shutil.which("cc")
        if cc is None:
            self.skipTest("no C compiler (cc) to build a library of another version")
        names = ["options_init", "acquire", "try_acquire", "release", "refresh", "token",
                 "expiry_us", "holders", "commit_file", "write_file", "buffer_set",
                 "update_file", "increment", "last_error", "last_errno", "strerror"]
        source = os.path.join(self.dir, "fake.c")
        with open(source, "w") as f:
            f.writelines("int tokenlock_%s(void) { return 0; }\n" % n for n in names)
            f.write('const char *tokenlock_version(void) { return "%s"; }\n' % version)
        out = os.path.join(self.dir, "libtokenlock_c-%s.so" % version)
        subprocess.run([cc, "-shared", "-fPIC", "-o", out, source], check=True)
        return out

    def test_a_library_whose_options_differ_is_refused_naming_its_version(self):
        # tokenlock_options gained `group` in 0.2.0 and `mode` and `slots`
        # in 0.3.0: an older library would ignore them, trusting every group
        # of the caller's and taking a shared lock exclusively; a newer one
        # may read fields this module does not fill.
        before = tokenlock.backend
        for version, says in (("0.1.0", "no `group`, so it would share locks with every group"),
                              ("0.2.7", "no `mode` and `slots`, so a shared lock or a "
                                        "semaphore would be taken exclusively"),
                              ("0.4.0", "newer than this tokenlock.py"),
                              ("1.2.0", "newer than this tokenlock.py"),
                              ("0.3", "not MAJOR.MINOR.PATCH")):
            with self.subTest(version=version):
                fake = self.fake_library(version)
                with self.assertRaises(tokenlock.BackendUnavailable) as cm:
                    tokenlock.use("library", library=fake)
                self.assertIn(fake, str(cm.exception))
                self.assertIn(says, str(cm.exception))
                self.assertEqual(tokenlock.backend, before)

    def test_a_library_of_an_older_version_falls_back_to_the_command_saying_why(self):
        self.need(COMMAND, "command")
        fake = self.fake_library("0.1.9")
        out = self.probe(TOKENLOCK_LIBRARY=fake, TOKENLOCK_COMMAND=COMMAND)
        self.assertEqual(out["backend"], "command")
        self.assertIn("version 0.1.9, older than this tokenlock.py", out["load_error"])
        self.assertIn("no `group`", out["load_error"])
        self.assertIn("no `mode` and `slots`", out["load_error"])
        self.assertEqual(out["value"], 1)

    def test_the_options_and_holder_structures_match_the_c_header(self):
        # A field out of place would hand the library a wrong wait, lease,
        # group pointer or mode, or read a holder's fields from the wrong
        # bytes: the layouts are the header's, field by field.
        cc = shutil.which("cc")
        header = os.path.join(REPO, "lib", "include")
        if cc is None or not os.path.exists(os.path.join(header, "tokenlock", "tokenlock.h")):
            self.skipTest("no C compiler (cc) or no lib/include/tokenlock/tokenlock.h")
        structures = (("tokenlock_options", tokenlock._Options),
                      ("tokenlock_holder", tokenlock._Holder))
        source = os.path.join(self.dir, "layout.c")
        with open(source, "w") as f:
            f.write("#include <stddef.h>\n#include <stdio.h>\n#include <tokenlock/tokenlock.h>\n"
                    "int main(void) {\n")
            for c_name, py in structures:
                f.write('  printf("%%zu", sizeof(%s));\n' % c_name)
                f.writelines('  printf(" %%zu", offsetof(%s, %s));\n' % (c_name, n)
                             for n, _ in py._fields_)
                f.write('  printf("\\n");\n')
            f.write("  return 0;\n}\n")
        program = os.path.join(self.dir, "layout")
        subprocess.run([cc, "-I", header, "-o", program, source], check=True)
        lines = subprocess.run([program], capture_output=True, check=True,
                               text=True).stdout.splitlines()
        for (c_name, py), line in zip(structures, lines):
            fields = [name for name, _ in py._fields_]
            python = [ctypes.sizeof(py)] + [getattr(py, n).offset for n in fields]
            self.assertEqual(python, [int(x) for x in line.split()],
                             "sizeof and offsets of %s %s" % (c_name, fields))
        self.assertEqual(len(lines), 2)
        self.assertEqual([n for n, _ in tokenlock._Options._fields_][-2:], ["mode", "slots"])

    def test_holders_through_a_command_older_than_shared_locks_is_a_clear_error(self):
        # Its status --json has no "holders": a held lock must not read as free.
        fake = os.path.join(self.dir, "tokenlock")
        with open(fake, "w") as f:
            f.write('#!/bin/sh\necho \'{"lock_dir":"x","state":"held","token":"lockfile.1.x"}\'\n')
        os.chmod(fake, 0o755)
        tokenlock.use("command", command=fake)
        with self.assertRaises(tokenlock.Error) as cm:
            tokenlock.holders(os.path.join(self.dir, "x.lock"))
        self.assertEqual(cm.exception.code, "command_failed")
        self.assertIn("older than 0.3.0", str(cm.exception))
        self.assertFalse(os.path.exists(os.path.join(self.dir, "x.lock")))

    def test_a_missing_command_asked_for_by_name_is_a_clear_error(self):
        missing = os.path.join(self.dir, "nowhere", "tokenlock")
        with self.assertRaises(tokenlock.BackendUnavailable) as cm:
            tokenlock.use("command", command=missing)
        self.assertIn(missing, str(cm.exception))
        self.assertIn("TOKENLOCK_COMMAND", str(cm.exception))

    def test_an_unknown_backend_is_refused(self):
        with self.assertRaises(tokenlock.BadArgument):
            tokenlock.use("carrier-pigeon")

    def test_without_library_or_command_import_works_and_the_first_call_says_what_is_missing(self):
        lib = os.path.join(self.dir, "no", "libtokenlock_c.so")
        cmd = os.path.join(self.dir, "no", "tokenlock")
        out = self.probe(TOKENLOCK_LIBRARY=lib, TOKENLOCK_COMMAND=cmd)
        self.assertIsNone(out["backend"])
        name, code, message = out["error"]
        self.assertEqual((name, code), ("BackendUnavailable", "unavailable"))
        self.assertIn(lib, message)
        self.assertIn(cmd, message)
        self.assertEqual(out["load_error"], message)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "c.count")))

    def test_without_the_library_the_command_is_used_and_the_reason_kept(self):
        self.need(COMMAND, "command")
        lib = os.path.join(self.dir, "no", "libtokenlock_c.so")
        out = self.probe(TOKENLOCK_LIBRARY=lib, TOKENLOCK_COMMAND=COMMAND)
        self.assertEqual(out["backend"], "command")
        self.assertIn(lib, out["load_error"])
        self.assertEqual(out.get("value"), 1, out)

    def test_the_command_is_found_on_path(self):
        self.need(COMMAND, "command")
        bindir = os.path.join(self.dir, "bin")
        os.mkdir(bindir)
        os.symlink(COMMAND, os.path.join(bindir, "tokenlock"))
        out = self.probe(TOKENLOCK_LIBRARY=os.path.join(self.dir, "no.so"), PATH=bindir)
        self.assertEqual((out["backend"], out.get("value")), ("command", 1), out)

    def test_the_library_is_preferred_when_it_loads(self):
        self.need(LIBRARY, "library")
        out = self.probe(TOKENLOCK_LIBRARY=LIBRARY, TOKENLOCK_COMMAND=COMMAND)
        self.assertEqual((out["backend"], out["load_error"], out.get("value")),
                         ("library", None, 1), out)

    def test_tokenlock_backend_command_forces_the_command(self):
        self.need(LIBRARY, "library")
        self.need(COMMAND, "command")
        out = self.probe(TOKENLOCK_LIBRARY=LIBRARY, TOKENLOCK_COMMAND=COMMAND,
                         TOKENLOCK_BACKEND="command")
        self.assertEqual((out["backend"], out.get("value")), ("command", 1), out)

    def test_tokenlock_backend_library_does_not_fall_back_to_the_command(self):
        self.need(COMMAND, "command")
        lib = os.path.join(self.dir, "no", "libtokenlock_c.so")
        out = self.probe(TOKENLOCK_LIBRARY=lib, TOKENLOCK_COMMAND=COMMAND,
                         TOKENLOCK_BACKEND="library")
        self.assertIsNone(out["backend"])
        self.assertIn(lib, out["error"][2])

    def test_the_librarys_names_for_its_codes_are_the_modules(self):
        select_backend(self, "library")
        lib = tokenlock._backend.lib
        classes = {"busy": tokenlock.Busy, "timed_out": tokenlock.Busy,
                   "lock_lost": tokenlock.LockLost, "corrupt_data": tokenlock.CorruptData,
                   "bad_argument": tokenlock.BadArgument,
                   "dir_sync_failed": tokenlock.DirSyncFailed}
        for code in list(range(0, 17)) + [50, 100, 101]:
            name = lib.tokenlock_strerror(code).decode()
            self.assertNotEqual(name, "unknown", code)
            e = tokenlock._error_for(name, "m", 13 if name == "system" else 0)
            self.assertIsInstance(e, classes.get(name, tokenlock.Error), name)
            self.assertEqual(e.code, name if name != "system" else "system")
        self.assertEqual(lib.tokenlock_strerror(17).decode(), "unknown")
        self.assertEqual(tokenlock.version(), lib.tokenlock_version().decode())

    def test_both_backends_report_the_same_version(self):
        select_backend(self, "library")
        library_version = tokenlock.version()
        select_backend(self, "command")
        self.assertEqual(tokenlock.version(), library_version)

    def test_a_lock_held_through_one_backend_excludes_the_other(self):
        lockdir = os.path.join(self.dir, "a.lock")
        for first, second in (("library", "command"), ("command", "library")):
            with self.subTest(first=first):
                select_backend(self, first)
                held = tokenlock.Lock.acquire(lockdir)
                select_backend(self, second)
                self.assertIsNone(tokenlock.Lock.try_acquire(lockdir))
                self.assertEqual(held.backend, first)
                held.release()
                other = tokenlock.Lock.try_acquire(lockdir)
                self.assertIsNotNone(other)
                self.assertEqual(other.backend, second)
                other.release()


class ErrorsTest(unittest.TestCase):
    def test_errors_keep_their_kind_code_and_errno_through_pickle(self):
        import pickle

        samples = [(tokenlock.Busy("m1", "timed_out"), tokenlock.Busy),
                   (tokenlock.LockLost("m2", "lock_lost"), tokenlock.LockLost),
                   (tokenlock.CorruptData("m3", "corrupt_data"), tokenlock.CorruptData),
                   (tokenlock.BadArgument("m4"), ValueError),
                   (tokenlock._os_failure("m5", 13), PermissionError),
                   (tokenlock._os_failure("m6", 75), tokenlock.OSFailure),
                   (tokenlock.Error("m7", "not_owner"), tokenlock.Error)]
        for e, cls in samples:
            with self.subTest(error=type(e).__name__):
                back = pickle.loads(pickle.dumps(e))
                self.assertIsInstance(back, cls)
                self.assertIsInstance(back, tokenlock.Error)
                self.assertEqual((str(back), back.code, back.errno), (str(e), e.code, e.errno))


if __name__ == "__main__":
    unittest.main()
