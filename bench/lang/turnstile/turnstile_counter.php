<?php
/*
 * bench/lang/flock_counter.php with the prototype's rename lock in place of
 * flock, for fpm_turnstile.sh: GET ?id=NAME&scheme=S increments
 * TURNSTILE_COUNTER_DIR/NAME.count under the lock NAME.count.lock, waiting
 * by scheme S of turnstile_lock.php with a 10 s budget (the modules'
 * default), and answers the new count (503 when the budget ran out).
 * Nothing is kept between requests, as in the module under php-fpm.
 */

declare(strict_types=1);

namespace TurnstileBench;

require __DIR__ . '/turnstile_lock.php';

ini_set('display_errors', '0');

function fail(int $status, string $why): never
{
    error_log("turnstile_counter.php: $why");
    http_response_code($status);
    header('Content-Type: text/plain; charset=utf-8');
    echo "error\n";
    exit;
}

/** Makes the lock directory as docs/protocol.md does: whole, by one rename, or not at all. */
function create(string $dir): void
{
    $tmp = "$dir.init." . getmypid();
    if (@mkdir($tmp, 0755) && @mkdir("$tmp/lockfile", 0755) && !@rename($tmp, $dir)) {
        @rmdir("$tmp/lockfile");
        @rmdir($tmp);
    }
}

$dir = (string) getenv('TURNSTILE_COUNTER_DIR');
$id = $_GET['id'] ?? 'default';
$scheme = $_GET['scheme'] ?? 'deputy';
if ($dir === '' || !is_string($id) || preg_match('/\A[A-Za-z0-9_-]{1,64}\z/', $id) !== 1 || !is_string($scheme)) {
    fail(400, 'bad request');
}
$path = "$dir/$id.count";
if (!is_dir("$path.lock")) {
    create("$path.lock");
}
$lock = new RenameLock("$path.lock", Scheme::named($scheme));
if (!$lock->acquire(10.0)) {
    fail(503, "$path.lock: busy for 10 s");
}
$text = @file_get_contents($path);
$value = ($text === false ? 0 : (int) $text) + 1;
$tmp = "$path.tmp." . getmypid();
if (@file_put_contents($tmp, "$value\n") === false || !rename($tmp, $path)) {
    $lock->release();
    fail(500, "cannot write $tmp or rename it to $path");
}
$lock->release();
header('Content-Type: text/plain; charset=utf-8');
header('Cache-Control: no-store');
echo "$value\n";
