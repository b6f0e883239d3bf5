#!/usr/bin/env bash
# Every chart of docs/benchmarks.md and docs/cgi-guide.md, drawn by
# bench/plots.sh from quick runs of the benchmarks (ctest bench_plots_smoke).
#   bench/plots_smoke.sh BUILD_DIR
# Exits 77 (skipped) when gnuplot is missing.
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
command -v gnuplot >/dev/null || { echo "SKIP: gnuplot is not installed (scripts/install-deps installs gnuplot-nox)"; exit 77; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
"$build/bench/peers" --procs 4,16 --seconds 0.2 --uncontended-ms 10 --rounds 2 >"$d/peers"
"$here/cli_bench.sh" -b "$build" -q >"$d/cli"
"$build/bench/contention" --procs 1,2,4 --seconds 0.15 >"$d/contention"
"$build/bench/durability" --benchmark_min_time=0.001 --benchmark_repetitions=2 \
  --benchmark_out="$d/durability.json" --benchmark_out_format=json >/dev/null
"$here/cgi_bench.sh" -b "$build" -n 100 -r 1 -c 8 -s none >"$d/cgi"
"$here/plots.sh" -o "$d/img" -p "$d/peers" -c "$d/cli" -n "$d/contention" \
  -d "$d/durability.json" -g "$d/cgi"
n=$(ls "$d/img"/*.svg | wc -l)
[ "$n" -eq 10 ] || { echo "FAIL: $n charts, expected 10" >&2; ls "$d/img" >&2; exit 1; }
echo "ok: 10 charts"
