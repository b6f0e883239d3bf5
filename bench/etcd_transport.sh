#!/usr/bin/env bash
# Runs etcd_transport (tests/etcd_measure/) against a three-member etcd cluster that it
# starts on free 127.0.0.1 ports (bench/etcd_cluster.sh) and stops by pid.
#
#   bench/etcd_transport.sh -b BUILD_DIR [-q] [-- etcd_transport options]
#
# -q: a smoke run (one round of one cycle), for ctest. Exit 77 when etcd
# or etcdctl is missing.
set -euo pipefail
build=build quick=0
while [ $# -gt 0 ]; do
  case $1 in
    -b) build=$2; shift 2 ;;
    -q) quick=1; shift ;;
    --) shift; break ;;
    *) echo "usage: $0 -b BUILD_DIR [-q] [-- options]" >&2; exit 64 ;;
  esac
done
. "$(dirname "$0")/etcd_cluster.sh"
etcd_cluster_require etcd_transport.sh
bin=$build/tests/etcd_measure/etcd_transport
[ -x "$bin" ] || { echo "etcd_transport.sh: $bin is not built (with the tests and the benches: TOKENLOCK_TESTS, TOKENLOCK_BENCH)" >&2; exit 1; }

trap etcd_cluster_stop EXIT
etcd_cluster_start etcd_transport.sh
url=$etcd_cluster_url
if [ $quick = 1 ]; then
  "$bin" --rounds 1 --cycles 1 "$@" "$url"
else
  "$bin" "$@" "$url"
fi
