#!/usr/bin/env bash
# Two forms of the PHP module side by side: php_bench.php run RUNS times
# with each, alternating (old, new, old, new ...) on the same machine, so
# that load that comes and goes falls on both. Prints, per module and
# ratio, the median and the range over runs; each ratio is measured inside
# one run against that run's own baseline (two bare renames, a flock
# counter), so the two modules compare through them. The last lines are
# for machines:
#   php_before_after_<ratio>_ratio_<old|new>=MEDIAN
#
#   php_before_after.sh [-r RUNS] [-n CALLS] [-k ROUNDS] [-c] OLD_MODULE NEW_MODULE
#
# -c times in CPU time (php_bench.php --cpu), which load from others
# disturbs much less than the wall clock.
#
# A MODULE is what php_bench.php -m takes: a bindings/php/autoload.php or
# Tokenlock.php, e.g. of a checkout of an older commit:
#   git worktree add /tmp/old main && bench/lang/php_before_after.sh \
#     /tmp/old/bindings/php/autoload.php bindings/php/autoload.php
set -euo pipefail
runs=5 calls=2000 rounds=7 clock=
while getopts 'r:n:k:c' o; do
  case $o in
    r) runs=$OPTARG ;;
    n) calls=$OPTARG ;;
    k) rounds=$OPTARG ;;
    c) clock=--cpu ;;
    *) echo "usage: $0 [-r RUNS] [-n CALLS] [-k ROUNDS] [-c] OLD_MODULE NEW_MODULE" >&2; exit 64 ;;
  esac
done
shift $((OPTIND - 1))
[ $# = 2 ] || { echo "usage: $0 [-r RUNS] [-n CALLS] [-k ROUNDS] [-c] OLD_MODULE NEW_MODULE" >&2; exit 64; }
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((i = 1; i <= runs; ++i)); do
  for side in old new; do
    module=$1
    [ $side = new ] && module=$2
    php "$here/php_bench.php" -n "$calls" -r "$rounds" -m "$module" $clock |
      sed -n "s/^php_\([a-z_]*\)_ratio=\(.*\)/$side \1 \2/p" >>"$out"
  done
done
echo "$runs runs of php_bench.php -n $calls -r $rounds $clock each, alternating"
echo "old: $1"
echo "new: $2"
printf '%-12s %-4s %8s %s\n' ratio side median range
sort -k2,2 -k1,1r -k3,3n "$out" | awk '
  function flush() {
    if (n) {
      m = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
      printf "%-12s %-4s %8.2f %.2f-%.2f\n", key, side, m, v[1], v[n]
      line[++lines] = sprintf("php_before_after_%s_ratio_%s=%.2f", key, side, m)
    }
    n = 0
  }
  { if ($2 != key || $1 != side) { flush(); key = $2; side = $1 } v[++n] = $3 }
  END { flush(); for (i = 1; i <= lines; ++i) print line[i] }'
