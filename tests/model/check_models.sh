#!/usr/bin/env bash
# Exhaustive spin searches of the lock models (docs/verification.md).
#
#   check_models.sh [N...]     process counts for the protocol model (default: 2 3)
#   check_models.sh --weekly   the shared searches only the weekly run makes
#
# The rename-token lock must hold in every interleaving, and each search must
# cover the whole state space (a search cut short proves nothing). Three
# other searches must find a violation, which shows the checks can fail:
# the same protocol with the unfenced commit, a mutant whose takeover
# renames whatever token is there, and the mkdir lock with age-based removal
# that shared-hosting scripts use. The mkdir lock's interleaving is printed.
# The shared and slot protocol (shared_token.pml) is searched in three
# configurations, and five of its mutants must fail. --weekly searches
# its two other configurations (two writers and a reader; three slot
# holders of two slots): a third of this script's time, for searches that
# only a change of shared_token.pml can change (ctest model_check_weekly,
# in the weekly run).
set -euo pipefail
. "$(dirname "$0")/spin_setup.sh"
weekly=0
if [ "${1:-}" = --weekly ]; then
  weekly=1
  shift
fi
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(2 3)

search() {  # NAME MODEL SPIN-DEFINES... -> pan's output in $work/NAME.out (PAN_OPT: gcc's -O)
  local name=$1 model=$2; shift 2
  mkdir -p "$work/$name.d"
  cp "$src/$model.pml" "$work/$name.d/"
  # pan.c is generated code: its compiler warnings are spin's, not ours.
  (cd "$work/$name.d" && spin "$@" -a "$model.pml" >/dev/null &&
    gcc "${PAN_OPT:--O2}" -w -DSAFETY -DCOLLAPSE -DMEMLIM=4000 -DVECTORSZ=2048 -o pan pan.c &&
    { ./pan -m5000000 -c1 >"../$name.out" 2>&1 || true; })
  errors=$(awk '/errors:/ {print $NF}' "$work/$name.out")
  grep -E 'errors:|states, stored|assertion violated|elapsed time' "$work/$name.out" | sed "s/^/  $name: /"
}

status=0
expect_violation() {  # NAME WHAT
  if [ -z "$errors" ] || [ "$errors" = 0 ]; then
    echo "FAIL: spin found no violation in $2" >&2; status=1
  fi
}
expect_assertion() {  # NAME TEXT WHAT: spin must break exactly that assertion
  expect_violation "$1" "$3"
  grep -F 'assertion violated' "$work/$1.out" | grep -qF -- "$2" ||
    { echo "FAIL: $3 broke something other than expected" >&2; status=1; }
}

expect_complete() {  # NAME WHAT: no violation, and the whole state space searched
  if [ "$errors" != 0 ]; then
    echo "FAIL: $2 violates a property ($1)" >&2; status=1
  elif grep -qE 'max search depth too small|reached -DMEMLIM bound|out of memory' "$work/$1.out"; then
    echo "FAIL: the search $1 was cut short: it proves nothing" >&2; status=1
  fi
}

protocol_searches() {
  for n in "${counts[@]}"; do
    search "rename_token_n$n" rename_token "-DN=$n"
    expect_complete "rename_token_n$n" "the rename-token lock with $n processes"
  done
}

# The mutants' searches end after a few thousand states: compiled at -O0,
# which takes a fifth of -O2's time (the compilation is most of theirs).
protocol_mutants() {
  PAN_OPT=-O0 search unfenced rename_token -DN=3 -DUNFENCED
  expect_violation unfenced "the unfenced commit"
  grep -q 'assertion violated  !(stale_read\[me\])' "$work/unfenced.out" ||
    { echo "FAIL: the unfenced commit broke something other than 'no lost update'" >&2; status=1; }
  PAN_OPT=-O0 search clobber rename_token -DN=3 -DCLOBBER
  expect_violation clobber "the clobbering takeover"
  PAN_OPT=-O0 search mkdir_lock mkdir_lock
  expect_violation mkdir_lock "the mkdir lock"
  if [ -n "$errors" ] && [ "$errors" != 0 ]; then
    echo "  mkdir_lock: the interleaving spin found:"
    (cd "$work/mkdir_lock.d" && spin -t -p mkdir_lock.pml 2>/dev/null |
      grep -E 'proc +[0-9]+ \(P|assertion' | tail -25 | sed 's/^/    /') || true
  fi
}

# Shared holders and slots (docs/protocol.md, Shared locks and semaphores),
# compiled with -O1: at -O2 the compilations cost more than the searches
# save (the small ones at -O0). With three processes the roles are fixed
# (WRITERS: bit i makes process i a writer), which keeps each search to
# seconds; two processes choose their role every round.
shared_searches() {  # NAME:DEFINES...
  local cfg name opt
  for cfg in "$@"; do
    name=${cfg%%:*}
    opt=-O1
    [ "$name" != shared_n2 ] || opt=-O0
    # shellcheck disable=SC2086  # the defines are words
    PAN_OPT=$opt search "$name" shared_token ${cfg#*:}
    expect_complete "$name" "the shared protocol"
  done
}

shared_mutants() {
  PAN_OPT=-O0 search shared_no_onbehalf shared_token -DN=3 -DWRITERS=1 -DNO_ONBEHALF
  expect_assertion shared_no_onbehalf '((k<=1)&&((k==0)||(c==0)))' "the conversion that forgets the lone holder (S1)"
  PAN_OPT=-O0 search shared_no_join_cas shared_token -DN=3 -DWRITERS=1 -DNO_JOIN_CAS
  local s3='cur[(j/2)])==j))&& !(eend[j])))'   # the end of S3's text, as pan prints it
  expect_assertion shared_no_join_cas "$s3" "the join without the cover's rename (S3)"
  PAN_OPT=-O0 search shared_leave_token_first shared_token -DN=3 -DWRITERS=0 -DLEAVE_TOKEN_FIRST
  expect_assertion shared_leave_token_first "$s3" "the last one out that lists the token before the lock directory (S3)"
  PAN_OPT=-O0 search shared_clear_after_share shared_token -DN=3 -DWRITERS=1 -DCLEAR_AFTER_SHARE
  expect_assertion shared_clear_after_share "$s3" "the reader's takeover that clears after its lone share appears (S3)"
  PAN_OPT=-O0 search shared_old_local shared_token -DN=3 -DOLD -DOLD_LOCAL
  expect_assertion shared_old_local "$s3" "shared names with the real host tag (S3)"
}

if [ $weekly = 1 ]; then
  shared_searches "shared_n3_2w1r:-DN=3 -DWRITERS=3" "shared_n3_slots2:-DN=3 -DSLOTS=2 -DWRITERS=0"
  [ $status = 0 ] &&
    echo "model check (weekly): shared holders and slots hold in every interleaving of two writers and a reader, and of three holders of two slots"
  exit $status
fi
protocol_searches
protocol_mutants
shared_searches "shared_n2:-DN=2" "shared_n3_1w2r:-DN=3 -DWRITERS=1" "shared_n3_old:-DN=3 -DOLD"
shared_mutants
[ $status = 0 ] &&
  echo "model check: the rename-token lock holds in every interleaving (N = ${counts[*]}); the unfenced commit, the clobbering takeover and the mkdir lock do not; shared holders and slots hold in every interleaving searched, and their five mutants do not"
exit $status
