# A redis-server for the benchmarks, on a free 127.0.0.1 port with a
# password and no persistence; sourced by bench/redis_bench.sh and
# bench/backends.sh.
#
#   . bench/redis_server.sh
#   trap redis_server_stop EXIT
#   redis_server_start             # sets redis_server_url (redis://:bench@127.0.0.1:PORT)
#                                  # and redis_server_port
#
# The server is stopped by its pid, and its directory removed.

redis_server_pid=
redis_server_dir=

redis_server_start() {
  local port
  redis_server_dir=$(mktemp -d)
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  : >"$redis_server_dir/log"
  redis-server --port "$port" --bind 127.0.0.1 --requirepass bench --save "" --appendonly no \
    --dir "$redis_server_dir" --logfile "$redis_server_dir/log" --daemonize no &
  redis_server_pid=$!
  # Ready when its log says so (tail follows the file: no polling).
  { timeout 20 tail -n +1 -F "$redis_server_dir/log" 2>/dev/null || true; } |
    grep -q -m1 "Ready to accept connections" || { echo "redis-server did not start" >&2; exit 1; }
  redis_server_port=$port
  redis_server_url="redis://:bench@127.0.0.1:$port"
}

redis_server_stop() {
  if [ -n "$redis_server_pid" ]; then
    kill "$redis_server_pid" 2>/dev/null || true
    wait "$redis_server_pid" 2>/dev/null || true
  fi
  [ -n "$redis_server_dir" ] && rm -rf "$redis_server_dir"
  redis_server_pid= redis_server_dir=
  return 0
}
