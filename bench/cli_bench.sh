#!/usr/bin/env bash
# The tokenlock command's cost per call against flock(1), side by side in one
# run (bench/command_calls.cpp): `tokenlock run L -- true` against
# `flock F true`, both uncontended, plus what tells the costs apart:
#   true                  fork + exec of a tiny program: the floor of both
#   version_static        `tokenlock --version`: start-up and option parsing
#   version_dynamic       the same command linked against shared libraries
#   run_dynamic           `run` of that dynamic build (what static linking saves)
#   run_static, flock     the comparison
#   dotlockfile           `dotlockfile -l F true` (liblockfile-bin), when installed
#   lockfile_progs        `lockfile-create F; true; lockfile-remove F`
#                         (lockfile-progs: no command mode, three programs)
# Usage: cli_bench.sh -b BUILD_DIR [-q] [-d DIR]
#   -q  a quick run (3 rounds of 30 calls) that only checks that it works
#   -d  the directory (filesystem) to lock in; default a new one under /tmp
# Prints the table and `cli_run_vs_flock=R` (target: at most 1.1).
set -euo pipefail
build= quick=0 where=
while getopts b:qd: o; do
  case $o in
    b) build=$OPTARG ;;
    q) quick=1 ;;
    d) where=$OPTARG ;;
    *) echo "usage: cli_bench.sh -b BUILD_DIR [-q] [-d DIR]" >&2; exit 64 ;;
  esac
done
[ -n "$build" ] || { echo "usage: cli_bench.sh -b BUILD_DIR [-q] [-d DIR]" >&2; exit 64; }
tool=$build/tools/tokenlock
dynamic=$build/tools/tokenlock-dynamic
calls=$build/bench/command_calls
command -v flock >/dev/null || { echo "SKIP: flock(1) is not installed (util-linux)"; exit 77; }
work=$(mktemp -d "${where:-/tmp}/cli-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
true_path=$(command -v true)

args=("true=$true_path" "flock=flock|$work/f|$true_path"
  "run_static=$tool|run|$work/l|--|$true_path" "version_static=$tool|--version")
if command -v dotlockfile >/dev/null; then
  args+=("dotlockfile=dotlockfile|-l|$work/d.lock|$true_path")
fi
if command -v lockfile-create >/dev/null; then
  args+=("lockfile_progs=lockfile-create|--lock-name|$work/p.lock|;|$true_path|;|lockfile-remove|--lock-name|$work/p.lock")
fi
if [ -x "$dynamic" ]; then
  args+=("run_dynamic=$dynamic|run|$work/l|--|$true_path" "version_dynamic=$dynamic|--version")
fi
if [ $quick = 1 ]; then set -- -r 3 -n 30; else set -- -r 15 -n 200; fi
out=$("$calls" "$@" "${args[@]}")
echo "$out"
value() { sed -n "s/^calls_us_$1=//p" <<<"$out"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "cli_run_vs_flock=$(ratio "$(value run_static)" "$(value flock)")"
for peer in dotlockfile lockfile_progs; do
  [ -n "$(value $peer)" ] && echo "cli_run_vs_$peer=$(ratio "$(value run_static)" "$(value $peer)")"
done
if [ -x "$dynamic" ]; then
  echo "cli_run_dynamic_vs_flock=$(ratio "$(value run_dynamic)" "$(value flock)")"
  echo "cli_startup_static_vs_dynamic=$(ratio "$(value version_static)" "$(value version_dynamic)")"
fi
