# What tokenlock shows (sourced by attacks.sh): 11 secrets on argv and in
# messages, 12 what counter.cgi and status --json echo.

# 11a: a password given as env:VAR never reaches the process list, where
# every local user reads it while `run` runs. The suite's redis-server asks
# for that password meanwhile.
secret_off_argv() {
  local s=$work/scratch/elevena problems="" run_pid i cmdline="" url
  url="redis://:s3cr3t-pw@127.0.0.1:$redis_port"
  rcli config set requirepass s3cr3t-pw
  rm -f "$s.started"
  "${as_victim[@]}" env TL_URL="$url" "$tl" run --redis env:TL_URL eleven sh -c 'touch "$1"; sleep 5' sh "$s.started" \
    >/dev/null 2>"$s.err" &
  run_pid=$!
  started_pids+=("$run_pid")
  wait_for_file "$s.started" || problems="run did not start its command: $(first_line "$s.err");"
  for i in $(pgrep -u tl_victim -f 'tokenlock run'); do
    cmdline="$cmdline $("${as_attacker[@]}" cat "/proc/$i/cmdline" 2>/dev/null | tr '\0' ' ')"
  done
  case $cmdline in
    *s3cr3t-pw*) problems="$problems the attacker read the password in the process list: $cmdline" ;;
    *env:TL_URL*) ;;
    *) problems="$problems the attacker found no run to look at ($cmdline)" ;;
  esac
  kill "$run_pid" 2>/dev/null
  wait "$run_pid" 2>/dev/null
  redis-cli -p "$redis_port" -a s3cr3t-pw --no-auth-warning config set requirepass "" >/dev/null
  report "attack 11a" "$problems" "argv shows only env:TL_URL"
}

# 11b: a malformed URL is never printed with its password, whatever is
# wrong with it, in a message or a JSON error line.
secret_in_messages() {
  local s=$work/scratch/elevenb problems="" url opt
  for opt in --redis --etcd; do
    for url in 'redis//:PW4711@h:1' 'etcd:/user:PW4711@h:1' 'redis://:PW4711h:1' \
      'redis://:PW4711?x@h:1' 'http://u:PW4711@h:1' 'etcd://u:PW4711@h:99999' ':PW4711@'; do
      "$tl" run "$opt" "$url" -n x true >"$s.out" 2>"$s.err"
      "$tl" --errors=json run "$opt" "$url" -n x true >>"$s.out" 2>>"$s.err"
      if grep -q PW4711 "$s.out" "$s.err"; then
        problems="$problems $opt '$url' printed the password: $(grep -h PW4711 "$s.out" "$s.err" | head -1);"
      fi
    done
  done
  report "attack 11b" "$problems" "no message showed a password"
}

# 11a (secret_off_argv) needs the suite's redis-server: attack_redis runs it.
attack_11() {
  secret_in_messages
}

# 12a: counter.cgi echoes a query's parameter name only escaped, with
# nosniff, and logs environment values escaped.
cgi_echo() {
  local s=$work/scratch/twelve problems="" data=$work/cgi12
  mkdir -m 0700 "$data" && chown tl_victim: "$data"
  "${as_victim[@]}" env REQUEST_METHOD=GET QUERY_STRING='%3Cscript%3E%0D%0AX-Evil:%201%1B[2J=1' \
    TOKENLOCK_COUNTER_DIR="$data" "$cgi" >"$s.out" 2>"$s.err"
  grep -q '<script>' "$s.out" && problems="$problems the body holds raw markup;"
  grep -q '^X-Evil' "$s.out" && problems="$problems the name's CR LF reached the answer raw;"
  grep -qi '^X-Content-Type-Options: nosniff' "$s.out" || problems="$problems no nosniff header;"
  "${as_victim[@]}" env REQUEST_METHOD=GET QUERY_STRING=id=a TOKENLOCK_COUNTER_DIR="$data" \
    TOKENLOCK_COUNTER_SYNC="$(printf 'x\033[2J\nforged log line')" "$cgi" >"$s.out2" 2>"$s.err2"
  tr -d '\n' <"$s.err2" | LC_ALL=C grep -q '[[:cntrl:]]' && problems="$problems the log carries raw control bytes;"
  [ "$(wc -l <"$s.err2")" -le 1 ] || problems="$problems an environment value forged a log line;"
  report "attack 12a" "$problems" "nosniff, the answer: $(sed -n '/^\r*$/,$p' "$s.out" | tail -1)"
}

# 12b: status --json is valid JSON for a lock directory whose path is
# not UTF-8.
status_json() {
  local dir=$work/$'\xff\xfe' problems=""
  mkdir "$dir"
  "$tl" status --json "$dir/L" >"$work/scratch/json.out" 2>&1
  python3 -c 'import json,sys; json.load(open(sys.argv[1], encoding="utf-8"))' "$work/scratch/json.out" \
    2>"$work/scratch/json.err" ||
    problems="not valid JSON: $(first_line "$work/scratch/json.err")"
  report "attack 12b" "$problems" "$(head -c 80 "$work/scratch/json.out")"
}

attack_12() {
  cgi_echo
  status_json
}
