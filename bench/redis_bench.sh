#!/usr/bin/env bash
# The Redis lock side by side with its floor and with redis-py's Lock, in
# one run against one redis-server that this script starts on 127.0.0.1
# (a free port, a password, no persistence) and stops by its pid.
#   bench/redis_bench.sh [-b BUILD_DIR] [-q]
# -q: a quick run (smoke test). Prints FIGURE lines; docs/redis.md has a
# table from one run.
set -euo pipefail
build=build quick=0
while getopts "b:q" o; do
  case $o in b) build=$OPTARG ;; q) quick=1 ;; *) exit 64 ;; esac
done
bench=$build/bench/redis_bench
[ -x "$bench" ] || { echo "redis_bench: build it first ($bench)" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "SKIP: redis-server is not installed"; exit 77; }
here=$(cd "$(dirname "$0")" && pwd)
. "$here/redis_server.sh"
trap redis_server_stop EXIT
redis_server_start
url=$redis_server_url port=$redis_server_port
if [ $quick = 1 ]; then rounds=2 n=50 hand=5 secs=0.2 procs="2 4"; else rounds=301 n=30 hand=200 secs=3 procs="2 4 8 16"; fi
py=0
/usr/bin/python3 -c "import redis" 2>/dev/null && py=1 || echo "note: python3-redis is missing; redis-py figures left out"
"$bench" "$url" pair "$rounds" "$n"
# A round trip costs what a wake-up of the other side costs: on this VM
# about 110 us when client and server run on different CPUs, 13 us when
# they share one. The same pair, pinned both ways, shows what the lock's
# scripts cost against each.
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ] && taskset -pc 0 "$redis_server_pid" >/dev/null 2>&1; then
  taskset -c 0 "$bench" "$url" pair "$rounds" "$n" | sed 's/name=/name=same_cpu_/'
  taskset -c 1 "$bench" "$url" pair "$rounds" "$n" | sed 's/name=/name=other_cpu_/'
  taskset -pc "0-$(($(nproc) - 1))" "$redis_server_pid" >/dev/null
fi
[ $py = 1 ] && /usr/bin/python3 "$here/redis_py_bench.py" "$port" bench pair "$rounds" "$n"
# An uncontended shared acquire+release against an exclusive one, side by side.
"$bench" "$url" shared "$rounds" "$n"
"$bench" "$url" handoff "$hand"
[ $py = 1 ] && /usr/bin/python3 "$here/redis_py_bench.py" "$port" bench handoff "$((hand / 4 + 1))"
for p in $procs; do
  "$bench" "$url" contend "$p" "$secs"
  [ $py = 1 ] && /usr/bin/python3 "$here/redis_py_bench.py" "$port" bench contend "$p" "$secs"
done
exit 0
