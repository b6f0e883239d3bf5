#!/usr/bin/env bash
# Charts (SVG, gnuplot) from the benchmarks' machine-readable output:
#   bench/plots.sh [-o OUT_DIR] [-p PEERS] [-c CLI] [-n CONTENTION] [-d DURABILITY_JSON] [-g CGI]
#   bench/plots.sh [-o OUT_DIR] PEERS CLI          (the first two, as before)
# Each input is what a benchmark printed:
#   -p  build/bench/peers (FIGURE lines)   -> peers-uncontended.svg,
#       peers-contended.svg, peers-fairness.svg, peers-slowest.svg
#   -c  bench/cli_bench.sh (calls_us_ lines) -> cli-per-call.svg
#   -n  build/bench/contention (FIGURE lines) -> contention-vs1.svg,
#       contention-fairness.svg
#   -d  build/bench/durability --benchmark_out=F --benchmark_out_format=json
#       (Google Benchmark's JSON) -> durability-writes.svg, durability-counter.svg
#   -g  bench/cgi_bench.sh (FIGURE lines) -> cgi-throughput.svg
# Writes into OUT_DIR (default docs/img): docs/benchmarks.md and
# docs/cgi-guide.md show them. Exits 77 when gnuplot is missing.
set -euo pipefail
usage() {
  echo "usage: plots.sh [-o OUT_DIR] [-p PEERS] [-c CLI] [-n CONTENTION] [-d DURABILITY_JSON] [-g CGI]" >&2
  exit 64
}
out=docs/img peers= cli= contention= durability= cgi=
while getopts "o:p:c:n:d:g:" o; do
  case $o in
    o) out=$OPTARG ;; p) peers=$OPTARG ;; c) cli=$OPTARG ;; n) contention=$OPTARG ;;
    d) durability=$OPTARG ;; g) cgi=$OPTARG ;; *) usage ;;
  esac
done
shift $((OPTIND - 1))
if [ $# -eq 2 ] && [ -z "$peers$cli" ]; then peers=$1 cli=$2; elif [ $# -ne 0 ]; then usage; fi
[ -n "$peers$cli$contention$durability$cgi" ] || usage
command -v gnuplot >/dev/null || { echo "SKIP: gnuplot is not installed (scripts/install-deps installs gnuplot-nox)"; exit 77; }
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
written=()

# FIGURE name=N value=V unit=U -> "N V"
figures() {
  sed -n 's/^FIGURE name=\([^ ]*\) value=\([^ ]*\) unit=.*/\1 \2/p' "$1" >"$2"
  [ -s "$2" ] || { echo "plots.sh: no FIGURE lines in $1" >&2; exit 65; }
}
value() { awk -v n="$2" '$1 == n { v = $2 } END { print (v == "" ? "NaN" : v) }' "$1"; }

common='set terminal svg size 640,360 font "sans,11" background rgb "white"; set termoption noenhanced;
set style fill solid 0.85 border -1; set boxwidth 0.7 relative; set grid ytics;
set key top right; set yrange [0:*]'
colours=("#4477aa" "#cc6677" "#228833" "#ccbb44")

if [ -n "$peers" ]; then
  figures "$peers" "$work/peers"
  locks="tokenlock flock liblockfile excl mkdir"
  for l in $locks; do echo "$l $(value "$work/peers" "uncontended_$l")"; done >"$work/uncontended.dat"
  for l in $locks; do
    echo "$l $(value "$work/peers" "contended_4_${l}_ops") $(value "$work/peers" "contended_16_${l}_ops")"
  done >"$work/contended.dat"
  for l in $locks; do
    echo "$l $(value "$work/peers" "contended_4_${l}_jain") $(value "$work/peers" "contended_16_${l}_jain")"
  done >"$work/fairness.dat"
  for l in $locks; do
    echo "$l $(value "$work/peers" "contended_4_${l}_slowest") $(value "$work/peers" "contended_16_${l}_slowest")"
  done >"$work/slowest.dat"
  gnuplot <<GP
$common
set output "$out/peers-uncontended.svg"
set title "Uncontended acquire+release per second (higher is better)"
set ylabel "per second"
plot "$work/uncontended.dat" using 2:xtic(1) with boxes lc rgb "${colours[0]}" notitle
set output "$out/peers-contended.svg"
set title "Processes incrementing one counter: updates per second"
set style data histograms; set style histogram clustered gap 1
plot "$work/contended.dat" using 2:xtic(1) title "4 processes" lc rgb "${colours[0]}", \
     "" using 3 title "16 processes" lc rgb "${colours[1]}"
set output "$out/peers-fairness.svg"
set title "Fairness: Jain's index over the processes' counts (1 = equal)"
set ylabel "Jain's index"; set yrange [0:1.05]
plot "$work/fairness.dat" using 2:xtic(1) title "4 processes" lc rgb "${colours[0]}", \
     "" using 3 title "16 processes" lc rgb "${colours[1]}"
set output "$out/peers-slowest.svg"
set title "The slowest process's updates against an equal share (1 = equal)"
set ylabel "share"
plot "$work/slowest.dat" using 2:xtic(1) title "4 processes" lc rgb "${colours[0]}", \
     "" using 3 title "16 processes" lc rgb "${colours[1]}"
GP
  written+=(peers-uncontended peers-contended peers-fairness peers-slowest)
fi

if [ -n "$cli" ]; then
  sed -n 's/^calls_us_\([a-z_]*\)=\(.*\)/\1 \2/p' "$cli" | grep -v version | awk '
    BEGIN { name["true"] = "true (the floor)"; name["run_static"] = "tokenlock run";
            name["run_dynamic"] = "tokenlock run, dynamic"; name["lockfile_progs"] = "lockfile-progs" }
    { printf "\"%s\" %s\n", ($1 in name ? name[$1] : $1), $2 }' >"$work/cli.dat"
  [ -s "$work/cli.dat" ] || { echo "plots.sh: no calls_us_ lines in $cli" >&2; exit 65; }
  gnuplot <<GP
$common
set output "$out/cli-per-call.svg"
set title "One call of a lock command around true (lower is better)"
set ylabel "microseconds per call"; set xtics rotate by -20
plot "$work/cli.dat" using 2:xtic(1) with boxes lc rgb "${colours[0]}" notitle
GP
  written+=(cli-per-call)
fi

if [ -n "$contention" ]; then
  figures "$contention" "$work/contention"
  # contention_<mode>_<procs>_<vs1|jain>: one row per process count, one
  # column per waiting mode, in the order the benchmark ran them.
  modes=$(sed -n 's/^contention_\(.*\)_[0-9]*_vs1 .*/\1/p' "$work/contention" | awk '!seen[$0]++')
  procs=$(sed -n 's/^contention_.*_\([0-9]*\)_vs1 .*/\1/p' "$work/contention" | sort -n | uniq)
  for what in vs1 jain; do
    for p in $procs; do
      row=$p
      for m in $modes; do row="$row $(value "$work/contention" "contention_${m}_${p}_$what")"; done
      echo "$row"
    done >"$work/contention-$what.dat"
  done
  plot_modes() {  # $1: data file; one line per mode
    local i=0 m sep=""
    for m in $modes; do
      printf '%s"%s" using 1:%d with linespoints lw 2 pt 7 lc rgb "%s" title "%s"' \
        "$sep" "$1" $((i + 2)) "${colours[$((i % 4))]}" "$m"
      sep=", "
      i=$((i + 1))
    done
  }
  gnuplot <<GP
$common
set logscale x 2; set xlabel "processes"; set key bottom left
set output "$out/contention-vs1.svg"
set title "Throughput of N contending processes against one (1 = no loss)"
set ylabel "updates/s, N processes / 1 process"; set yrange [0:1.3]
plot $(plot_modes "$work/contention-vs1.dat"), 1 with lines dt 2 lc rgb "#888888" notitle
set output "$out/contention-fairness.svg"
set title "Fairness: Jain's index over the processes' counts (1 = equal)"
set ylabel "Jain's index"; set yrange [0:1.05]
plot $(plot_modes "$work/contention-jain.dat")
GP
  written+=(contention-vs1 contention-fairness)
fi

if [ -n "$durability" ]; then
  # Google Benchmark's JSON: the median of each benchmark's repetitions (or
  # the runs' own median when it reported no aggregates), in microseconds.
  /usr/bin/python3 - "$durability" "$work" <<'PY'
import json, statistics, sys
data = json.load(open(sys.argv[1]))
scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
runs = {}
medians = {}
for b in data["benchmarks"]:
    name = b.get("run_name", b["name"])
    t = b["real_time"] * scale[b.get("time_unit", "ns")]
    if b.get("aggregate_name") == "median":
        medians[name] = t
    elif b.get("run_type", "iteration") == "iteration":
        runs.setdefault(name, []).append(t)
for name, ts in runs.items():
    medians.setdefault(name, statistics.median(ts))
if not medians:
    sys.exit("plots.sh: no benchmarks in " + sys.argv[1])
def get(n):
    return "%.3f" % medians[n] if n in medians else "NaN"
labels = {64: "64 B", 65536: "64 KiB", 1048576: "1 MiB"}
with open(sys.argv[2] + "/writes.dat", "w") as f:
    for size, label in labels.items():
        f.write('"%s" %s %s %s %s\n' % (label, get("PlainRewrite/%d" % size),
                *(get("AtomicWrite/%d/%d" % (size, lv)) for lv in range(3))))
with open(sys.argv[2] + "/counter.dat", "w") as f:
    f.write('"acquire+release" %s\n' % get("AcquireRelease"))
    for lv, n in enumerate(["none", "file", "file_and_dir"]):
        f.write('"increment, %s" %s\n' % (n, get("IncrementCounter/%d" % lv)))
PY
  gnuplot <<GP
$common
set output "$out/durability-writes.svg"
set title "One write of the whole file, by size and durability (lower is better)"
set ylabel "microseconds per write (log scale)"; set logscale y; set yrange [*:*]
set style data histograms; set style histogram clustered gap 1; set key top left
plot "$work/writes.dat" using 2:xtic(1) title "plain rewrite (tears)" lc rgb "#888888", \
     "" using 3 title "atomic, none" lc rgb "${colours[0]}", \
     "" using 4 title "atomic, file" lc rgb "${colours[1]}", \
     "" using 5 title "atomic, file_and_dir" lc rgb "${colours[2]}"
set output "$out/durability-counter.svg"
unset logscale y; set yrange [0:*]; set style data boxes; set key top right
set title "increment_counter by durability, against a bare acquire+release"
set ylabel "microseconds per call"; set xtics rotate by -15
plot "$work/counter.dat" using 2:xtic(1) with boxes lc rgb "${colours[0]}" notitle
GP
  written+=(durability-writes durability-counter)
fi

if [ -n "$cgi" ]; then
  figures "$cgi" "$work/cgi"
  # cgi_<durability>_<clients>_<noop|flock|counter>: one group per
  # durability and client count.
  sed -n 's/^cgi_\(.*\)_\([0-9]*\)_noop .*/\1 \2/p' "$work/cgi" | while read -r s c; do
    echo "\"$s, $c\" $(value "$work/cgi" "cgi_${s}_${c}_noop") \
$(value "$work/cgi" "cgi_${s}_${c}_flock") $(value "$work/cgi" "cgi_${s}_${c}_counter")"
  done >"$work/cgi.dat"
  gnuplot <<GP
$common
set output "$out/cgi-throughput.svg"
set title "CGI requests per second under Apache (higher is better)"
set ylabel "requests per second"; set xlabel "durability, concurrent clients"; set key top right
set style data histograms; set style histogram clustered gap 1
plot "$work/cgi.dat" using 2:xtic(1) title "a CGI that does nothing" lc rgb "#888888", \
     "" using 3 title "flock(2) counter" lc rgb "${colours[1]}", \
     "" using 4 title "counter.cgi (tokenlock)" lc rgb "${colours[0]}"
GP
  written+=(cgi-throughput)
fi

for f in "${written[@]}"; do
  grep -q "<svg" "$out/$f.svg" || { echo "plots.sh: $out/$f.svg was not written" >&2; exit 1; }
done
echo "wrote $(printf "$out/%s.svg " "${written[@]}")"
