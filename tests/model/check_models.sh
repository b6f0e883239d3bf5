#!/usr/bin/env bash
# Runs spin's exhaustive safety search on both models: the rename-token
# lock must have no violation in any interleaving, and the mkdir lock with
# age-based removal must have one (the search is shown to find what it
# looks for). The counterexample is printed for the record.
set -euo pipefail
src=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

verify() {  # MODEL -> prints the verifier's output; sets ERRORS
  cp "$src/$1.pml" "$work/"
  # pan.c is generated code: its compiler warnings are spin's, not ours.
  (cd "$work" && spin -a "$1.pml" >/dev/null &&
    gcc -O2 -w -DSAFETY -DCOLLAPSE -DMEMLIM=12000 -DVECTORSZ=2048 -o "pan_$1" pan.c &&
    timeout 600 "./pan_$1" -m200000 -c1 >"$1.out" 2>&1) || true
  ERRORS=$(awk '/errors:/ {print $NF}' "$work/$1.out")
  grep -E 'errors:|states, stored|depth reached|assertion violated' "$work/$1.out" | sed "s/^/  $1: /"
}

verify rename_token
grep -E 'MEMLIM|memory' "$work/rename_token.out" | sed 's/^/  rename_token (memory): /' | head -4
[ "$ERRORS" = 0 ] || { echo "the rename-token lock violates a property" >&2; exit 1; }
# pan's own words when a search stops before covering every state.
if grep -qE 'max search depth too small|reached -DMEMLIM bound|pan: out of memory' "$work/rename_token.out"; then
  echo "the search of the rename-token model was cut short: it proves nothing" >&2
  exit 1
fi

verify mkdir_lock
[ -n "$ERRORS" ] && [ "$ERRORS" != 0 ] || { echo "spin did not find the mkdir lock's violation" >&2; exit 1; }
echo "  mkdir_lock: the interleaving spin found:"
(cd "$work" && spin -t -p mkdir_lock.pml 2>/dev/null | grep -E 'proc +[0-9]+ \(P|assertion' | tail -25 | sed 's/^/    /') || true
echo "model check: rename-token lock holds in every interleaving; the mkdir lock does not"
