#!/usr/bin/env bash
# The Python module installs as a package, offline: pip builds it from
# bindings/python/pyproject.toml with Debian's setuptools and wheel (no
# index, no build isolation), and the installed module, imported from
# outside the source tree, counts through the tokenlock command.
#   python_pip_install.sh SOURCE_DIR VERSION TOKENLOCK
# Exits 77 (skipped) when python3-venv is missing.
set -euo pipefail
src=$1 version=$2 tool=$3
[ -x /usr/bin/python3 ] || { echo "SKIP: /usr/bin/python3 is not installed"; exit 77; }
/usr/bin/python3 -c 'import ensurepip, venv, setuptools, wheel' 2>/dev/null ||
  { echo "SKIP: python3-venv, python3-setuptools or python3-wheel is not installed (scripts/install-deps installs them)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A build writes build/ and *.egg-info beside its sources: build a copy.
cp -r "$src/bindings/python" "$tmp/src"
rm -rf "$tmp/src/__pycache__"
# Offline, the build's setuptools and wheel are Debian's: the venv sees them.
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv"
PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
  "$tmp/venv/bin/pip" install --quiet --no-build-isolation "$tmp/src"
installed=$("$tmp/venv/bin/pip" show tokenlock | awk '$1 == "Version:" {print $2}')
[ "$installed" = "$version" ] ||
  { echo "FAIL: pip installed version '$installed', the project is $version" >&2; exit 1; }
mkdir "$tmp/work"
cd "$tmp/work"
TOKENLOCK_COMMAND=$tool TOKENLOCK_BACKEND=command "$tmp/venv/bin/python" - "$tmp/venv" <<'PY'
import os, sys
import tokenlock
venv = os.path.realpath(sys.argv[1])
where = os.path.realpath(tokenlock.__file__)
assert where.startswith(venv + os.sep), "imported %s, not the installed module" % where
assert tokenlock.backend == "command", tokenlock.backend
for expected in (1, 2, 3):
    got = tokenlock.increment("hits.count")
    assert got == expected, (got, expected)
assert tokenlock.read_counter("hits.count") == 3
tokenlock.update_file("notes.txt", lambda old: (old or b"") + b"one\n")
with open("notes.txt", "rb") as f:
    assert f.read() == b"one\n"
leftovers = [n for n in os.listdir(".") if ".tmp." in n]
assert not leftovers, leftovers
print("installed at", where, "and counted to 3")
PY
echo "python_pip_install: tokenlock $version installed offline into a venv and works"
