#!/usr/bin/env bash
# The longer spin searches of the shared and slot protocol
# (docs/protocol.md, Shared locks and semaphores, docs/verification.md): shared_token.pml with the
# refresh of a group member (-DREFRESH), which check_models.sh leaves out
# to stay within a minute. About 4 minutes and 5 GB here; run it by hand or
# in the weekly run.
#
#   check_shared_refresh.sh
#
# Each search must cover the whole state space; the mutant whose slot
# holders refresh without counting the others must break S2.
set -euo pipefail
. "$(dirname "$0")/spin_setup.sh"

search() {  # NAME SPIN-DEFINES... -> pan's output in $work/NAME.out
  local name=$1; shift
  mkdir -p "$work/$name.d"
  cp "$src/shared_token.pml" "$work/$name.d/"
  (cd "$work/$name.d" && spin "$@" -a shared_token.pml >/dev/null &&
    gcc -O2 -w -DSAFETY -DCOLLAPSE -DMEMLIM=7000 -DVECTORSZ=2048 -o pan pan.c &&
    { ./pan -m60000000 -c1 >"../$name.out" 2>&1 || true; })
  errors=$(awk '/errors:/ {print $NF}' "$work/$name.out")
  grep -E 'errors:|states, stored|assertion violated|elapsed time' "$work/$name.out" | sed "s/^/  $name: /"
}

status=0
for cfg in "refresh_n2:-DN=2" "refresh_n2_slots1:-DN=2 -DSLOTS=1" "refresh_n3_2w1r:-DN=3 -DWRITERS=3" \
           "refresh_n3_1w2r:-DN=3 -DWRITERS=1" "refresh_n3_old:-DN=3 -DOLD" \
           "refresh_n3_slots2:-DN=3 -DSLOTS=2 -DWRITERS=0"; do
  name=${cfg%%:*}
  # shellcheck disable=SC2086  # the defines are words
  search "$name" -DREFRESH ${cfg#*:}
  if [ "$errors" != 0 ]; then
    echo "FAIL: the shared protocol violates a property ($name)" >&2; status=1
  elif grep -qE 'max search depth too small|reached -DMEMLIM bound|out of memory' "$work/$name.out"; then
    echo "FAIL: the search $name was cut short: it proves nothing" >&2; status=1
  fi
done
search refresh_no_count -DREFRESH -DN=3 -DSLOTS=2 -DWRITERS=0 -DNO_REFRESH_COUNT
if [ -z "$errors" ] || [ "$errors" = 0 ] ||
   ! grep -qF 'assertion violated ((2==0)||(c<=2))' "$work/refresh_no_count.out"; then
  echo "FAIL: spin did not find the slot refresh without a count breaking S2" >&2; status=1
fi
[ $status = 0 ] &&
  echo "model check: shared holders and slots hold with refreshes in every interleaving searched; the refresh without a count does not"
exit $status
