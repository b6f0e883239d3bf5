"""The build backend of the tokenlock Python package (PEP 517, PEP 660).

It needs nothing but the standard library, so `pip install .` works in a
fresh virtual environment with no network: pip finds this backend through
pyproject.toml's backend-path, and has nothing to download for the build
(requires = []), as flit_core builds itself. The package is one module,
tokenlock.py; the wheel holds it and the metadata of pyproject.toml's
[project] table, the sdist the sources it is built from.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile

# What the sdist carries, beside PKG-INFO; the wheel carries MODULE alone.
MODULE = "tokenlock.py"
SDIST_FILES = ("pyproject.toml", "README.md", "LICENSE", MODULE, "build_backend/tokenlock_build.py")
WHEEL_TAG = "py3-none-any"


# ---- pyproject.toml ------------------------------------------------------------


def _value(text, where):
    import ast

    # The TOML this file uses (basic strings, arrays of them, integers and
    # booleans) reads the same as a Python literal.
    text = {"true": "True", "false": "False"}.get(text.strip(), text)
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        raise ValueError("pyproject.toml, %s: %r is beyond what this backend reads without "
                         "tomllib (Python 3.11); write it as a string or an array of strings"
                         % (where, text.strip())) from None


def parse_simple_toml(text):
    """Tables of `key = value` lines, as tomllib reads them, for the TOML
    this package's pyproject.toml is written in; on Python 3.9 and 3.10,
    which have no tomllib. Anything else raises ValueError naming the line."""
    doc, table, pending = {}, {}, None
    doc_table = doc
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if pending is not None:
            key, start, lines = pending
            lines.append(re.sub(r"#[^\"']*$", "", line))
            joined = "\n".join(lines)
            if joined.count("[") == joined.count("]"):
                table[key] = _value(joined, "line %d" % start)
                pending = None
            continue
        if not stripped or stripped.startswith("#"):
            continue
        m = re.match(r"\[([A-Za-z0-9_.-]+)\]$", stripped)
        if m:
            table = doc_table
            for part in m.group(1).split("."):
                table = table.setdefault(part, {})
            continue
        m = re.match(r"([A-Za-z0-9_-]+)\s*=\s*(.*)$", stripped)
        if not m:
            raise ValueError("pyproject.toml, line %d: cannot read %r" % (number, stripped))
        key, rest = m.group(1), m.group(2)
        if rest.startswith("[") and rest.count("[") != rest.count("]"):
            pending = (key, number, [rest])
            continue
        table[key] = _value(re.sub(r"\s+#[^\"']*$", "", rest), "line %d" % number)
    if pending is not None:
        raise ValueError("pyproject.toml, line %d: an array that never ends" % pending[1])
    return doc


def _pyproject(root):
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        raw = f.read()
    try:
        import tomllib
    except ImportError:
        return parse_simple_toml(raw.decode("utf-8"))
    return tomllib.loads(raw.decode("utf-8"))


# ---- metadata ------------------------------------------------------------------


class _Project:
    def __init__(self, root):
        self.root = root
        project = _pyproject(root).get("project", {})
        self.name = project["name"]
        self.version = project["version"]
        self.project = project
        # The distribution's name in file names (PEP 427, PEP 625).
        self.dist = re.sub(r"[-_.]+", "_", self.name).lower()

    def metadata(self):
        """The core metadata (METADATA, PKG-INFO), version 2.1."""
        p = self.project
        lines = ["Metadata-Version: 2.1", "Name: %s" % self.name, "Version: %s" % self.version]
        if p.get("description"):
            lines.append("Summary: %s" % p["description"])
        if p.get("requires-python"):
            lines.append("Requires-Python: %s" % p["requires-python"])
        if isinstance(p.get("license"), str):
            lines.append("License: %s" % p["license"])
        lines += ["Classifier: %s" % c for c in p.get("classifiers", [])]
        lines += ["Requires-Dist: %s" % d for d in p.get("dependencies", [])]
        body = ""
        readme = p.get("readme")
        if isinstance(readme, str):
            kind = "text/markdown" if readme.endswith(".md") else "text/plain"
            lines.append("Description-Content-Type: %s" % kind)
            with open(os.path.join(self.root, readme), encoding="utf-8") as f:
                body = "\n" + f.read()
        return ("\n".join(lines) + "\n" + body).encode("utf-8")


# ---- archives ------------------------------------------------------------------


def _timestamp():
    # Reproducible: SOURCE_DATE_EPOCH when set, else the zip format's epoch.
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch and epoch.isdigit():
        return max(int(epoch), 315532800)
    return 315532800


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def _write_wheel(project, directory, files):
    """A wheel in `directory` holding `files` (name -> bytes) and the
    dist-info; its file name."""
    info = "%s-%s.dist-info" % (project.dist, project.version)
    files = dict(files)
    files[info + "/METADATA"] = project.metadata()
    files[info + "/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: tokenlock_build\n"
                              "Root-Is-Purelib: true\nTag: %s\n" % WHEEL_TAG).encode()
    licence = os.path.join(project.root, "LICENSE")
    if os.path.isfile(licence):
        with open(licence, "rb") as f:
            files[info + "/licenses/LICENSE"] = f.read()
    record = [_record_line(n, d) for n, d in sorted(files.items())] + [info + "/RECORD,,"]
    files[info + "/RECORD"] = ("\n".join(record) + "\n").encode()
    name = "%s-%s-%s.whl" % (project.dist, project.version, WHEEL_TAG)
    stamp = time.gmtime(_timestamp())[:6]
    path = os.path.join(directory, name)
    with zipfile.ZipFile(path + ".part", "w", zipfile.ZIP_DEFLATED) as z:
        for n, data in sorted(files.items(), key=lambda item: item[0].endswith("/RECORD")):
            entry = zipfile.ZipInfo(n, stamp)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(entry, data)
    os.replace(path + ".part", path)
    return name


def _read(root, name):
    with open(os.path.join(root, name), "rb") as f:
        return f.read()


# ---- PEP 517 and PEP 660 hooks ----------------------------------------------------


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    project = _Project(os.getcwd())
    return _write_wheel(project, wheel_directory, {MODULE: _read(project.root, MODULE)})


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # A .pth line puts this directory on sys.path: tokenlock.py is imported
    # from here, edits take effect at once, and the library and command
    # beside it are found as beside an installed copy.
    project = _Project(os.getcwd())
    pth = (os.path.abspath(project.root) + "\n").encode()
    return _write_wheel(project, wheel_directory, {"_%s_editable.pth" % project.dist: pth})


def build_sdist(sdist_directory, config_settings=None):
    project = _Project(os.getcwd())
    base = "%s-%s" % (project.dist, project.version)
    name = base + ".tar.gz"
    path = os.path.join(sdist_directory, name)
    members = [(n, _read(project.root, n)) for n in SDIST_FILES
               if os.path.isfile(os.path.join(project.root, n))]
    members.append(("PKG-INFO", project.metadata()))
    with tarfile.open(path + ".part", "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for n, data in sorted(members):
            entry = tarfile.TarInfo("%s/%s" % (base, n))
            entry.size, entry.mode, entry.mtime = len(data), 0o644, _timestamp()
            tar.addfile(entry, io.BytesIO(data))
    os.replace(path + ".part", path)
    return name
