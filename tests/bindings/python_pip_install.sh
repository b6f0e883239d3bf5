#!/usr/bin/env bash
# The Python module installs as a package the way users install it: into a
# fresh virtual environment (no --system-site-packages) with pip's index
# off (PIP_NO_INDEX=1), so the build has nothing but what the venv's pip
# brings and the in-tree backend (bindings/python/build_backend). Each
# python3 >= 3.9 found is tried: `pip install DIR`, the sdist the backend
# makes installed by pip, and `pip install -e DIR` (pip >= 21.3). The
# installed module, imported from outside the source tree, counts and
# locks (re-entrantly, in a with-block kept alive) through the command.
# The interpreters tried: Debian's, /usr/local's, pyenv's versions, and
# those named in TOKENLOCK_TEST_PYTHONS (paths, separated by spaces);
# WHICH narrows them to Debian's /usr/bin/python3 (debian: every run's
# python_pip_install) or to the others (others: the weekly run's
# python_pip_install_versions, as python_versions is to python_binding).
#   python_pip_install.sh SOURCE_DIR VERSION TOKENLOCK [all|debian|others]
# Exits 77 (skipped) when no python3 >= 3.9 with venv and ensurepip exists.
set -euo pipefail
src=$1 version=$2 tool=$3 which=${4:-all}
case $which in
  all | debian | others) ;;
  *) echo "python_pip_install.sh: WHICH is all, debian or others, not '$which'" >&2; exit 64 ;;
esac
debian=$(readlink -f /usr/bin/python3 2>/dev/null || true)
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
unset PYTHONPATH PIP_FIND_LINKS
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

pythons=()
for p in /usr/bin/python3 /usr/local/bin/python3 /usr/bin/python3.* /usr/local/bin/python3.* \
         "${PYENV_ROOT:-$HOME/.pyenv}"/versions/*/bin/python3 ${TOKENLOCK_TEST_PYTHONS-}; do
  case $p in *-config|*m) continue ;; esac
  [ -x "$p" ] || continue
  "$p" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 9))' 2>/dev/null || continue
  real=$(readlink -f "$p")
  case $which in
    debian) [ "$real" = "$debian" ] || continue ;;
    others) [ "$real" != "$debian" ] || continue ;;
  esac
  case " ${pythons[*]-} " in *" $real "*) ;; *) pythons+=("$real") ;; esac
done
if [ ${#pythons[@]} = 0 ]; then
  case $which in
    debian) echo "SKIP: /usr/bin/python3 is missing, older than 3.9 or without venv and ensurepip (Debian: python3-venv)" ;;
    others) echo "SKIP: no python3 >= 3.9 with venv and ensurepip besides /usr/bin/python3" ;;
    *) echo "SKIP: no python3 >= 3.9 with venv and ensurepip (Debian: python3-venv)" ;;
  esac
  exit 77
fi

# The installed module at work, from outside the source tree: $1 the venv.
check_installed() {
  mkdir -p "$tmp/work" && rm -rf "$tmp/work"/*
  (cd "$tmp/work" && TOKENLOCK_COMMAND=$tool TOKENLOCK_BACKEND=command "$1/bin/python" - "$1" "$2" <<'PY'
import os, sys, threading
import tokenlock
venv, where_from = os.path.realpath(sys.argv[1]), os.path.realpath(sys.argv[2])
where = os.path.realpath(tokenlock.__file__)
assert where.startswith(where_from + os.sep), "imported %s, not the one in %s" % (where, where_from)
assert tokenlock.backend == "command", tokenlock.backend
for expected in (1, 2, 3):
    got = tokenlock.increment("hits.count")
    assert got == expected, (got, expected)
assert tokenlock.read_counter("hits.count") == 3
tokenlock.update_file("notes.txt", lambda old: (old or b"") + b"one\n")
with open("notes.txt", "rb") as f:
    assert f.read() == b"one\n"
lock = tokenlock.Lock("app.lock", wait=None, lease=30)
with lock:
    with lock:
        token = lock.token
        assert any(t.name.startswith("tokenlock-keep-alive") for t in threading.enumerate())
    assert os.listdir("app.lock") == [token], os.listdir("app.lock")
assert os.listdir("app.lock") == ["lockfile"], os.listdir("app.lock")
assert issubclass(tokenlock.TimedOut, TimeoutError)
leftovers = [n for n in os.listdir(".") if ".tmp." in n]
assert not leftovers, leftovers
print("  %s: counted to 3 and locked" % where)
PY
  )
}

check_version() {
  local got
  got=$("$1/bin/pip" show tokenlock | awk '$1 == "Version:" {print $2}')
  [ "$got" = "$version" ] || { echo "FAIL: pip installed version '$got', the project is $version" >&2; exit 1; }
}

n=0
for py in "${pythons[@]}"; do
  n=$((n + 1))
  echo "$py ($("$py" -c 'import platform; print(platform.python_version())'))"
  # A build writes nothing into its sources but __pycache__: build a copy.
  copy=$tmp/src$n
  cp -r "$src/bindings/python" "$copy"
  find "$copy" -name __pycache__ -prune -exec rm -rf {} +

  "$py" -m venv "$tmp/venv$n"
  "$tmp/venv$n/bin/pip" install --quiet "$copy"
  check_version "$tmp/venv$n"
  check_installed "$tmp/venv$n" "$tmp/venv$n"

  # The sdist the backend makes, built as pip's build frontends call it,
  # installs by itself in another venv.
  mkdir "$tmp/dist$n"
  (cd "$copy" && "$py" -c 'import sys; sys.path.insert(0, "build_backend")
import tokenlock_build; print(tokenlock_build.build_sdist(sys.argv[1]))' "$tmp/dist$n") >/dev/null
  "$py" -m venv "$tmp/venv-sdist$n"
  "$tmp/venv-sdist$n/bin/pip" install --quiet "$tmp/dist$n/tokenlock-$version.tar.gz"
  check_version "$tmp/venv-sdist$n"
  check_installed "$tmp/venv-sdist$n" "$tmp/venv-sdist$n"

  # Editable (PEP 660) needs pip 21.3 or newer; an older one is said, not hidden.
  "$py" -m venv "$tmp/venv-edit$n"
  if "$tmp/venv-edit$n/bin/python" -c 'import sys, pip
sys.exit(tuple(int(x) for x in pip.__version__.split(".")[:2]) < (21, 3))'; then
    "$tmp/venv-edit$n/bin/pip" install --quiet -e "$copy"
    check_version "$tmp/venv-edit$n"
    check_installed "$tmp/venv-edit$n" "$copy"
    "$tmp/venv-edit$n/bin/pip" uninstall --quiet --yes tokenlock
    ! "$tmp/venv-edit$n/bin/python" -c 'import tokenlock' 2>/dev/null ||
      { echo "FAIL: tokenlock still imports after pip uninstall of the editable install" >&2; exit 1; }
  else
    echo "  pip install -e: not tried, the venv's pip is older than 21.3"
  fi
  # Nothing left beside the sources but bytecode.
  stray=$(cd "$copy" && find . \( -name __pycache__ -prune \) -o \( -type f -print \) | sort |
    grep -v -x -F -f <(cd "$src/bindings/python" && find . \( -name __pycache__ -prune \) -o \( -type f -print \)) || true)
  [ -z "$stray" ] || { echo "FAIL: the build left files in its sources: $stray" >&2; exit 1; }
done
echo "python_pip_install: tokenlock $version installed offline into fresh venvs of ${#pythons[@]} python3"
