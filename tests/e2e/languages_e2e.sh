#!/usr/bin/env bash
# The four hit counters — counter.cgi (C++), counter.pl (Perl), counter.php
# (php-cgi) and counter.py (Python) — served by one real Apache on
# 127.0.0.1, deployed as on a shared host: each script with its module and
# the static tokenlock command beside it in the CGI directory. A fifth,
# counter.php again, runs in php-fpm behind the same Apache (mod_proxy_fcgi
# on a unix socket, /fpm/counter.php), the way most hosts run PHP.
#   languages_e2e.sh SOURCE_DIR COUNTER_CGI TOKENLOCK_STATIC [LIBTOKENLOCK_C]
# - all five increment one counter file at once under load, php-fpm's with
#   64 clients: every response 200 and the counter exact;
# - the same requests (bad ids, bad encodings, duplicate and unknown
#   parameters, other methods, peek, HEAD, formats, a corrupt counter, an
#   unwritable data directory) get the same status and body from each;
# - with a data directory that cannot be flushed (write-only), each counts
#   its hits and answers 200 with the count, as counter.cgi does;
# - a counter held past the wait budget: 503 with Retry-After from each.
# Answers are compared by status, Content-Type, Allow, Retry-After and body.
# Skipped (77) when perl, php-cgi, python3, php-fpm or Apache's
# mod_proxy_fcgi is missing.
set -euo pipefail
src=$1 cgi_binary=$2 tool=$3 libc_api=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/webserver.sh"
. "$here/phpfpm.sh"
require_fpm_rig perl php-cgi python3

work=$(mktemp -d)
chmod 0755 "$work"
trap 'stop_server; stop_php_fpm; rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*" >&2
  echo "--- server error log:" >&2
  tail -30 "$work/logs/error.log" >&2 2>/dev/null || true
  echo "--- php-fpm log:" >&2
  tail -30 "$work/logs/php-fpm.log" >&2 2>/dev/null || true
  exit 1
}
pass() { echo "ok: $*"; }

cgi=$work/cgi
mkdir -p "$cgi"
cp "$cgi_binary" "$cgi/counter.cgi"
cp "$tool" "$cgi/tokenlock"
cp -R "$src/cgi-examples/perl/counter.pl" "$src/bindings/perl/lib/Tokenlock.pm" "$src/bindings/perl/lib/Tokenlock" "$cgi/"
cp "$src/cgi-examples/php/counter.php" "$src/bindings/php/Tokenlock.php" "$cgi/"
cp "$src/cgi-examples/python/counter.py" "$src/bindings/python/tokenlock.py" "$cgi/"
[ -n "$libc_api" ] && cp "$libc_api" "$cgi/libtokenlock_c.so"
chmod 0755 "$cgi" "$cgi"/counter.* "$cgi/tokenlock"
# php-fpm's copy, in a directory of its own as on a host: the module and
# the command beside the program (the command for a module that uses it).
www=$work/www
deploy_fpm_counter "$src" "$www" "$tool"
data=$work/data
make_data_dir "$data"

fpm_clients=64
start_php_fpm "$work" "$fpm_clients" || fail "php-fpm did not start"
fpm_apache_config "$work" /fpm "$www"
port=$(pick_port)
start_apache "$work" "$port" "$cgi" "TOKENLOCK_COUNTER_DIR=$data" \
  "TOKENLOCK_COUNTER_WAIT_MS=${TOKENLOCK_E2E_WAIT_MS:-30000}" "TOKENLOCK_COUNTER_SYNC=file" \
  REDIRECT_STATUS=200 || fail "apache did not start"
# fpm-counter.php is counter.php in php-fpm; the others are CGI programs.
counters=(counter.cgi counter.pl counter.php counter.py fpm-counter.php)
others=(counter.pl counter.php counter.py fpm-counter.php)
url_of() {
  case $1 in
    fpm-*) echo "http://127.0.0.1:$port/fpm/${1#fpm-}" ;;
    *) echo "http://127.0.0.1:$port/cgi-bin/$1" ;;
  esac
}
echo "apache on 127.0.0.1:$port (pid $SERVER_PID), php-fpm on $FPM_SOCKET (pid $FPM_PID)"
count_of_in() { cat "$1/$2.count" 2>/dev/null || echo 0; }
count_of() { count_of_in "$data" "$1"; }

# --- each works ---------------------------------------------------------------
for c in "${counters[@]}"; do
  got=$(curl -s -o "$work/body" -w '%{http_code}' "$(url_of "$c")?id=hello")
  [ "$got" = 200 ] && grep -qE '^[0-9]+$' "$work/body" || fail "$c: status $got, body $(cat "$work/body")"
done
[ "$(count_of hello)" = ${#counters[@]} ] || fail "${#counters[@]} hits counted $(count_of hello)"
pass "each of the ${#counters[@]} counts a hit: hello = ${#counters[@]}"

# --- all five on one counter under load, php-fpm's with 64 clients ------------
n=${TOKENLOCK_E2E_LANG_REQUESTS:-300}
fpm_n=${TOKENLOCK_E2E_FPM_REQUESTS:-640}
[ "$fpm_n" -ge "$fpm_clients" ] || fail "TOKENLOCK_E2E_FPM_REQUESTS ($fpm_n) must be at least $fpm_clients"
requests_of() { if [ "$1" = fpm-counter.php ]; then echo "$fpm_n"; else echo "$n"; fi; }
pids=()
for c in "${counters[@]}"; do
  clients=8
  [ "$c" = fpm-counter.php ] && clients=$fpm_clients
  ab -q -r -n "$(requests_of "$c")" -c "$clients" "$(url_of "$c")?id=shared" >"$work/ab.$c" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "ab failed"; done
for c in "${counters[@]}"; do
  grep -q '^Non-2xx' "$work/ab.$c" && fail "$c: non-2xx responses: $(grep -E '^(Non-2xx|Failed)' "$work/ab.$c")"
  complete=$(awk '/^Complete requests/ {print $3}' "$work/ab.$c")
  [ "$complete" = "$(requests_of "$c")" ] || fail "$c: $complete of $(requests_of "$c") requests completed"
done
total=$((4 * n + fpm_n))
[ "$(count_of shared)" = $total ] || fail "shared counter $(count_of shared), expected $total"
leftovers=$(find "$data" -name '.*.tmp.*' -o -name '*.init.*')
[ -z "$leftovers" ] || fail "left in the data directory: $leftovers"
rates=$(for c in "${counters[@]}"; do printf '%s %s/s, ' "$c" "$(awk '/^Requests per second/ {print $4}' "$work/ab.$c")"; done)
pass "4 x $n CGI requests (8 clients each) and $fpm_n through php-fpm ($fpm_clients clients) on one counter: counter = $total, none lost (${rates%, })"

# --- the same answers to the same requests -------------------------------------
printf 'garbage\n' >"$data/bad.count"
chown "$(cgi_user)" "$data/bad.count"
answer() {  # COUNTER CURL_ARGS...: status, content type, Allow, Retry-After and body
  local c=$1
  shift
  curl -s -D "$work/headers" -o "$work/body" -w '%{http_code}' "$@" | tr -d '\n'
  printf ' %s ' "$(grep -i '^content-type:' "$work/headers" | tr -d '\r' | cut -d' ' -f2-)"
  grep -i -E '^(allow|retry-after):' "$work/headers" | tr -d '\r' | tr '[:upper:]' '[:lower:]' | sort | tr '\n' ' '
  cat "$work/body"
}
requests=(
  "?id=../../etc/passwd" "?id=%2e%2e%2f%2e%2e%2fetc%2fpasswd" "?id=$(printf 'a%.0s' $(seq 65))"
  "?id=%zz" "?id=one&format=xml" "?id=one&id=two" "?id=one&color=red" "?id=bad"
  "?id=one&peek=1" "?id=one&peek=1&format=json" "?id=one&peek=1&format=svg" "?id=&peek=1"
  "?peek=1" "?id=one&peek=2" "?format=text&peek=1&id=one"
)
for q in "${requests[@]}"; do
  want=$(answer counter.cgi "$(url_of counter.cgi)$q")
  for c in "${others[@]}"; do
    got=$(answer "$c" "$(url_of "$c")$q")
    [ "$got" = "$want" ] || fail "$c$q answered
  $got
counter.cgi answered
  $want"
  done
done
for method in POST PUT DELETE; do
  want=$(answer counter.cgi -X "$method" -d 'id=one' "$(url_of counter.cgi)?id=one")
  for c in "${others[@]}"; do
    got=$(answer "$c" -X "$method" -d 'id=one' "$(url_of "$c")?id=one")
    [ "$got" = "$want" ] || fail "$method $c: $got; counter.cgi: $want"
  done
done
before=$(count_of hello)
for c in "${counters[@]}"; do
  [ "$(curl -s -I -o /dev/null -w '%{http_code}' "$(url_of "$c")?id=hello")" = 200 ] || fail "HEAD $c"
done
[ "$(count_of hello)" = "$before" ] || fail "a HEAD request counted"
[ "$(cat "$data/bad.count")" = garbage ] || fail "the corrupt counter was changed"
chmod 0555 "$data"
want=$(answer counter.cgi "$(url_of counter.cgi)?id=fresh")
for c in "${others[@]}"; do
  got=$(answer "$c" "$(url_of "$c")?id=fresh")
  [ "$got" = "$want" ] || fail "unwritable data directory: $c $got; counter.cgi $want"
done
chmod 0755 "$data"
[ ! -e "$data/fresh.count" ] || fail "a counter was written to an unwritable directory"
grep -qF "$data" "$work/body" && fail "a response shows a server path"
pass "${#requests[@]} queries, 3 other methods, HEAD, a corrupt counter and an unwritable directory: the same status, type and body from all ${#counters[@]}"

# --- a data directory that cannot be flushed -------------------------------------
# Write-only for the CGI user (mode 0333, as upload drop directories are):
# with the default durability every commit is made, then fsync(2) of the
# directory cannot even open it. Each hit is counted, so each counter must
# answer 200 with its count, as counter.cgi does, and log the fix. A second
# server, since SetEnv is per server (php-fpm's scripts get it from Apache
# with each request, so php-fpm keeps running).
stop_server
drop=$work/drop
make_data_dir "$drop"
chmod 0333 "$drop"
port=$(pick_port)
start_apache "$work" "$port" "$cgi" "TOKENLOCK_COUNTER_DIR=$drop" "TOKENLOCK_COUNTER_SYNC=file_and_dir" \
  TOKENLOCK_COUNTER_WAIT_MS=300 REDIRECT_STATUS=200 || fail "apache did not start with the unflushable directory"
fpm_logged_before=$(grep -c -F "give this user read permission on $drop" "$FPM_LOG" || true)
: >"$work/logs/error.log"
hit=0
for round in 1 2; do
  for c in "${counters[@]}"; do
    hit=$((hit + 1))
    got=$(answer "$c" "$(url_of "$c")?id=drop&format=json")
    want="200 application/json {\"id\":\"drop\",\"count\":$hit}"
    [ "$got" = "$want" ] || fail "unflushable directory, round $round: $c answered
  $got
instead of
  $want"
  done
done
chmod 0755 "$drop"
[ "$(count_of_in "$drop" drop)" = "$hit" ] || fail "unflushable directory: counter $(count_of_in "$drop" drop), expected $hit"
# The CGI programs log to Apache's error log, php-fpm's workers to its log.
cgi_hits=$((hit - 2))
logged=$(grep -c -F "give this user read permission on $drop" "$work/logs/error.log" || true)
[ "$logged" -ge "$cgi_hits" ] || fail "unflushable directory: the fix was logged $logged times for $cgi_hits CGI hits"
wait_for_fpm_log "give this user read permission on $drop" $((fpm_logged_before + 2)) ||
  fail "unflushable directory: php-fpm's counter did not log the fix for each of its 2 hits"
leftovers=$(find "$drop" -name '.*.tmp.*' -o -name '*.init.*')
[ -z "$leftovers" ] || fail "left in the unflushable directory: $leftovers"

pass "a data directory that cannot be flushed: $hit hits through the ${#counters[@]} counters, each answered 200 with its count, all counted, the fix logged"

# --- a counter busy past the wait budget (300 ms on this server) -----------------
# Held by the CGI user's tokenlock for this shell: each counter waits its
# budget, then answers 503 with Retry-After, as counter.cgi does.
as_cgi_user=()
[ "$(id -u)" -eq 0 ] && as_cgi_user=(setpriv --reuid="$(cgi_user)" --regid="$(cgi_user)" --clear-groups)
busy_lock=$drop/busy.count.lock
token=$("${as_cgi_user[@]}" "$tool" acquire --pid $$ "$busy_lock") || fail "could not hold $busy_lock"
want=$(answer counter.cgi "$(url_of counter.cgi)?id=busy")
[[ $want == "503 "*"retry-after: 1 "* ]] || fail "counter.cgi behind a holder answered $want"
for c in "${others[@]}"; do
  got=$(answer "$c" "$(url_of "$c")?id=busy")
  [ "$got" = "$want" ] || fail "behind a holder: $c $got; counter.cgi $want"
done
"${as_cgi_user[@]}" "$tool" release "$busy_lock" "$token" || fail "releasing $busy_lock"
[ ! -e "$drop/busy.count" ] || fail "a busy counter was written"
pass "a counter held past the 300 ms budget: 503 with Retry-After from all ${#counters[@]}, nothing written"
