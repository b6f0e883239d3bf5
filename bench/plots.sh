#!/usr/bin/env bash
# Charts (SVG, gnuplot) from the benchmarks' machine-readable output:
#   bench/plots.sh [-o OUT_DIR] PEERS_OUTPUT CLI_OUTPUT
# PEERS_OUTPUT is what build/bench/peers printed (its FIGURE lines),
# CLI_OUTPUT what bench/cli_bench.sh printed (its calls_us_ lines). Writes
# peers-uncontended.svg, peers-contended.svg, peers-fairness.svg and
# cli-per-call.svg into OUT_DIR (default docs/img), the charts that
# docs/benchmarks.md shows. Exits 77 when gnuplot is missing.
set -euo pipefail
out=docs/img
while getopts o: o; do
  case $o in
    o) out=$OPTARG ;;
    *) echo "usage: plots.sh [-o OUT_DIR] PEERS_OUTPUT CLI_OUTPUT" >&2; exit 64 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || { echo "usage: plots.sh [-o OUT_DIR] PEERS_OUTPUT CLI_OUTPUT" >&2; exit 64; }
peers=$1 cli=$2
command -v gnuplot >/dev/null || { echo "SKIP: gnuplot is not installed (scripts/install-deps installs gnuplot-nox)"; exit 77; }
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# FIGURE name=N value=V unit=U -> "N V"
figures() { sed -n 's/^FIGURE name=\([^ ]*\) value=\([^ ]*\) unit=.*/\1 \2/p' "$1"; }
figures "$peers" >"$work/peers"
[ -s "$work/peers" ] || { echo "plots.sh: no FIGURE lines in $peers" >&2; exit 65; }
locks="tokenlock flock liblockfile excl mkdir"
value() { awk -v n="$1" '$1 == n { print $2 }' "$work/peers"; }

for l in $locks; do echo "$l $(value "uncontended_$l")"; done >"$work/uncontended.dat"
for l in $locks; do
  echo "$l $(value "contended_4_${l}_ops") $(value "contended_16_${l}_ops")"
done >"$work/contended.dat"
for l in $locks; do
  echo "$l $(value "contended_4_${l}_jain") $(value "contended_16_${l}_jain")"
done >"$work/fairness.dat"
sed -n 's/^calls_us_\([a-z_]*\)=\(.*\)/\1 \2/p' "$cli" | grep -v version | awk '
  BEGIN { name["true"] = "true (the floor)"; name["run_static"] = "tokenlock run";
          name["run_dynamic"] = "tokenlock run, dynamic"; name["lockfile_progs"] = "lockfile-progs" }
  { printf "\"%s\" %s\n", ($1 in name ? name[$1] : $1), $2 }' >"$work/cli.dat"
[ -s "$work/cli.dat" ] || { echo "plots.sh: no calls_us_ lines in $cli" >&2; exit 65; }

common='set terminal svg size 640,360 font "sans,11" background rgb "white"; set termoption noenhanced;
set style fill solid 0.85 border -1; set boxwidth 0.7 relative; set grid ytics;
set key top right; set yrange [0:*]'
gnuplot <<GP
$common
set output "$out/peers-uncontended.svg"
set title "Uncontended acquire+release per second (higher is better)"
set ylabel "per second"
plot "$work/uncontended.dat" using 2:xtic(1) with boxes lc rgb "#4477aa" notitle
set output "$out/peers-contended.svg"
set title "Processes incrementing one counter: updates per second"
set style data histograms; set style histogram clustered gap 1
plot "$work/contended.dat" using 2:xtic(1) title "4 processes" lc rgb "#4477aa", \
     "" using 3 title "16 processes" lc rgb "#cc6677"
set output "$out/peers-fairness.svg"
set title "Fairness: Jain's index over the processes' counts (1 = equal)"
set ylabel "Jain's index"; set yrange [0:1.05]
plot "$work/fairness.dat" using 2:xtic(1) title "4 processes" lc rgb "#4477aa", \
     "" using 3 title "16 processes" lc rgb "#cc6677"
set style data boxes; set style fill solid 0.85 border -1; set boxwidth 0.7 relative
set output "$out/cli-per-call.svg"
set title "One call of a lock command around true (lower is better)"
set ylabel "microseconds per call"; set yrange [0:*]; set xtics rotate by -20
plot "$work/cli.dat" using 2:xtic(1) with boxes lc rgb "#4477aa" notitle
GP
for f in peers-uncontended peers-contended peers-fairness cli-per-call; do
  grep -q "<svg" "$out/$f.svg" || { echo "plots.sh: $out/$f.svg was not written" >&2; exit 1; }
done
echo "wrote $out/peers-uncontended.svg $out/peers-contended.svg $out/peers-fairness.svg $out/cli-per-call.svg"
