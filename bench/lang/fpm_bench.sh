#!/usr/bin/env bash
# counter.php in php-fpm against a flock-based PHP counter
# (bench/lang/flock_counter.php) in the same php-fpm, behind one Apache
# (mod_proxy_fcgi on a unix socket), CLIENTS concurrent clients (ab) on one
# counter each, side by side in one run: each round runs both, in an order
# that alternates between rounds, on fresh counters. Prints counted hits
# per second (2xx answers / ab's time; medians of rounds), the 99th
# percentile of response times, and the ratio counter.php / flock; fails
# if a hit was lost (a 2xx answer the counter does not count) or counted
# twice. The last lines are for machines, one per durability:
#   php_fpm_ratio_none=X  php_fpm_ratio_file_and_dir=Y
#
#   bench/lang/fpm_bench.sh [-q] [-n REQUESTS] [-r ROUNDS] [-c CLIENTS] [-w WORKERS] [-s "none file_and_dir"]
#
# WORKERS is php-fpm's static pool (default: CLIENTS, so that every client
# is served at once and the lock sees all of them). The PHP module is the
# source tree's; the tokenlock command, for a module that runs it, is
# TOKENLOCK_COMMAND, else build/tools/tokenlock. -q: a quick run to check
# that it works. Exits 77 when php-fpm, Apache, mod_proxy_fcgi or ab is
# missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
requests=3000 rounds=3 clients=64 workers="" syncs="none file_and_dir"
while getopts "qn:r:c:w:s:" o; do
  case $o in
    q) requests=128 rounds=1 syncs=none ;;
    n) requests=$OPTARG ;; r) rounds=$OPTARG ;; c) clients=$OPTARG ;;
    w) workers=$OPTARG ;; s) syncs=$OPTARG ;; *) exit 64 ;;
  esac
done
workers=${workers:-$clients}
[ "$requests" -ge "$clients" ] || { echo "fpm_bench: REQUESTS ($requests) must be at least CLIENTS ($clients)" >&2; exit 64; }
. "$src/tests/e2e/webserver.sh"
. "$src/tests/e2e/phpfpm.sh"
require_fpm_rig
tool=${TOKENLOCK_COMMAND:-$src/build/tools/tokenlock}
[ -x "$tool" ] || tool=""

work=$(mktemp -d)
chmod 0755 "$work"
trap 'stop_server; stop_php_fpm; rm -rf "$work"' EXIT
www=$work/www
deploy_fpm_counter "$src" "$www" "$tool"
cp "$here/flock_counter.php" "$www/"
chmod 0644 "$www/flock_counter.php"
mkdir -p "$work/no-cgi"
start_php_fpm "$work" "$workers"
fpm_apache_config "$work" /fpm "$www"

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# run NAME ID: one ab run; appends "rate p99" to $work/NAME.runs, and
# fails on a lost or doubly counted hit.
run() {
  local name=$1 id=$2 out complete non2xx ok got seconds
  out=$(ab -q -r -n "$requests" -c "$clients" "$base/$name.php?id=$id" 2>&1) || { echo "$out" >&2; return 1; }
  complete=$(awk '/^Complete requests/ {print $3}' <<<"$out")
  non2xx=$(awk '/^Non-2xx responses/ {print $3}' <<<"$out")
  ok=$((complete - ${non2xx:-0}))
  got=$(cat "$data/$id.count" 2>/dev/null || echo 0)
  [ "$got" -eq "$ok" ] || { echo "fpm_bench: $name.php answered $ok hits with 2xx, its counter holds $got" >&2; return 1; }
  seconds=$(awk '/^Time taken for tests/ {print $5}' <<<"$out")
  awk -v ok="$ok" -v s="$seconds" -v p99="$(awk '$1 == "99%" {print $2}' <<<"$out")" \
    -v refused="${non2xx:-0}" 'BEGIN {print ok / s, p99, refused}' >>"$work/$name.runs"
}

printf "php-fpm %s, %d workers; %d clients, %d requests per run, %d rounds\n" \
  "$(find_php_fpm)" "$workers" "$clients" "$requests" "$rounds"
printf "%-13s %12s %12s %9s %10s %10s %8s\n" durability "flock hits/s" "ctr hits/s" ratio "flock p99" "ctr p99" refused
for sync in $syncs; do
  data=$work/data-$sync
  make_data_dir "$data"
  port=$(pick_port)
  start_apache "$work/apache-$sync" "$port" "$work/no-cgi" "TOKENLOCK_COUNTER_DIR=$data" \
    "TOKENLOCK_COUNTER_SYNC=$sync" "FLOCK_COUNTER_DIR=$data" "FLOCK_COUNTER_SYNC=$sync"
  base="http://127.0.0.1:$port/fpm"
  rm -f "$work"/*.runs
  # The first request of each compiles the script (opcache).
  for name in flock_counter counter; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$base/$name.php?id=warm")" = 200 ] ||
      { echo "fpm_bench: $base/$name.php does not answer 200; the logs:" >&2
        tail -20 "$work/apache-$sync/logs/error.log" "$FPM_LOG" >&2; exit 1; }
  done
  for ((r = 0; r < rounds; r++)); do
    order=(flock_counter counter)
    [ $((r % 2)) -eq 1 ] && order=(counter flock_counter)
    for name in "${order[@]}"; do run "$name" "r$r${name//_/}"; done
  done
  flock=$(cut -d' ' -f1 "$work/flock_counter.runs" | median)
  counter=$(cut -d' ' -f1 "$work/counter.runs" | median)
  flock_p99=$(cut -d' ' -f2 "$work/flock_counter.runs" | median)
  counter_p99=$(cut -d' ' -f2 "$work/counter.runs" | median)
  refused=$(cat "$work"/*.runs | awk '{n += $3} END {print n + 0}')
  awk -v s="$sync" -v f="$flock" -v t="$counter" -v fp="$flock_p99" -v tp="$counter_p99" -v rf="$refused" \
    'BEGIN {printf "%-13s %12.1f %12.1f %8.2fx %10d %10d %8d\n", s, f, t, t / f, fp, tp, rf}'
  echo "$sync $flock $counter" >>"$work/ratios"
  stop_server
done
awk '{printf "php_fpm_ratio_%s=%.2f\n", $1, $3 / $2}' "$work/ratios"
