#!/usr/bin/env bash
# One worker of the shared torture on the C++ command (shared.py has the log
# format and the checks): until STOPFILE exists, reads the counter under
# `tokenlock run -s`, holds one of SLOTS slots of SEMDIR under
# `tokenlock run --slots`, or increments the counter under `tokenlock
# acquire` and `tokenlock commit` (fenced) with this shell as the owner,
# each hold logged to the shared event LOG.
#   shared_worker.sh TOKENLOCK COUNTER SEMDIR SLOTS LEASE STOPFILE LOG SEED KINDS
# KINDS: the kinds of hold it chooses among, of r (reader), s (slot), w (writer).
set -u
tl=$1 counter=$2 semdir=$3 slots=$4 lease=$5 stop=$6 log=$7
RANDOM=$8 kinds=$9
export me=$$ hold=0 log counter
# The functions the holds share with the commands `tokenlock run` runs.
lib='
# One short append per line (O_APPEND, >>): whole in the log before the next step.
note() { echo "cxx $me $hold $1 $(date +%s.%N)" >>"$log"; }
read_note() {  # the counter as read inside a hold: "r V", or "r torn:HEX"
  local text="" re=$'"'"'^(0|[1-9][0-9]*)\n$'"'"'
  IFS= read -r -d "" text <"$counter"
  if [[ $text =~ $re ]]; then echo "r ${BASH_REMATCH[1]}"; else echo "r torn:$(printf %s "$text" | od -An -tx1 | tr -d " \n")"; fi
}'
eval "$lib"
# A hold under `tokenlock run`: reads the counter (a reader) and pauses
# inside, for overlaps to check.
body=$lib'
note "+ $1"
if [ "$1" = r ]; then note "$(read_note)"; fi
sleep "$2"
note -'

run_hold() {  # KIND DIR RUN-OPTIONS...
  local kind=$1 dir=$2 rc pause=0.0$((RANDOM % 30))
  shift 2
  # One in ten long enough for shared.py to stop it inside past its lease.
  [ $((RANDOM % 10)) = 0 ] && pause=0.$((2 + RANDOM % 2))$((RANDOM % 10))
  "$tl" run "$@" -w 60 --lease "$lease" "$dir" -- bash -c "$body" body "$kind" "$pause"
  rc=$?
  case $rc in 0) note ok ;; 3) note l ;; *) note "e run/$rc" ;; esac
}

write_hold() {
  local token old v rc lost=0
  if ! token=$("$tl" acquire -w 60 --lease "$lease" --pid "$me" "$counter.lock"); then
    note "e acquire"
    return
  fi
  note "+ w"
  old=$(read_note)
  if [[ $old = "r torn:"* ]]; then
    note "$old"     # a failure of the run (shared.py): nothing is written over it
  else
    v=$((${old#r } + 1))
    note "c $v"
    if [ $((RANDOM % 16)) = 0 ]; then
      note s        # shared.py continues it past the lease: the commit must then be refused
      kill -STOP "$me"
    fi
    echo "$v" | "$tl" commit --sync none "$counter.lock" "$token" "$counter"
    rc=$?
    case $rc in 0) note "W $v" ;; 3) note l; lost=1 ;; *) note "e commit/$rc" ;; esac
  fi
  note -
  "$tl" release "$counter.lock" "$token"
  case $? in 0) [ "$lost" = 1 ] && note l || note ok ;; 3) note l ;; *) note "e release" ;; esac
}

while [ ! -e "$stop" ]; do
  hold=$((hold + 1))
  r=$((RANDOM % 100))
  if [ "$r" -lt 45 ]; then kind=r; elif [ "$r" -lt 75 ]; then kind=s; else kind=w; fi
  [[ $kinds = *$kind* ]] || kind=r
  case $kind in
    r) run_hold r "$counter.lock" -s ;;
    s) run_hold s "$semdir" --slots "$slots" ;;
    w) write_hold ;;
  esac
done
