#!/usr/bin/env bash
# Readers, writers and slot holders of every implementation with shared
# locks, under kill -9 and stops past the lease (shared.py), on local disk:
#   torture_languages_shared.sh TOKENLOCK SOURCE LIBTOKENLOCK_C
# (the Python workers, where the module has shared locks, on the C API)
# TOKENLOCK_TORTURE_SEED replays a run (the script prints its seed);
# TOKENLOCK_TORTURE_SECONDS sets its length (default 20).
set -uo pipefail
tool=$1 source=$2 library=$3
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v python3 >/dev/null; then
  echo "SKIP: python3 is not installed (scripts/install-deps installs it)"
  exit 77
fi
seed=()
[ -n "${TOKENLOCK_TORTURE_SEED:-}" ] && seed=(--seed "$TOKENLOCK_TORTURE_SEED")
exec python3 "$here/shared.py" --tokenlock "$tool" --source "$source" --library "$library" \
  --seconds "${TOKENLOCK_TORTURE_SECONDS:-20}" "${seed[@]}"
