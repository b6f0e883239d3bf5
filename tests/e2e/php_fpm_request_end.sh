#!/usr/bin/env bash
# A PHP request under php-fpm that dies holding a lock, by exit(), an
# uncaught exception, memory_limit or max_execution_time, releases it as
# it ends: the next request, served by the same worker (one child, which
# lives on, so no dead-owner check could free the lock), gets it at once.
# Prints, for each way of dying, how long the next request waited for the
# lock; fails if it waited 1 s or more, if another worker served it, or if
# the lock is not free after it.
#   php_fpm_request_end.sh SOURCE_DIR
# Exits 77 (skipped) when php-fpm, Apache, its mod_proxy_fcgi or curl is
# missing.
set -euo pipefail
src=$1
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/e2e/webserver.sh
. "$here/webserver.sh"
# shellcheck source=tests/e2e/phpfpm.sh
. "$here/phpfpm.sh"
require_fpm_rig

work=$(mktemp -d)
chmod 0755 "$work"
trap 'stop_server; stop_php_fpm; rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*" >&2
  echo "--- php-fpm log:" >&2
  tail -20 "$FPM_LOG" >&2 2>/dev/null || true
  exit 1
}

www=$work/www
mkdir -m 0755 "$www" "$work/no-cgi"
cp "$src/bindings/php/Tokenlock.php" "$www/"
# die.php takes the lock, notes who holds it in LOCK_DIR.held (a request
# that dies of a fatal error may send nothing), and ends as END says.
cat >"$www/die.php" <<'PHP'
<?php
declare(strict_types=1);
require __DIR__ . '/Tokenlock.php';
$lock = Tokenlock\Lock::acquire($_SERVER['LOCK_DIR'], ['wait' => 5]);
file_put_contents($_SERVER['LOCK_DIR'] . '.held', getmypid() . ' ' . $lock->token() . "\n");
switch ($_GET['end'] ?? '') {
    case 'exit':
        exit(3);
    case 'exception':
        throw new RuntimeException('the request ends here');
    case 'memory_limit':
        ini_set('memory_limit', '16M');
        $s = str_repeat('x', 64 << 20);
        break;
    case 'max_execution_time':
        set_time_limit(1);
        for ($n = 0; ; ++$n) {
        }
}
echo "not ended\n";
PHP
# take.php waits up to 5 s for the lock: "PID MS", or "PID refused".
cat >"$www/take.php" <<'PHP'
<?php
declare(strict_types=1);
require __DIR__ . '/Tokenlock.php';
$start = hrtime(true);
try {
    $lock = Tokenlock\Lock::acquire($_SERVER['LOCK_DIR'], ['wait' => 5]);
} catch (Tokenlock\NotAcquiredException $e) {
    echo getmypid(), " refused\n";
    exit;
}
$waited = (hrtime(true) - $start) / 1e6;
$lock->release();
printf("%d %.1f\n", getmypid(), $waited);
PHP
chmod 0644 "$www"/*.php
data=$work/data
make_data_dir "$data"
lock=$data/a.lock

start_php_fpm "$work" 1 || fail "php-fpm did not start"
fpm_apache_config "$work" /fpm "$www"
port=$(pick_port)
start_apache "$work/apache" "$port" "$work/no-cgi" "LOCK_DIR=$lock" || fail "apache did not start"
base=http://127.0.0.1:$port/fpm

for end in exit exception memory_limit max_execution_time; do
  rm -f "$lock.held"
  answer=$(curl -s -m 60 "$base/die.php?end=$end") || fail "$end: die.php did not answer"
  [[ $answer != *"not ended"* ]] || fail "$end: the request did not end as asked"
  read -r holder token <"$lock.held" || fail "$end: die.php did not take the lock: $answer"
  [[ $token == lockfile.* ]] || fail "$end: die.php noted $holder $token"
  took=$(curl -s -m 60 "$base/take.php") || fail "$end: take.php did not answer"
  read -r taker waited <<<"$took"
  [ "$taker" = "$holder" ] || fail "$end: another worker ($taker) served the next request, not the holder ($holder)"
  [ "$waited" != refused ] || fail "$end: the next request was refused the lock for 5 s: it is still held by $token"
  awk -v w="$waited" 'BEGIN { exit !(w < 1000) }' || fail "$end: the next request waited $waited ms for the lock"
  [ -d "$lock/lockfile" ] || fail "$end: the lock is not free after the next request: $(ls "$lock")"
  echo "ok: $end: the next request (same worker, pid $taker) got the lock after $waited ms"
done
for said in 'Allowed memory size' 'Maximum execution time'; do
  grep -q "$said" "$FPM_LOG" || fail "php-fpm's log does not show the error \"$said\": the request did not die of it"
done
echo "php_fpm_request_end: every lock was released as its request ended"
