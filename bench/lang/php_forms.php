<?php
/*
 * The per-call cost of the PHP module loaded different ways, side by side:
 * each MODULE is a file that loads it (bindings/php/Tokenlock.php, the one
 * file; bindings/php/autoload.php, the sources; another checkout's), each
 * round runs one process per MODULE in a rotating order, and each process
 * times 2000 Tokenlock\withLock() around nothing, best of 5, in CPU time
 * (getrusage: user + system), which other load on the machine disturbs far
 * less than the wall clock. Prints per MODULE the median and range of
 * microseconds per call, and the median and range over rounds of its ratio
 * to the first MODULE's in the same round. The last lines are for
 * machines, one per MODULE after the first:
 *   php_forms_ratio_K=X   the median ratio of the Kth MODULE (from 1) to the first
 *
 *   php bench/lang/php_forms.php [-r ROUNDS] MODULE...
 */

declare(strict_types=1);

function cpuNs(): int
{
    $u = getrusage();
    return ($u['ru_utime.tv_sec'] + $u['ru_stime.tv_sec']) * 1000000000 + ($u['ru_utime.tv_usec'] + $u['ru_stime.tv_usec']) * 1000;
}

/** One process: the best of 5 runs of 2000 calls, in CPU microseconds per call. */
function timeOne(string $module): float
{
    require $module;
    $dir = sys_get_temp_dir() . '/php-forms-' . getmypid() . '-' . bin2hex(random_bytes(4));
    mkdir($dir, 0700);
    $lock = "$dir/a.lock";
    Tokenlock\withLock($lock, fn () => null);
    $best = INF;
    for ($r = 0; $r < 5; ++$r) {
        $t = cpuNs();
        for ($i = 0; $i < 2000; ++$i) {
            Tokenlock\withLock($lock, fn () => null);
        }
        $best = min($best, (cpuNs() - $t) / 2000 / 1000);
    }
    rmdir("$lock/lockfile");
    rmdir($lock);
    rmdir($dir);
    return $best;
}

function median(array $v): float
{
    sort($v);
    $n = count($v);
    return $n % 2 ? $v[intdiv($n, 2)] : ($v[$n / 2 - 1] + $v[$n / 2]) / 2;
}

if (($argv[1] ?? '') === '--one') {
    printf("%.3f\n", timeOne($argv[2]));
    exit(0);
}
$rounds = 12;
$modules = [];
for ($i = 1; $i < $argc; ++$i) {
    if ($argv[$i] === '-r' && isset($argv[$i + 1])) {
        $rounds = max(1, (int) $argv[++$i]);
    } elseif (is_file($argv[$i])) {
        $modules[] = realpath($argv[$i]);
    } else {
        fwrite(STDERR, "php_forms.php: {$argv[$i]}: no such file\nusage: php_forms.php [-r ROUNDS] MODULE...\n");
        exit(64);
    }
}
if ($modules === []) {
    fwrite(STDERR, "usage: php_forms.php [-r ROUNDS] MODULE...\n");
    exit(64);
}
$us = array_fill(0, count($modules), []);
for ($r = 0; $r < $rounds; ++$r) {
    foreach (array_keys($modules) as $k) {
        $m = ($k + $r) % count($modules);
        $out = shell_exec(escapeshellarg(PHP_BINARY) . ' ' . escapeshellarg(__FILE__) . ' --one ' . escapeshellarg($modules[$m]));
        if (!is_string($out) || !is_numeric(trim($out))) {
            fwrite(STDERR, "php_forms.php: {$modules[$m]}: the timing process failed: " . var_export($out, true) . "\n");
            exit(1);
        }
        $us[$m][$r] = (float) trim($out);
    }
}
printf("%d rounds; CPU microseconds per withLock() around nothing, best of 5 x 2000 calls per process\n", $rounds);
foreach ($modules as $m => $module) {
    $ratios = array_map(fn (int $r): float => $us[$m][$r] / $us[0][$r], range(0, $rounds - 1));
    printf("%-60s %6.2f us (%.2f-%.2f)  / first: %.3f (%.3f-%.3f)\n", $module, median($us[$m]), min($us[$m]), max($us[$m]),
        median($ratios), min($ratios), max($ratios));
}
foreach (array_slice(array_keys($modules), 1) as $m) {
    printf("php_forms_ratio_%d=%.3f\n", $m, median(array_map(fn (int $r): float => $us[$m][$r] / $us[0][$r], range(0, $rounds - 1))));
}
