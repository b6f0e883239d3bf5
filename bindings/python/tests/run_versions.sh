#!/usr/bin/env bash
# The module's lock, its filelock semantics, its shared locks and
# semaphores, its backends and its build
# backend under every python3 >= 3.9 found other than /usr/bin/python3
# (whose run is the python_binding test): /usr/local's, pyenv's versions,
# and those named in TOKENLOCK_TEST_PYTHONS (paths, separated by spaces).
#   run_versions.sh TOKENLOCK [LIBTOKENLOCK_C]
# Exits 77 (skipped) when there is no other python3 >= 3.9.
set -euo pipefail
export TOKENLOCK_COMMAND=$1
[ -n "${2:-}" ] && export TOKENLOCK_LIBRARY=$2
tests=$(cd "$(dirname "$0")" && pwd)
debian=$(readlink -f /usr/bin/python3 2>/dev/null || true)
seen=" $debian "
ran=0
for p in /usr/local/bin/python3 /usr/local/bin/python3.* \
         "${PYENV_ROOT:-$HOME/.pyenv}"/versions/*/bin/python3 ${TOKENLOCK_TEST_PYTHONS-}; do
  case $p in *-config|*m) continue ;; esac
  [ -x "$p" ] || continue
  "$p" -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null || continue
  real=$(readlink -f "$p")
  case $seen in *" $real "*) continue ;; esac
  seen="$seen$real "
  echo "== $real"
  (cd "$tests" && "$real" -m unittest test_lock test_filelock_semantics test_backends test_build_backend \
     test_shared)
  ran=$((ran + 1))
done
[ "$ran" -gt 0 ] || { echo "SKIP: no python3 >= 3.9 besides /usr/bin/python3"; exit 77; }
echo "run_versions: the module's tests passed under $ran more python3"
