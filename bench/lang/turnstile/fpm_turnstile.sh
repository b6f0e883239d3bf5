#!/usr/bin/env bash
# bench/lang/fpm_bench.sh for the prototype: the flock counter
# (bench/lang/flock_counter.php) and turnstile_counter.php under each
# SCHEME, in one php-fpm behind one Apache, CLIENTS concurrent clients (ab)
# on one counter each, side by side in one run (each round runs every
# variant once, in an order that rotates between rounds, on fresh
# counters). Prints per variant the medians over rounds of counted hits
# per second and of ab's 99th percentile, and the ratio to flock's hits
# measured in the same round (median, smallest-largest). Fails if a hit
# was lost or counted twice.
#
#   bench/lang/turnstile/fpm_turnstile.sh [-n REQUESTS] [-r ROUNDS] [-c CLIENTS] [-s "poll deputy"]
#
# Exits 77 when php-fpm, Apache, mod_proxy_fcgi or ab is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../../.." && pwd)
requests=3000 rounds=3 clients=64 schemes="poll deputy"
while getopts "n:r:c:s:" o; do
  case $o in
    n) requests=$OPTARG ;; r) rounds=$OPTARG ;; c) clients=$OPTARG ;; s) schemes=$OPTARG ;; *) exit 64 ;;
  esac
done
. "$src/tests/e2e/webserver.sh"
. "$src/tests/e2e/phpfpm.sh"
require_fpm_rig

work=$(mktemp -d)
chmod 0755 "$work"
trap 'stop_server; stop_php_fpm; rm -rf "$work"' EXIT
www=$work/www data=$work/data
mkdir -p "$www" "$work/no-cgi"
cp "$src/bench/lang/flock_counter.php" "$here/turnstile_lock.php" "$here/turnstile_counter.php" "$www/"
chmod 0755 "$www"
chmod 0644 "$www"/*.php
make_data_dir "$data"
start_php_fpm "$work" "$clients"
fpm_apache_config "$work" /fpm "$www"
port=$(pick_port)
start_apache "$work/apache" "$port" "$work/no-cgi" "FLOCK_COUNTER_DIR=$data" "FLOCK_COUNTER_SYNC=none" \
  "TURNSTILE_COUNTER_DIR=$data"
base="http://127.0.0.1:$port/fpm"

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# url VARIANT ID: the counter's address for a variant (flock or a scheme).
url() {
  if [ "$1" = flock ]; then echo "$base/flock_counter.php?id=$2"
  else echo "$base/turnstile_counter.php?id=$2&scheme=$1"; fi
}

# run VARIANT ID ROUND: one ab run; appends "ROUND rate p99 refused" to
# $work/VARIANT.runs; fails on a lost or doubly counted hit.
run() {
  local variant=$1 id=$2 out complete non2xx ok got seconds
  out=$(ab -q -r -n "$requests" -c "$clients" "$(url "$variant" "$id")" 2>&1) || { echo "$out" >&2; return 1; }
  complete=$(awk '/^Complete requests/ {print $3}' <<<"$out")
  non2xx=$(awk '/^Non-2xx responses/ {print $3}' <<<"$out")
  ok=$((complete - ${non2xx:-0}))
  got=$(cat "$data/$id.count" 2>/dev/null || echo 0)
  [ "$got" -eq "$ok" ] || { echo "fpm_turnstile: $variant answered $ok hits with 2xx, its counter holds $got" >&2; return 1; }
  seconds=$(awk '/^Time taken for tests/ {print $5}' <<<"$out")
  awk -v r="$3" -v ok="$ok" -v s="$seconds" -v p99="$(awk '$1 == "99%" {print $2}' <<<"$out")" \
    -v refused="${non2xx:-0}" 'BEGIN {print r, ok / s, p99, refused}' >>"$work/${variant//[^a-z0-9]/_}.runs"
}

variants=(flock $schemes)
for v in "${variants[@]}"; do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$(url "$v" warm)")" = 200 ] ||
    { echo "fpm_turnstile: $(url "$v" warm) does not answer 200; the logs:" >&2
      tail -20 "$work/apache/logs/error.log" "$FPM_LOG" >&2; exit 1; }
done
printf "php-fpm %s, %d workers; %d clients, %d requests per run, %d rounds\n" \
  "$(find_php_fpm)" "$clients" "$clients" "$requests" "$rounds"
for ((r = 0; r < rounds; r++)); do
  k=$((r % ${#variants[@]}))
  for v in "${variants[@]:k}" "${variants[@]:0:k}"; do run "$v" "r$r${v//[^a-z0-9]/}" "$r"; done
done
printf "%-16s %10s %10s %9s %s\n" variant "hits/s" "p99 ms" "x flock" "(min-max)   refused"
for v in "${variants[@]}"; do
  join <(sort "$work/${v//[^a-z0-9]/_}.runs") <(sort "$work/flock.runs") |
    awk -v v="$v" '{ratio[NR] = $2 / $5; rate[NR] = $2; p99[NR] = $3; refused += $4}
      function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return a[int((n + 1) / 2)] }
      END {n = NR; lo = ratio[1]; hi = ratio[1]; for (i = 1; i <= n; i++) { if (ratio[i] < lo) lo = ratio[i]; if (ratio[i] > hi) hi = ratio[i] }
        printf "%-16s %10.1f %10d %8.2fx (%.2f-%.2f) %8d\n", v, med(rate, n), med(p99, n), med(ratio, n), lo, hi, refused}'
done
