#!/usr/bin/env bash
# C++ waiters (the library's wait board, D.wait) and turnstile waiters (PHP
# and Perl prototypes, D/turnstile) on one lock at once, all incrementing
# one counter inside a canary (tests/support/lock_worker count): everyone
# must make progress, nobody may be inside with another (the canary), and
# the counter must equal the increments everyone reports.
#
#   bench/lang/turnstile/mixed.sh [-b BUILD] [-s SCHEME] [-c CXX] [-p PHP] [-l PERL] [-t SECONDS] [-k CYCLES]
#
# BUILD (default: build/ in the source tree) has tests/support/lock_worker. CXX
# lock_worker processes do CYCLES increments each (default 3 x 8000, about
# as long as the others run); PHP and PERL prototype processes (default 3
# and 2) run SCHEME (default aged) for SECONDS (default 4). Prints one line per process: its
# increments, and for the prototypes p50/p99/max acquire latency; for the
# C++ ones the time they took. Exits 1 on a lost increment, a canary
# violation or a process that made no progress.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$here/../../.." && pwd)/build scheme=aged cxx=3 php=3 perl=2 seconds=4 cycles=8000
while getopts "b:s:c:p:l:t:k:" o; do
  case $o in
    b) build=$OPTARG ;; s) scheme=$OPTARG ;; c) cxx=$OPTARG ;; p) php=$OPTARG ;;
    l) perl=$OPTARG ;; t) seconds=$OPTARG ;; k) cycles=$OPTARG ;; *) exit 64 ;;
  esac
done
worker=$build/tests/support/lock_worker
[ -x "$worker" ] || { echo "SKIP: $worker is not built"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/d.lock/lockfile"
printf '%020d\n' 0 >"$work/count"

for ((i = 0; i < cxx; i++)); do
  ( start=$(date +%s.%N)
    "$worker" --lock "$work/d.lock" count "$work/count" "$work/canary" "$cycles" "$work/cxx$i.log" >"$work/cxx$i.out" 2>&1
    echo "status $? seconds $(echo "$(date +%s.%N) - $start" | bc)" >>"$work/cxx$i.out" ) &
done
for ((i = 0; i < php; i++)); do
  php "$here/contend.php" worker "$scheme" "$work/d.lock" "$work/count" "$seconds" "$work/canary" >"$work/php$i.out" 2>&1 &
done
for ((i = 0; i < perl; i++)); do
  perl "$here/contend.pl" worker "$scheme" "$work/d.lock" "$work/count" "$seconds" "$work/canary" >"$work/perl$i.out" 2>&1 &
done
wait

status=0 total=0
for f in "$work"/cxx*.out; do
  done_=$(wc -l <"${f%.out}.log" 2>/dev/null || echo 0)
  echo "c++  $(basename "$f" .out): $done_ increments, $(grep -o 'waited [0-9]*' "$f"), $(grep -o 'seconds .*' "$f") s"
  grep -q '^status 0' "$f" || { echo "  failed:"; cat "$f"; status=1; }
  total=$((total + done_))
done
for f in "$work"/php*.out "$work"/perl*.out; do
  [ -e "$f" ] || continue
  echo "$(basename "$f" .out | sed 's/[0-9]*$//') $(basename "$f" .out): $(cat "$f")"
  ops=$(awk '$1 == "ops" {print $2}' "$f")
  [ "${ops:-0}" -gt 0 ] || { echo "  made no progress"; status=1; }
  total=$((total + ${ops:-0}))
done
got=$((10#$(cat "$work/count")))
echo "counter $got, increments reported $total; board: $([ -e "$work/d.lock.wait" ] && echo D.wait used || echo none), turnstile: $(ls "$work/d.lock" | grep -c turnstile) file(s)"
[ "$got" -eq "$total" ] || { echo "LOST: the counter differs from the increments: two holders at once"; status=1; }
exit $status
