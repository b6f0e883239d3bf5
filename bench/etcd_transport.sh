#!/usr/bin/env bash
# Runs bench/etcd_transport against a three-member etcd cluster that it
# starts on free 127.0.0.1 ports (data in a temporary directory), waits for
# by polling each member's /health, and stops by pid.
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
for p in etcd etcdctl curl; do
  command -v "$p" >/dev/null || { echo "etcd_transport.sh: $p is not installed (scripts/install-deps)"; exit 77; }
done
bin=$build/bench/etcd_transport
[ -x "$bin" ] || { echo "etcd_transport.sh: $bin is not built" >&2; exit 1; }

dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cluster="" clients=()
for i in 0 1 2; do
  c=$(free_port) p=$(free_port)
  clients+=("$c") peers[$i]=$p
  cluster+="${cluster:+,}m$i=http://127.0.0.1:$p"
done
for i in 0 1 2; do
  etcd --name "m$i" --data-dir "$dir/m$i" \
    --listen-client-urls "http://127.0.0.1:${clients[$i]}" --advertise-client-urls "http://127.0.0.1:${clients[$i]}" \
    --listen-peer-urls "http://127.0.0.1:${peers[$i]}" --initial-advertise-peer-urls "http://127.0.0.1:${peers[$i]}" \
    --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token "bench-$$" \
    >"$dir/m$i.log" 2>&1 &
  pids+=($!)
done
# Polls each member's /health: etcd has no readiness notification for a
# member that has joined and sees a leader.
for i in 0 1 2; do
  for _ in $(seq 600); do
    curl -s --max-time 1 "http://127.0.0.1:${clients[$i]}/health" | grep -q '"true"' && continue 2
    sleep 0.05
  done
  echo "etcd_transport.sh: member m$i not healthy in 30 s; its log:" >&2
  cat "$dir/m$i.log" >&2
  exit 1
done
url="etcd://127.0.0.1:${clients[0]},127.0.0.1:${clients[1]},127.0.0.1:${clients[2]}"
if [ $quick = 1 ]; then
  "$bin" --rounds 1 --cycles 1 "$@" "$url"
else
  "$bin" "$@" "$url"
fi
