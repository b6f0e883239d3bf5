<?php
/*
 * The reference counter for bench/lang/fpm_bench.sh: what a careful PHP
 * author writes with flock() for a page run by php-fpm. GET ?id=NAME
 * increments FLOCK_COUNTER_DIR/NAME.count under flock on NAME.count.flock,
 * writing a temporary file renamed over the counter, and answers the new
 * count. FLOCK_COUNTER_SYNC (none, file or file_and_dir) adds fsync of the
 * file, and of the directory, as counter.php's TOKENLOCK_COUNTER_SYNC does,
 * so that both pay for the same durability.
 */

declare(strict_types=1);

ini_set('display_errors', '0');

function flock_counter_fail(int $status, string $why): never
{
    error_log("flock_counter.php: $why");
    http_response_code($status);
    header('Content-Type: text/plain; charset=utf-8');
    echo "error\n";
    exit;
}

$dir = (string) getenv('FLOCK_COUNTER_DIR');
$sync = (string) getenv('FLOCK_COUNTER_SYNC') ?: 'none';
$id = $_GET['id'] ?? 'default';
if ($dir === '') {
    flock_counter_fail(500, 'FLOCK_COUNTER_DIR is not set');
}
if (!is_string($id) || preg_match('/\A[A-Za-z0-9_-]{1,64}\z/', $id) !== 1) {
    flock_counter_fail(400, 'bad id');
}
$path = "$dir/$id.count";
$lock = fopen("$path.flock", 'c');
if ($lock === false || !flock($lock, LOCK_EX)) {
    flock_counter_fail(500, "cannot lock $path.flock");
}
$text = @file_get_contents($path);
$value = ($text === false ? 0 : (int) $text) + 1;
$tmp = "$path.tmp." . getmypid();
$out = fopen($tmp, 'wb');
if ($out === false || fwrite($out, "$value\n") === false || ($sync !== 'none' && !fsync($out))) {
    flock_counter_fail(500, "cannot write $tmp");
}
fclose($out);
if (!rename($tmp, $path)) {
    flock_counter_fail(500, "cannot rename $tmp to $path");
}
if ($sync === 'file_and_dir') {
    $d = fopen($dir, 'r');
    if ($d === false || !fsync($d)) {
        flock_counter_fail(500, "cannot flush $dir");
    }
    fclose($d);
}
flock($lock, LOCK_UN);
fclose($lock);
header('Content-Type: text/plain; charset=utf-8');
header('Cache-Control: no-store');
echo "$value\n";
