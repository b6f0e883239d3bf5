#!/usr/bin/env bash
# tokenlock and the deployed Perl rename lock (my_flock.pl beside this
# script) sharing lock directories, with real processes:
#   legacy_interop.sh TOKENLOCK LOCK_WORKER
# - Perl scripts, the library (lock_worker incr: increment_counter),
#   `tokenlock incr` and `tokenlock run` increment one counter
#   concurrently, with "lockfile" a directory (as tokenlock makes it) and a
#   plain file (as legacy setups often made it): no error, no lost update;
# - a Perl holder that died is taken over once its timestamp plus the
#   legacy timeout (and the skew allowance) has passed, and not before;
# - the Perl procedure never takes over a tokenlock token, even one whose
#   lease ended long ago and whose name ends in digits.
set -euo pipefail
tool=$1 worker=$2
here=$(cd "$(dirname "$0")" && pwd)
legacy=$here/my_flock.pl
if ! command -v perl >/dev/null; then
  echo "SKIP: perl is not installed (scripts/install-deps installs it)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
pass() { echo "ok: $*"; }

# --- concurrent increments --------------------------------------------------
for setup in directory file; do
  d=$work/$setup
  lock=$d/count.lock
  mkdir -p "$lock"
  if [ "$setup" = directory ]; then mkdir "$lock/lockfile"; else : >"$lock/lockfile"; fi
  echo 0 >"$d/count"
  pids=()
  for i in 1 2 3; do
    perl "$legacy" "$lock" 60 0.002 incr "$d/count" 100 2>"$d/perl$i.err" &
    pids+=($!)
  done
  for i in 1 2 3; do
    (for _ in $(seq 100); do "$tool" incr --lock "$lock" "$d/count" >/dev/null || exit 1; done) \
      2>"$d/incr$i.err" &
    pids+=($!)
  done
  for i in 1 2; do
    "$worker" --lock "$lock" incr "$d/count" 100 "$d/lib$i.log" >"$d/lib$i.out" 2>"$d/lib$i.err" &
    pids+=($!)
  done
  for i in 1 2; do
    (for _ in $(seq 50); do
      "$tool" run -w 60 "$lock" -- sh -c 'v=$(cat "$1"); echo $((v + 1)) >"$1"' sh "$d/count" || exit 1
    done) 2>"$d/run$i.err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || fail "$setup token: a worker failed: $(cat "$d"/*.err)"; done
  errors=$(cat "$d"/*.err)
  [ -z "$errors" ] || fail "$setup token: errors: $errors"
  [ "$(cat "$d/count")" = 900 ] || fail "$setup token: counter $(cat "$d/count"), expected 900"
  [ "$(cat "$d"/lib*.log | sort -un | wc -l)" = 200 ] || fail "$setup token: the library's 200 increments did not each get a value of their own"
  [ "$(ls -A "$lock")" = lockfile ] || fail "$setup token: the lock directory holds $(ls -A "$lock")"
  if [ "$setup" = file ]; then
    [ -f "$lock/lockfile" ] || fail "the legacy file token is no longer a file"
  fi
  leftovers=$(find "$d" -name '.*.tmp.*')
  [ -z "$leftovers" ] || fail "$setup token: temporary files left: $leftovers"
  pass "$setup token: 3 Perl scripts x 100, 2 x 100 increment_counter, 3 x 100 tokenlock incr, 2 x 50 tokenlock run: counter = 900"
done

# --- a dead legacy holder ----------------------------------------------------
lock=$work/stale.lock
mkdir -p "$lock/lockfile"
token=$(perl "$legacy" "$lock" 60 0.01 hold-and-die)
taken=${token#lockfile}
[[ $token =~ ^lockfile[0-9]+$ ]] || fail "the Perl lock left $token"
status=$("$tool" status --legacy-timeout 2 "$lock")
grep -q "legacy rename lock" <<<"$status" || fail "status does not describe the legacy holder: $status"
"$tool" status --json --legacy-timeout 2 "$lock" | grep -q '"legacy":true' || fail "status --json"
# Not before: with a timeout of 60 s the token, seconds old, is held however
# slow this machine is; the library and the command both wait for it.
rc=0
"$tool" acquire -n "$lock" >"$work/early.out" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "a legacy token $(awk -v t="$taken" -v n="$(date +%s.%N)" 'BEGIN { print n - t }') s old was not respected (exit $rc): $(cat "$work/early.out")"
grep -q "legacy rename lock" "$work/early.out" || fail "the refusal does not name the legacy holder: $(cat "$work/early.out")"
rc=0
"$tool" acquire -n --legacy-timeout 2 "$lock" >/dev/null 2>&1 || rc=$?
now=$(date +%s.%N)
# Also with a timeout of 2 s, while the acquire ended within the token's
# stale time (this runs well within a second).
if awk -v n="$now" -v t="$taken" 'BEGIN { exit !(n < t + 3) }'; then
  [ "$rc" = 1 ] || fail "a legacy token $(awk -v n="$now" -v t="$taken" 'BEGIN { print n - t }') s old was not waited for (exit $rc)"
fi
mine=$("$tool" acquire -w 20 --legacy-timeout 2 "$lock")
got=$(date +%s.%N)
# Stale once now > its second + 2 s (timeout) + 1 s (skew allowance).
awk -v g="$got" -v t="$taken" 'BEGIN { exit !(g >= t + 3 && g < t + 4.5) }' ||
  fail "the legacy token of second $taken was taken over at $got (expected in [t+3, t+4.5))"
[ "$(ls -A "$lock")" = "$mine" ] || fail "after the takeover the lock holds $(ls -A "$lock")"
"$tool" release "$lock" "$mine"
pass "a dead Perl holder's token taken over $(awk -v g="$got" -v t="$taken" 'BEGIN { printf "%.2f", g - t }') s after its second (timeout 2 s + skew 1 s), not before"

# --- the legacy procedure never takes a tokenlock token ----------------------
lock=$work/ours.lock
mkdir -p "$lock"
# A well-formed token whose lease ended in 1970 and whose name ends in digits.
planted=lockfile.1000000.host-0000abcd.1.1.0000000000000123
mkdir "$lock/$planted"
rc=0
perl "$legacy" "$lock" 1 0.01 try 2 || rc=$?
[ "$rc" = 2 ] || fail "the Perl lock got a lock held by a tokenlock token (exit $rc)"
[ "$(ls -A "$lock")" = "$planted" ] || fail "the Perl lock renamed the tokenlock token: $(ls -A "$lock")"
mine=$("$tool" acquire -n "$lock") || fail "tokenlock did not take over its own stale token"
held=$("$tool" acquire --lease 1 -n "$work/live.lock")
rc=0
perl "$legacy" "$work/live.lock" 1 0.01 try 2 || rc=$?
[ "$rc" = 2 ] || fail "the Perl lock got a lock held by a live tokenlock holder (exit $rc)"
[ "$(ls -A "$work/live.lock")" = "$held" ] || fail "the live holder's token changed"
"$tool" release "$lock" "$mine"
pass "the Perl procedure (timeout 1 s) never took a tokenlock token, stale or past its lease"
