# A three-member etcd cluster for the etcd benchmarks, on free 127.0.0.1
# ports with its data in a temporary directory; sourced by
# bench/etcd_transport.sh and bench/etcd_bench.sh.
#
#   . bench/etcd_cluster.sh
#   etcd_cluster_require NAME      # exit 77 (skip) when etcd, etcdctl or curl is missing
#   trap etcd_cluster_stop EXIT
#   etcd_cluster_start NAME        # sets etcd_cluster_url and etcd_cluster_endpoints
#
# etcd_cluster_url is "etcd://127.0.0.1:P0,127.0.0.1:P1,127.0.0.1:P2" (the
# lock's form), etcd_cluster_endpoints "http://127.0.0.1:P0,..." (etcdctl's).
# The members are stopped by their pids, and the directory removed.

etcd_cluster_pids=()
etcd_cluster_dir=

etcd_cluster_require() {
  local p
  for p in etcd etcdctl curl python3; do
    command -v "$p" >/dev/null || { echo "$1: $p is not installed (scripts/install-deps)"; exit 77; }
  done
}

# Below the range for outgoing connections, from the counter the tests
# share: a port-0 pick could be taken by a client, or by another test run
# beside this one, before etcd binds it.
etcd_cluster_free_port() {
  python3 "$(dirname "${BASH_SOURCE[0]}")/../tests/support/reserve_port.py"
}

etcd_cluster_start() {
  local name=$1 i members="" clients=() peers=()
  etcd_cluster_dir=$(mktemp -d)
  for i in 0 1 2; do
    clients[$i]=$(etcd_cluster_free_port) peers[$i]=$(etcd_cluster_free_port)
    members+="${members:+,}m$i=http://127.0.0.1:${peers[$i]}"
  done
  for i in 0 1 2; do
    etcd --name "m$i" --data-dir "$etcd_cluster_dir/m$i" \
      --listen-client-urls "http://127.0.0.1:${clients[$i]}" --advertise-client-urls "http://127.0.0.1:${clients[$i]}" \
      --listen-peer-urls "http://127.0.0.1:${peers[$i]}" --initial-advertise-peer-urls "http://127.0.0.1:${peers[$i]}" \
      --initial-cluster "$members" --initial-cluster-state new --initial-cluster-token "bench-$$" \
      >"$etcd_cluster_dir/m$i.log" 2>&1 &
    etcd_cluster_pids+=($!)
  done
  # Polls each member's /health: etcd has no readiness notification for a
  # member that has joined and sees a leader.
  for i in 0 1 2; do
    for _ in $(seq 600); do
      curl -s --max-time 1 "http://127.0.0.1:${clients[$i]}/health" | grep -q '"true"' && continue 2
      sleep 0.05
    done
    echo "$name: etcd member m$i not healthy in 30 s; its log:" >&2
    cat "$etcd_cluster_dir/m$i.log" >&2
    exit 1
  done
  etcd_cluster_url="etcd://127.0.0.1:${clients[0]},127.0.0.1:${clients[1]},127.0.0.1:${clients[2]}"
  etcd_cluster_endpoints="http://127.0.0.1:${clients[0]},http://127.0.0.1:${clients[1]},http://127.0.0.1:${clients[2]}"
}

etcd_cluster_stop() {
  local p
  for p in "${etcd_cluster_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${etcd_cluster_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  [ -n "$etcd_cluster_dir" ] && rm -rf "$etcd_cluster_dir"
  # Once only: a second call (an EXIT trap after an explicit stop) must not
  # signal pids that may have been reused.
  etcd_cluster_pids=() etcd_cluster_dir=
  return 0
}
