"""The in-tree build backend (build_backend/tokenlock_build.py): what it
reads of pyproject.toml without tomllib, and the wheel and sdist it makes,
checked against the wheel format (RECORD hashes) and against each other."""

import base64
import csv
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest
import zipfile

from support import BINDING

sys.path.insert(0, os.path.join(BINDING, "build_backend"))
import tokenlock_build  # noqa: E402

try:
    import tomllib
except ImportError:  # Python 3.9 and 3.10
    tomllib = None


def _version():
    with open(os.path.join(BINDING, "pyproject.toml"), encoding="utf-8") as f:
        return tokenlock_build.parse_simple_toml(f.read())["project"]["version"]


class BuildBackendTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tokenlock-build-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        here = os.getcwd()
        self.addCleanup(os.chdir, here)

    def hook(self, name, root, *args):
        os.chdir(root)
        return getattr(tokenlock_build, name)(*args)

    @unittest.skipIf(tomllib is None, "tomllib (Python 3.11) is the reference")
    def test_the_reader_without_tomllib_reads_pyproject_as_tomllib_does(self):
        with open(os.path.join(BINDING, "pyproject.toml"), encoding="utf-8") as f:
            text = f.read()
        self.assertEqual(tokenlock_build.parse_simple_toml(text), tomllib.loads(text))

    def test_the_reader_refuses_what_it_cannot_read_naming_the_line(self):
        for text, line in (('[project]\nname = "x"\nversion = 1979-05-27\n', 3),
                           ('[project]\nclassifiers = [\n  "a",\n', 2),
                           ('[project]\n{ inline = 1 }\n', 2)):
            with self.assertRaises(ValueError) as cm:
                tokenlock_build.parse_simple_toml(text)
            self.assertIn("line %d" % line, str(cm.exception))

    def test_the_wheel_holds_the_module_and_a_record_that_matches_it(self):
        name = self.hook("build_wheel", BINDING, self.dir)
        version = _version()
        self.assertEqual(name, "tokenlock-%s-py3-none-any.whl" % version)
        self.assertEqual(os.listdir(self.dir), [name], "a temporary file was left")
        info = "tokenlock-%s.dist-info/" % version
        with zipfile.ZipFile(os.path.join(self.dir, name)) as z:
            names = set(z.namelist())
            self.assertTrue({"tokenlock.py", info + "METADATA", info + "WHEEL",
                             info + "RECORD"} <= names, names)
            with open(os.path.join(BINDING, "tokenlock.py"), "rb") as f:
                self.assertEqual(z.read("tokenlock.py"), f.read())
            rows = list(csv.reader(io.StringIO(z.read(info + "RECORD").decode())))
            self.assertEqual({r[0] for r in rows}, names)
            for path, digest, size in rows:
                if path == info + "RECORD":
                    self.assertEqual((digest, size), ("", ""))
                    continue
                data = z.read(path)
                want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                self.assertEqual((digest, int(size)), ("sha256=" + want.decode(), len(data)))
            meta = z.read(info + "METADATA").decode()
        self.assertIn("Name: tokenlock\nVersion: %s\n" % version, meta)
        self.assertIn("Requires-Python: >=3.9\n", meta)
        self.assertIn("Description-Content-Type: text/markdown\n", meta)

    def test_the_sdist_builds_by_itself_the_same_wheel_as_the_tree(self):
        tree = os.path.join(self.dir, "tree")
        os.mkdir(tree)
        from_tree = self.hook("build_wheel", BINDING, tree)
        sdist = self.hook("build_sdist", BINDING, self.dir)
        with tarfile.open(os.path.join(self.dir, sdist)) as tar:
            base = sdist[:-len(".tar.gz")]
            self.assertIn(base + "/PKG-INFO", tar.getnames())
            for m in tar.getmembers():
                self.assertTrue(m.isfile() and m.name.startswith(base + "/"), m.name)
                # What extractall() with the "data" filter would refuse.
                self.assertNotIn("..", m.name.split("/"))
            # The "data" filter where Python has it (3.12, and 3.9 to 3.11
            # since their 2023 releases): the default of Python 3.14.
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(self.dir, **safe)
        unpacked = os.path.join(self.dir, base)
        again = os.path.join(self.dir, "again")
        os.mkdir(again)
        # In a fresh interpreter, as pip runs a backend: from the sdist alone.
        code = ("import sys; sys.path.insert(0, 'build_backend'); import tokenlock_build; "
                "print(tokenlock_build.build_wheel(sys.argv[1]))")
        out = subprocess.run([sys.executable, "-c", code, again], cwd=unpacked, check=True,
                             capture_output=True, text=True).stdout.strip()
        self.assertEqual(out, from_tree)
        with open(os.path.join(tree, from_tree), "rb") as a, open(os.path.join(again, out),
                                                                   "rb") as b:
            self.assertEqual(a.read(), b.read(), "the wheels differ")

    def test_the_editable_wheel_puts_the_source_directory_on_sys_path(self):
        name = self.hook("build_editable", BINDING, self.dir)
        with zipfile.ZipFile(os.path.join(self.dir, name)) as z:
            pth = [n for n in z.namelist() if n.endswith(".pth")]
            self.assertEqual(len(pth), 1, z.namelist())
            self.assertEqual(z.read(pth[0]).decode(), os.path.abspath(BINDING) + "\n")
            self.assertNotIn("tokenlock.py", z.namelist())

    def test_no_hook_asks_for_anything_to_be_installed(self):
        for hook in ("get_requires_for_build_wheel", "get_requires_for_build_sdist",
                     "get_requires_for_build_editable"):
            self.assertEqual(getattr(tokenlock_build, hook)(), [], hook)


if __name__ == "__main__":
    unittest.main()
