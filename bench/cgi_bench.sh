#!/usr/bin/env bash
# counter.cgi against a flock(2)-based C counter and a CGI that does
# nothing, side by side under one Apache, at 16 and 64 concurrent clients,
# with durability none and file_and_dir. Prints requests per second
# (medians of rounds whose order rotates), the ratios, and the 99th
# percentile of response times in ms (flock, counter); every run also
# checks that no hit was lost (a 2xx answer the counter does not count),
# and the script fails if one was. Refused requests (non-2xx) are shown.
# Each row is also printed as FIGURE lines for bench/plots.sh.
#   bench/cgi_bench.sh [-b BUILD_DIR] [-n REQUESTS] [-r ROUNDS] [-c "16 64"] [-s "none file_and_dir"]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$here/../build requests=3000 rounds=3 clients="16 64" syncs="none file_and_dir"
while getopts "b:n:r:c:s:" o; do
  case $o in
    b) build=$OPTARG ;; n) requests=$OPTARG ;; r) rounds=$OPTARG ;;
    c) clients=$OPTARG ;; s) syncs=$OPTARG ;; *) exit 64 ;;
  esac
done
. "$here/../tests/e2e/webserver.sh"

work=$(mktemp -d)
chmod 0755 "$work"
trap 'stop_server; rm -rf "$work"' EXIT
mkdir -p "$work/cgi-bin"
cp "$build/cgi-examples/counter/counter.cgi" "$build/bench/flock_counter.cgi" "$build/bench/noop.cgi" "$work/cgi-bin/"
chmod 0755 "$work/cgi-bin" "$work"/cgi-bin/*

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

total_lost=0
printf "%-13s %7s %9s %9s %9s %14s %12s %14s %5s %8s %10s %10s\n" durability clients noop flock counter "counter/flock" "flock/noop" "counter/noop" lost refused "flock p99" "ctr p99"
for sync in $syncs; do
  data=$work/data-$sync
  make_data_dir "$data"
  port=$(pick_port)
  start_apache "$work/apache-$sync" "$port" "$work/cgi-bin" TOKENLOCK_COUNTER_DIR="$data" \
    TOKENLOCK_COUNTER_SYNC="$sync" FLOCK_COUNTER_DIR="$data" FLOCK_COUNTER_SYNC="$sync"
  base="http://127.0.0.1:$port/cgi-bin"
  for c in $clients; do
    declare -A rates=() p99s=()
    lost=0 refused=0
    for ((r = 0; r < rounds; r++)); do
      order=(noop flock_counter counter)
      order=("${order[@]:$((r % 3))}" "${order[@]:0:$((r % 3))}")
      for cgi in "${order[@]}"; do
        id="r${r}c${c}${cgi//_/}"
        out=$(ab -q -r -n "$requests" -c "$c" "$base/$cgi.cgi?id=$id" 2>&1)
        rate=$(awk '/^Requests per second/ {print $4}' <<<"$out")
        rates[$cgi]+="$rate "
        p99s[$cgi]+="$(awk '$1 == "99%" {print $2}' <<<"$out") "
        if [ "$cgi" != noop ]; then
          # A hit is lost when its request got a 2xx answer and the counter
          # does not count it; a refused request (503: the lock stayed busy
          # past the wait budget) was told so, and is counted apart.
          got=$(cat "$data/$id.count" 2>/dev/null || echo 0)
          complete=$(awk '/^Complete requests/ {print $3}' <<<"$out")
          non2xx=$(awk '/^Non-2xx responses/ {print $3}' <<<"$out")
          non2xx=${non2xx:-0}
          ok=$((complete - non2xx))
          [ "$got" -ge "$ok" ] || lost=$((lost + ok - got))
          refused=$((refused + non2xx))
        fi
      done
    done
    noop=$(tr ' ' '\n' <<<"${rates[noop]}" | grep . | median)
    flock=$(tr ' ' '\n' <<<"${rates[flock_counter]}" | grep . | median)
    counter=$(tr ' ' '\n' <<<"${rates[counter]}" | grep . | median)
    flock_p99=$(tr ' ' '\n' <<<"${p99s[flock_counter]}" | grep . | median)
    counter_p99=$(tr ' ' '\n' <<<"${p99s[counter]}" | grep . | median)
    total_lost=$((total_lost + lost))
    awk -v s="$sync" -v c="$c" -v n="$noop" -v f="$flock" -v t="$counter" -v l="$lost" \
        -v fp="$flock_p99" -v tp="$counter_p99" -v rf="$refused" 'BEGIN {
      printf "%-13s %7d %9.0f %9.0f %9.0f %13.2fx %11.2fx %13.2fx %5d %8d %10d %10d\n", s, c, n, f, t, t/f, f/n, t/n, l, rf, fp, tp }'
    # The same, for bench/plots.sh.
    for pair in "noop $noop" "flock $flock" "counter $counter"; do
      set -- $pair
      echo "FIGURE name=cgi_${sync}_${c}_$1 value=$2 unit=requests/s"
    done
  done
  stop_server
done
[ "$total_lost" -eq 0 ] || { echo "cgi_bench: $total_lost hits were lost" >&2; exit 1; }
