#!/usr/bin/env bash
# Every implementation on one counter with kill -9 and stops (torture.py),
# then C++ waiters in line beside native lockers (waiters.py), on local
# disk:
#   torture_languages.sh TOKENLOCK LOCK_WORKER LIBTOKENLOCK_C SOURCE
# TOKENLOCK_TORTURE_SEED replays a run (each script prints its seed).
set -uo pipefail
tool=$1 worker=$2 library=$3 source=$4
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v python3 >/dev/null; then
  echo "SKIP: python3 is not installed (scripts/install-deps installs it)"
  exit 77
fi
seed=()
[ -n "${TOKENLOCK_TORTURE_SEED:-}" ] && seed=(--seed "$TOKENLOCK_TORTURE_SEED")
python3 "$here/torture.py" --tokenlock "$tool" --lock-worker "$worker" --library "$library" \
  --source "$source" --seconds "${TOKENLOCK_TORTURE_SECONDS:-15}" "${seed[@]}"
rc=$?
[ "$rc" = 0 ] || exit "$rc"
python3 "$here/waiters.py" --tokenlock "$tool" --lock-worker "$worker" --source "$source" --rounds 12 "${seed[@]}"
