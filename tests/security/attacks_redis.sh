# The Redis parts of attack 8 and the fence directory of attack 2, against
# a redis-server on 127.0.0.1 that the suite starts and stops by pid
# (sourced by attacks.sh). Skipped, with the reason, without redis-server.

# Starts redis-server on a free loopback port; sets redis_url.
start_redis() {
  local port try i
  for ((try = 0; try < 5; try++)); do
    port=$((20000 + RANDOM % 30000))
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
      --dir "$work" --logfile "$work/redis.log" &
    redis_pid=$!
    started_pids+=("$redis_pid")
    for ((i = 0; i < 200; i++)); do
      [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && { redis_port=$port; redis_url=redis://127.0.0.1:$port; return 0; }
      alive "$redis_pid" || break
      sleep 0.05
    done
    kill "$redis_pid" 2>/dev/null
    wait "$redis_pid" 2>/dev/null
  done
  return 1
}

rcli() { redis-cli -p "$redis_port" "$@" >/dev/null; }

# A fence key that is not a decimal below 2^63 made fences stop growing.
redis_fence_key() {
  local value s=$work/scratch/redis problems="" rc
  for value in 1e23 inf; do
    rcli set "tokenlock:f-$value:fence" "$value"
    "${as_victim[@]}" "$tl" acquire -n --redis "$redis_url" --lease 60 "f-$value" >"$s.out" 2>"$s.err"
    rc=$?
    if [ "$rc" != 69 ]; then
      problems="$problems acquire with the fence key holding $value exited $rc (token $(head -c 40 "$s.out")), not 69;"
    elif ! grep -q 'break --redis' "$s.err" || ! grep -q "f-$value:fence" "$s.err"; then
      problems="$problems the message names neither the key nor 'tokenlock break --redis': $(first_line "$s.err");"
    fi
  done
  report "attack 8e (Redis fence key 1e23, inf)" "$problems" "exit 69: $(first_line "$s.err")"
}

# A grant "garbage" without expiry was a holder "pid 0" forever.
redis_garbage_grant() {
  local s=$work/scratch/redis problems="" rc
  rcli set tokenlock:garbage garbage
  "${as_victim[@]}" "$tl" run -n -v --redis "$redis_url" garbage true >"$s.out" 2>"$s.err"
  rc=$?
  if [ "$rc" != 69 ]; then
    problems="run -n on a grant 'garbage' without expiry exited $rc, not 69: $(first_line "$s.err")"
  elif ! grep -q 'break --redis' "$s.err"; then
    problems="the message does not give the fix 'tokenlock break --redis': $(first_line "$s.err")"
  fi
  report "attack 8f (Redis grant 'garbage' without expiry)" "$problems" "exit 69: $(first_line "$s.err")"
}

# localhost in the command's URL.
redis_localhost() {
  local s=$work/scratch/redis problems="" rc
  "${as_victim[@]}" "$tl" run --redis "redis://localhost:$redis_port" by-name true >"$s.out" 2>"$s.err"
  rc=$?
  if [ "$rc" != 0 ] && ! grep -qi 'address' "$s.err"; then
    problems="run --redis redis://localhost:$redis_port exited $rc without saying it needs an address: $(first_line "$s.err")"
  fi
  report "attack 8g (localhost in the Redis URL)" "$problems" "exit $rc $(first_line "$s.err")"
}

# 2 through Redis: counter.cgi's fence directory TARGET.fence made by the
# attacker (mode 0777), her file renamed onto the temporary file in it.
redis_fence_dir() {
  local fence=$sticky/r4.count.fence s=$work/scratch/rfence start=$SECONDS count=5
  local try racer_pid problems="" unrefused="" detail="no try ran" entry
  echo $count >"$sticky/r4.count" && chown tl_victim: "$sticky/r4.count"
  "${as_attacker[@]}" sh -c 'umask 0; mkdir -p "$1/f.00000000000000000000"' sh "$fence"
  for ((try = 1; try <= tries && SECONDS - start < race_seconds; try++)); do
    entry=$(ls -A "$fence" | head -1)
    "${as_attacker[@]}" sh -c 'umask 0; echo 999999 >"$1"' sh "$sticky/attacker-r.src"
    rm -f "$s.ready"
    "${as_attacker[@]}" "$racer" swap-temp "$fence/$entry" .r4.count.tmp. "$sticky/attacker-r.src" "$s.ready" 10000 \
      >"$s.racer" 2>&1 &
    racer_pid=$!
    wait_for_file "$s.ready" || { problems="the racer did not start: $(head -1 "$s.racer")"; break; }
    "${as_victim[@]}" env -i REQUEST_METHOD=GET QUERY_STRING=id=r4 TOKENLOCK_COUNTER_DIR="$sticky" \
      TOKENLOCK_COUNTER_REDIS="$redis_url" "$cgi" >"$s.out" 2>"$s.err"
    kill "$racer_pid" 2>/dev/null
    wait "$racer_pid" 2>/dev/null
    grep -q '^Status: 200' "$s.out" && count=$((count + 1))
    if [ "$(cat "$sticky/r4.count")" != "$count" ] || [ "$(stat -c %U "$sticky/r4.count")" != tl_victim ]; then
      problems="try $try: r4.count now holds '$(head -c 20 "$sticky/r4.count")', owner $(stat -c %U "$sticky/r4.count") (counter.cgi: $(head -1 "$s.out" | tr -d '\r'))"
      break
    fi
    # Not refused, but the race not won yet: the next try may win it.
    if { grep -q '^Status: 200' "$s.out" || ! grep -q refusing "$s.err"; } && [ -z "$unrefused" ]; then
      unrefused="counter.cgi used the attacker's fence directory (mode 0777) (the race was not won in $try tries): $(head -1 "$s.out" | tr -d '\r'), log: $(first_line "$s.err")"
    fi
    detail="$try tries, count and owner intact: $(head -1 "$s.out" | tr -d '\r'), log: $(first_line "$s.err")"
  done
  report "attack 2r (Redis fence directory)" "${problems:-$unrefused}" "$detail"
}

attack_redis() {
  if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    echo "redis: skipped (redis-server or redis-cli is not installed; scripts/install-deps installs redis-server)"
    return 0
  fi
  start_redis || { report "redis" "cannot start redis-server on 127.0.0.1 (see $work/redis.log)" ""; return; }
  redis_fence_key
  redis_garbage_grant
  redis_localhost
  secret_off_argv
  if env -i REQUEST_METHOD=GET QUERY_STRING=id=probe TOKENLOCK_COUNTER_DIR="$work/scratch" \
    TOKENLOCK_COUNTER_REDIS="$redis_url" "$cgi" 2>&1 | grep -q 'built without the Redis'; then
    echo "attack 2r (Redis fence directory): skipped (this counter.cgi was built without Redis)"
  else
    redis_fence_dir
  fi
  kill "$redis_pid"
  wait "$redis_pid" 2>/dev/null
}
