#!/usr/bin/env bash
# The etcd lock against its four targets (tests/etcd_measure/etcd_bench.cpp), in one run
# on a three-member etcd cluster that this script starts on free 127.0.0.1
# ports (bench/etcd_cluster.sh) and stops by pid.
#
#   bench/etcd_bench.sh [-b BUILD_DIR] [-q] [-- etcd_bench options]
#
# The command's workload (tokenlock run --etcd URL NAME true) runs when
# the run of BUILD_DIR/tools/tokenlock (or tokenlock-dynamic) knows --etcd.
# -q: a smoke run, each workload with a tiny count (ctest
# bench_etcd_smoke): it checks that every workload runs and every acquire
# is granted, not the figures. Exit 77 when etcd or etcdctl is missing.
set -euo pipefail
build=build quick=0
while [ $# -gt 0 ]; do
  case $1 in
    -b) build=$2; shift 2 ;;
    -q) quick=1; shift ;;
    --) shift; break ;;
    *) echo "usage: $0 [-b BUILD_DIR] [-q] [-- etcd_bench options]" >&2; exit 64 ;;
  esac
done
. "$(dirname "$0")/etcd_cluster.sh"
etcd_cluster_require etcd_bench.sh
bin=$build/tests/etcd_measure/etcd_bench
[ -x "$bin" ] || { echo "etcd_bench.sh: $bin is not built (with the tests and the benches: TOKENLOCK_TESTS, TOKENLOCK_BENCH)" >&2; exit 1; }
# The command whose run knows --etcd: the static one, else the dynamically
# linked one (libcurl cannot be linked statically on Debian); else the
# static one, and etcd_bench says why its workload is left out.
command=()
for c in "$build/tools/tokenlock" "$build/tools/tokenlock-dynamic"; do
  [ -x "$c" ] || continue
  [ ${#command[@]} = 0 ] && command=(--command "$c")
  if "$c" run --help 2>&1 | grep -q -e --etcd; then command=(--command "$c"); break; fi
done

trap etcd_cluster_stop EXIT
etcd_cluster_start etcd_bench.sh
if [ $quick = 1 ]; then
  echo "# smoke run: tiny counts; the figures are not judged"
  "$bin" --rounds 1 --cycles 2 --process-cycles 1 --handoffs 2 --jain-procs 16 --jain-total 32 \
    "${command[@]}" "$@" "$etcd_cluster_url"
else
  "$bin" "${command[@]}" "$@" "$etcd_cluster_url"
fi
