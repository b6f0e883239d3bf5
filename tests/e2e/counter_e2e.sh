#!/usr/bin/env bash
# counter.cgi behind a real web server on 127.0.0.1.
#   counter_e2e.sh apache|lighttpd COUNTER_CGI TOKENLOCK_TOOL [full|load]
# load: thousands of requests from 16 and 64 clients at one id and at
# several; every response must be 200 and every counter exact.
# full (the default) adds: SIGKILL of CGI processes under load, bad
# inputs, a corrupt counter, an unwritable data directory, a busy lock
# (503), HEAD and peek, the SVG as XML. The server is stopped by its pid.
# TOKENLOCK_E2E_REDIS=1: the counters' locks live in a redis-server that
# this script starts on 127.0.0.1 (a free port, a password) and stops by its
# pid (TOKENLOCK_COUNTER_LOCK=redis://...); skipped (status 77) without
# redis-server.
# TOKENLOCK_E2E_ETCD=1: the same in a three-member etcd cluster on
# 127.0.0.1 (bench/etcd_cluster.sh; TOKENLOCK_COUNTER_LOCK=etcd://...),
# stopped by the members' pids; skipped (status 77) without etcd.
# (The older TOKENLOCK_COUNTER_REDIS and _ETCD, read as
# TOKENLOCK_COUNTER_LOCK, are tested in cgi_unit_tests, attacks_redis.sh
# and etcd_hostile_tests.)
# TOKENLOCK_E2E_WAIT_MS sets the CGI's wait budget under load (default
# 2000) and TOKENLOCK_E2E_REQUESTS the requests per load (default 2000):
# sanitizer builds start each CGI several times slower, and use more time
# and fewer requests.
set -euo pipefail
server=$1 cgi_binary=$2 tool=$3 mode=${4:-full}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/webserver.sh"
. "$here/../../bench/etcd_cluster.sh"
server_command=$server
[ "$server" = apache ] && server_command=apache2
for need in "$server_command" ab curl; do
  command -v "$need" >/dev/null ||
    { echo "SKIP: $need is not installed (scripts/install-deps installs it)"; exit 77; }
done

work=$(mktemp -d)
chmod 0755 "$work"
redis_pid=
stop_redis() {
  if [ -n "$redis_pid" ]; then
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
    redis_pid=
  fi
}
trap 'stop_server; stop_redis; etcd_cluster_stop; rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*" >&2
  echo "--- server error log:" >&2
  tail -20 "$work/$server/logs/error.log" >&2 2>/dev/null || true
  exit 1
}
pass() { echo "ok: $*"; }

mkdir -p "$work/cgi" "$work/outside"
cp "$cgi_binary" "$work/cgi/counter.cgi"
chmod 0755 "$work/cgi" "$work/cgi/counter.cgi"
data=$work/data
make_data_dir "$data"
echo "must stay" >"$work/outside/secret"

lock_env=()
if [ "${TOKENLOCK_E2E_REDIS:-0}" = 1 ]; then
  if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    echo "SKIP: redis-server or redis-cli is not installed (scripts/install-deps installs them)"
    exit 77
  fi
  redis_port=$(pick_port)
  mkdir "$work/redis"
  : >"$work/redis/log"
  redis-server --port "$redis_port" --bind 127.0.0.1 --requirepass e2e-secret --save "" \
    --appendonly no --dir "$work/redis" --logfile "$work/redis/log" --daemonize no &
  redis_pid=$!
  # Ready when its log says so (tail follows the file: no polling).
  # (tail ends by SIGPIPE once grep has its line: not a failure.)
  { timeout 20 tail -n +1 -F "$work/redis/log" 2>/dev/null || true; } |
    grep -q -m1 "Ready to accept connections" ||
    fail "redis-server did not start (see $work/redis/log)"
  lock_env=(TOKENLOCK_COUNTER_LOCK="redis://:e2e-secret@127.0.0.1:$redis_port")
  echo "redis-server on 127.0.0.1:$redis_port (pid $redis_pid)"
fi
rcli() { redis-cli -p "$redis_port" -a e2e-secret --no-auth-warning "$@"; }
if [ "${TOKENLOCK_E2E_ETCD:-0}" = 1 ]; then
  etcd_cluster_require "SKIP: counter_e2e.sh"
  etcd_cluster_start counter_e2e.sh
  lock_env=(TOKENLOCK_COUNTER_LOCK="$etcd_cluster_url")
  echo "etcd cluster at $etcd_cluster_url (pids ${etcd_cluster_pids[*]})"
fi

port=$(pick_port)
"start_$server" "$work/$server" "$port" "$work/cgi" TOKENLOCK_COUNTER_DIR="$data" \
  TOKENLOCK_COUNTER_SYNC=none TOKENLOCK_COUNTER_WAIT_MS="${TOKENLOCK_E2E_WAIT_MS:-2000}" \
  "${lock_env[@]}" || fail "$server did not start"
url="http://127.0.0.1:$port/cgi-bin/counter.cgi"
echo "$server on 127.0.0.1:$port (pid $SERVER_PID)"

count_of() { cat "$data/$1.count" 2>/dev/null || echo 0; }

# ab: sets COMPLETE, NON2XX and LONGEST (the slowest request, ms: how
# close the load came to the CGI's wait budget). Its "Failed requests" also
# counts bodies whose length differs from the first (growing digits): not a
# failure.
load() {
  local out
  out=$(ab -q -r -n "$1" -c "$2" "$3" 2>&1) || fail "ab failed: $out"
  COMPLETE=$(awk '/^Complete requests/ {print $3}' <<<"$out")
  NON2XX=$(awk '/^Non-2xx responses/ {print $3}' <<<"$out")
  NON2XX=${NON2XX:-0}
  LONGEST=$(awk '$1 == "100%" {print $2}' <<<"$out")
}

n=${TOKENLOCK_E2E_REQUESTS:-2000}
load "$n" 16 "$url?id=one"
[ "$COMPLETE" = "$n" ] && [ "$NON2XX" = 0 ] || fail "16 clients: $COMPLETE complete, $NON2XX non-2xx"
[ "$(count_of one)" = "$n" ] || fail "16 clients: counter $(count_of one), expected $n"
pass "$n requests, 16 clients, one id: counter = $n (slowest request ${LONGEST:-?} ms)"

load "$n" 64 "$url?id=one"
[ "$COMPLETE" = "$n" ] && [ "$NON2XX" = 0 ] || fail "64 clients: $COMPLETE complete, $NON2XX non-2xx"
[ "$(count_of one)" = $((2 * n)) ] || fail "64 clients: counter $(count_of one), expected $((2 * n))"
pass "$n more requests, 64 clients, one id: counter = $((2 * n)) (slowest request ${LONGEST:-?} ms)"

q=$((n / 4))
pids=()
for i in 0 1 2 3; do
  ab -q -r -n "$q" -c 16 "$url?id=many$i" >"$work/ab.$i" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "ab failed"; done
for i in 0 1 2 3; do
  grep -q '^Non-2xx' "$work/ab.$i" && fail "several ids: non-2xx responses for many$i"
  [ "$(count_of "many$i")" = "$q" ] || fail "several ids: many$i = $(count_of "many$i"), expected $q"
done
pass "4 ids x $q requests, 64 clients in all: every counter = $q"

if [ -n "$redis_pid" ]; then
  # The locks really were in Redis: fence tokens there, fence directories
  # beside the counters, and no lock directory.
  [ -n "$(rcli GET tokenlock:counter:one:fence)" ] || fail "no fence in Redis for counter one"
  [ -d "$data/one.count.fence" ] || fail "no fence directory beside counter one"
  [ ! -e "$data/one.count.lock" ] || fail "a lock directory was used instead of Redis"
  [ "$(rcli EXISTS tokenlock:counter:one)" = 0 ] || fail "a grant was left in Redis"
  pass "the counters' locks were in Redis, their commits fenced"
  # Redis gone: every hit is refused with 503, and nothing is counted.
  stop_redis
  before=$(count_of one)
  got=$(curl -s -o /dev/null -w '%{http_code}' "$url?id=one")
  [ "$got" = 503 ] || fail "with Redis down: status $got, expected 503"
  [ "$(count_of one)" = "$before" ] || fail "with Redis down the counter changed"
  grep -q "127.0.0.1:$redis_port" "$work/$server/logs/error.log" ||
    fail "with Redis down the server's log does not name it"
  ! grep -q e2e-secret "$work/$server/logs/error.log" || fail "the password reached the server's log"
  pass "Redis down: 503, counter unchanged, the server named in the log without its password"
fi

if [ "${TOKENLOCK_E2E_ETCD:-0}" = 1 ]; then
  # The locks really were in etcd: revisions moved on by the grants, fence
  # directories beside the counters, no lock directory, and no grant left.
  [ -d "$data/one.count.fence" ] || fail "no fence directory beside counter one"
  [ ! -e "$data/one.count.lock" ] || fail "a lock directory was used instead of etcd"
  left=$(ETCDCTL_API=3 etcdctl --endpoints="$etcd_cluster_endpoints" get --prefix --keys-only \
    tokenlock/counter: | grep -c . || true)
  [ "$left" = 0 ] || fail "$left grants were left in etcd"
  pass "the counters' locks were in etcd, their commits fenced"
  # etcd gone: every hit is refused with 503, and nothing is counted.
  etcd_cluster_stop
  before=$(count_of one)
  got=$(curl -s -o /dev/null -w '%{http_code}' "$url?id=one")
  [ "$got" = 503 ] || fail "with etcd down: status $got, expected 503"
  [ "$(count_of one)" = "$before" ] || fail "with etcd down the counter changed"
  pass "etcd down: 503, counter unchanged"
fi

if [ "$mode" = load ]; then exit 0; fi

# --- CGI processes killed with SIGKILL under load --------------------------
# Only this server's CGI processes, told by ancestry: another test's
# counter.cgi (another server, run at the same time) is not ours to kill.
kill_our_cgis() {  # prints how many it killed
  local p killed=0
  for p in $(server_processes_named counter.cgi); do
    kill -9 "$p" 2>/dev/null && killed=$((killed + 1))
  done
  echo "$killed"
}
ab -q -r -n $((3 * n / 2)) -c 32 "$url?id=killed" >"$work/ab.kill" 2>&1 &
ab_pid=$!
kills=0
while kill -0 "$ab_pid" 2>/dev/null; do
  k=$(kill_our_cgis)
  kills=$((kills + ${k:-0}))
  sleep 0.02  # pacing the kills across the run
done
wait "$ab_pid" || fail "ab failed under kills"
COMPLETE=$(awk '/^Complete requests/ {print $3}' "$work/ab.kill")
NON2XX=$(awk '/^Non-2xx responses/ {print $3}' "$work/ab.kill")
NON2XX=${NON2XX:-0}
ok=$((COMPLETE - NON2XX))
c=$(count_of killed)
[ "$kills" -gt 0 ] || fail "no counter.cgi process was killed"
[ "$c" -ge "$ok" ] && [ "$c" -le $((ok + kills)) ] ||
  fail "killed: counter $c, successful responses $ok, killed $kills"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$url?id=after")" = 200 ] || fail "server stopped answering"
pass "$((3 * n / 2)) requests with $kills CGI processes killed: counter $c within [$ok, $((ok + kills))]"

# --- bad inputs -----------------------------------------------------------
before_one=$(count_of one)
expect_status() {  # STATUS CURL_ARGS...
  local want=$1 got body
  shift
  got=$(curl -s -o "$work/body" -w "%{http_code}" "$@") || fail "$*: no response from the server (curl exit $?)"
  [ "$got" = "$want" ] || fail "$*: status $got, expected $want ($(cat "$work/body"))"
  body=$(cat "$work/body")
  if grep -qF "$work" <<<"$body"; then fail "$*: the response shows a path: $body"; fi
}
expect_status 400 "$url?id=../../etc/passwd"
expect_status 400 "$url?id=%2e%2e%2f%2e%2e%2fetc%2fpasswd"
expect_status 400 "$url?id=$(printf 'a%.0s' $(seq 65))"
expect_status 400 "$url?id=%zz"
expect_status 400 "$url?id=one&format=xml"
expect_status 400 "$url?id=one&id=two"
expect_status 400 "$url?id=one&color=red"
expect_status 405 -X POST -d 'id=one' "$url?id=one"
printf 'garbage\n' >"$data/bad.count"
chown "$(cgi_user)" "$data/bad.count"
expect_status 500 "$url?id=bad"
[ "$(cat "$data/bad.count")" = garbage ] || fail "the corrupt counter was changed"
chmod 0555 "$data"
expect_status 500 "$url?id=fresh"
chmod 0755 "$data"
[ ! -e "$data/fresh.count" ] || fail "a counter was written to an unwritable directory"
[ "$(count_of one)" = "$before_one" ] || fail "a bad request changed a counter"
[ "$(cat "$work/outside/secret")" = "must stay" ] || fail "a file outside the data directory changed"
[ "$(ls "$data" | grep -cv -E '^(one|many[0-3]|killed|after|bad)\.count(\.lock(\.wait)?)?$')" = 0 ] ||
  fail "unexpected files in the data directory: $(ls "$data")"
pass "bad ids, encodings, formats, parameters, POST, a corrupt counter, an unwritable directory"

# --- a lock that stays busy past the wait budget --------------------------
curl -s -o /dev/null "$url?id=busy"  # the CGI user creates the lock directory
# As the CGI's user, who made the lock directory: root refuses another
# user's lock directory (docs/security.md), and its 77 would read as a skip.
as_cgi_user=()
[ "$(id -u)" -eq 0 ] && as_cgi_user=(setpriv --reuid="$(cgi_user)" --regid="$(cgi_user)" --clear-groups)
token=$("${as_cgi_user[@]}" "$tool" acquire --pid $$ "$data/busy.count.lock") ||
  fail "could not hold $data/busy.count.lock"
headers=$(curl -s -D - -o /dev/null "$url?id=busy")
"${as_cgi_user[@]}" "$tool" release "$data/busy.count.lock" "$token" ||
  fail "releasing $data/busy.count.lock"
grep -q '^HTTP/1.1 503' <<<"$headers" || fail "busy lock: $headers"
grep -qi '^Retry-After: 1' <<<"$headers" || fail "503 without Retry-After: $headers"
[ "$(count_of busy)" = 1 ] || fail "the busy request counted"
pass "a busy lock gives 503 with Retry-After and counts nothing"

# --- HEAD, peek, headers, SVG ---------------------------------------------
for _ in 1 2 3; do curl -s -o /dev/null "$url?id=svg"; done
headers=$(curl -s -I "$url?id=svg")
grep -q '^HTTP/1.1 200' <<<"$headers" || fail "HEAD: $headers"
grep -qi '^Cache-Control: no-store' <<<"$headers" || fail "no Cache-Control: $headers"
[ "$(curl -s "$url?id=svg&peek=1")" = 3 ] || fail "HEAD or peek incremented"
curl -s "$url?id=svg&format=svg&peek=1" >"$work/counter.svg"
xmllint --noout "$work/counter.svg" || fail "the SVG is not well-formed XML"
[ "$(xmllint --xpath 'string(//*[local-name()="text"])' "$work/counter.svg")" = 000003 ] ||
  fail "the SVG does not show the count: $(cat "$work/counter.svg")"
json=$(curl -s "$url?id=svg&format=json&peek=1")
[ "$json" = '{"id":"svg","count":3}' ] || fail "json: $json"
pass "HEAD and peek do not count; Cache-Control: no-store; SVG and JSON show the count"
