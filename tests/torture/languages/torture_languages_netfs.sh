#!/usr/bin/env bash
# torture.py, then shared.py (readers, writers and slot holders), on the
# network filesystems of the netfs rig (tests/netfs/rig.sh):
# sshfs, GlusterFS with performance.stat-prefetch and performance.open-behind
# off, and MooseFS, each served on this machine only and mounted twice; the
# workers alternate between the two client mounts, so that every increment
# and every takeover also crosses clients.
#   torture_languages_netfs.sh TOKENLOCK LOCK_WORKER LIBTOKENLOCK_C SOURCE
# A filesystem this machine cannot serve is skipped with its reason; with
# none at all the test is skipped (77). TOKENLOCK_TORTURE_SEED replays a run;
# TOKENLOCK_TORTURE_FS chooses the filesystems (default: all three).
set -uo pipefail
tool=$1 worker=$2 library=$3 source=$4
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../netfs/rig.sh
. "$source/tests/netfs/rig.sh"
if ! command -v python3 >/dev/null; then
  echo "SKIP: python3 is not installed (scripts/install-deps installs it)"
  exit 77
fi
# The workers that write the counter themselves (the legacy lock, and
# perl-lock under the Perl module's lock) leave no version mark: a write of
# theirs just after a fenced commit costs the next tokenlock update its
# stale-read wait, or a stale_data refusal where file times have whole
# seconds (docs/atomic-writes.md); nothing is lost. They run on sshfs and
# MooseFS. Not on GlusterFS: there a rename through a name the client still
# caches can move another process's token (docs/protocol.md, Owner marks),
# and the legacy lock, which makes no owner marks, then loses its own lock
# to that (seen: its unlock found its token gone). TOKENLOCK_TORTURE_NETFS_LEGACY=0
# leaves them out everywhere.
legacy_args() {  # FS
  if [ "${TOKENLOCK_TORTURE_NETFS_LEGACY:-1}" = 0 ] || [ "${1#glusterfs}" != "$1" ]; then
    echo --marked-writers-only
  fi
}
seed=()
[ -n "${TOKENLOCK_TORTURE_SEED:-}" ] && seed=(--seed "$TOKENLOCK_TORTURE_SEED")

run_on() {  # FS: 0 pass, 1 fail, 77 skip
  local fs=$1 rc
  if ! rig_require "$fs"; then
    echo "SKIP [$fs]: $RIG_SKIP_REASON"
    return 77
  fi
  work=$(mktemp -d /tmp/tltorture.XXXXXX)   # not local: the EXIT trap needs it
  trap 'rig_stop; rm -rf "$work"' EXIT
  if ! rig_start "$fs" "$work"; then
    echo "FAIL [$fs]: the share did not come up (above)"
    return 1
  fi
  # The limit leaves the rig time to come down within ctest's TIMEOUT.
  timeout -s TERM 200 python3 "$here/torture.py" --tokenlock "$tool" --lock-worker "$worker" \
    --library "$library" --source "$source" --seconds "${TOKENLOCK_TORTURE_SECONDS:-8}" \
    --dir "$RIG_M1" --dir "$RIG_M2" $(legacy_args "$fs") "${seed[@]}"
  rc=$?
  if [ "$rc" != 0 ]; then
    echo "FAIL [$fs]: torture.py exited $rc"
    return "$rc"
  fi
  # The shared holds on the same two mounts; the writers only on the one
  # without client caches (shared.py says why). GlusterFS and MooseFS
  # refuse shared holds (holders leave owner marks there): every
  # implementation must refuse them cleanly.
  refused=()
  case $fs in glusterfs* | moosefs) refused=(--refused) ;; esac
  timeout -s TERM 100 python3 "$here/shared.py" --tokenlock "$tool" --source "$source" --library "$library" \
    --seconds "${TOKENLOCK_TORTURE_SHARED_SECONDS:-8}" --dir "$RIG_M1" --dir "$RIG_M2" "${seed[@]}" "${refused[@]}"
  rc=$?
  [ "$rc" = 0 ] && echo "ok [$fs]" || echo "FAIL [$fs]: shared.py exited $rc"
  return "$rc"
}

failed=0 ran=0
for fs in ${TOKENLOCK_TORTURE_FS:-sshfs glusterfs-nocache moosefs}; do
  (run_on "$fs")
  case $? in
    0) ran=$((ran + 1)) ;;
    77) ;;
    *) ran=$((ran + 1)) failed=1 ;;
  esac
done
if [ "$ran" = 0 ]; then
  echo "SKIP: no network filesystem of the rig can run here (reasons above)"
  exit 77
fi
exit "$failed"
