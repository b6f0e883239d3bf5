<?php
/*
 * The cost per call of the PHP module against what a PHP programmer writes
 * by hand, side by side in one run:
 *
 *   lock: Tokenlock\withLock() around an empty callable (two renames, in
 *         PHP: no process)
 *         vs two bare rename() calls in a directory (lockfile to a token
 *         name and back: the protocol's floor, what the widely copied
 *         rename lock costs)
 *         and vs fopen() + flock(LOCK_EX) + flock(LOCK_UN) of a lock file;
 *   store: Tokenlock\Symfony\TokenlockStore's save() and delete() of a
 *         new Key (what Symfony's Lock calls of a store; its own Lock
 *         object adds the same to every store) vs the bare module's Lock::acquire() and
 *         release() on a lock directory, when symfony/lock can be loaded
 *         (the copy the tests keep, bindings/php/tests/symfony/7.x, with
 *         Debian's php-psr-log);
 *   incr: Tokenlock\increment() (in PHP: lock, read, a temporary file in
 *         the token, rename through it, release)
 *         vs a flock'ed counter: flock, read, write a temporary file, rename,
 *         with the same durability (--sync: fsync of the file, and of the
 *         directory for file_and_dir, as bench/cgi/flock_counter.c does).
 *
 *   php bench/lang/php_bench.php [-q] [-n CALLS] [-r ROUNDS] [--sync none|file|file_and_dir] [-d DIR]
 *                                [-m MODULE] [--cpu]
 *
 * MODULE is the file that loads the module: bindings/php/Tokenlock.php,
 * the module in one file (the default), or bindings/php/autoload.php, its
 * sources one class per file.
 *
 * Each round times CALLS calls of each variant, in an order that rotates
 * between rounds; the ratios are medians over rounds of tokenlock / other.
 * Only the module's public API is used, so the figures are those of
 * whatever it does beneath: the protocol in PHP, or a `tokenlock` process
 * per call (then the line "tokenlock --version" gives the cost of starting
 * the command alone, the floor of such a call). The last lines are for
 * machines:
 *   php_lock_rename_ratio=X  withLock() / two renames
 *   php_lock_ratio=Y         withLock() / flock
 *   php_incr_ratio=Z         increment() / flock'ed counter
 *   php_store_ratio=S        TokenlockStore save+delete / bare Lock
 * --cpu: time each variant in CPU time (user + system, getrusage) rather
 * than by the wall clock: on a machine others are loading, their work
 * stretches the wall clock of every call, most of all a disk's, and the
 * CPU time this process spends much less (what the kernel's own threads
 * do for it, such as the journal's commits, is then left out).
 * -q: a quick run to check that it works (few calls, two rounds); take
 * figures from a full run on a quiet machine.
 *
 * The command, for a module that uses one, is TOKENLOCK_COMMAND, else the
 * build tree's when it exists, else what the module finds itself.
 */

declare(strict_types=1);

$repo = dirname(__DIR__, 2);

function usage(string $why): never
{
    fwrite(STDERR, "php_bench.php: $why\n"
        . "usage: php_bench.php [-q] [-n CALLS] [-r ROUNDS] [--sync none|file|file_and_dir] [-d DIR] [-m MODULE] [--cpu]\n");
    exit(64);
}

function removeTree(string $path): void
{
    if (is_dir($path) && !is_link($path)) {
        foreach (array_diff(scandir($path), ['.', '..']) as $name) {
            removeTree("$path/$name");
        }
        rmdir($path);
    } elseif (file_exists($path) || is_link($path)) {
        unlink($path);
    }
}

$calls = 200;
$rounds = 5;
$sync = 'none';
$base = sys_get_temp_dir();
$quick = false;
$cpu = false;
$module = "$repo/bindings/php/Tokenlock.php";
for ($i = 1; $i < $argc; ++$i) {
    $arg = $argv[$i];
    $value = static function () use (&$i, $argc, $argv, $arg): string {
        if (++$i >= $argc) {
            usage("$arg needs a value");
        }
        return $argv[$i];
    };
    switch ($arg) {
        case '-q':
        case '--quick':
            $quick = true;
            break;
        case '--cpu':
            $cpu = true;
            break;
        case '-n':
        case '--calls':
            $calls = (int) $value();
            break;
        case '-r':
        case '--rounds':
            $rounds = (int) $value();
            break;
        case '--sync':
            $sync = $value();
            break;
        case '-d':
        case '--dir':
            $base = $value();
            break;
        case '-m':
        case '--module':
            $module = $value();
            break;
        case '-h':
        case '--help':
            usage('the cost per call of the PHP binding against flock()');
        default:
            usage("unknown argument $arg");
    }
}
if ($quick) {
    [$calls, $rounds] = [20, 2];
}
if (!is_file($module)) {
    usage("$module: no such file (-m names the module's Tokenlock.php or autoload.php)");
}
require $module;
if ($calls < 2 || $rounds < 1) {
    usage('CALLS must be at least 2 and ROUNDS at least 1');
}
if (!in_array($sync, ['none', 'file', 'file_and_dir'], true)) {
    usage('--sync takes none, file or file_and_dir');
}
$command = getenv('TOKENLOCK_COMMAND') ?: "$repo/build/tools/tokenlock";
if (is_executable($command)) {
    Tokenlock\setCommand($command);
}
try {
    $command = Tokenlock\findCommand();
} catch (Tokenlock\Exception $e) {
    // A module that needs no command works without one; one that does
    // fails at its first call, with its own message.
    $command = null;
}

$d = $base . '/php-bench-' . getmypid() . '-' . bin2hex(random_bytes(4));
if (!mkdir($d, 0700)) {
    fwrite(STDERR, "php_bench.php: cannot create the scratch directory $d\n");
    exit(1);
}

$tlLockDir = "$d/tl.lock";
$flLockFile = "$d/fl.lock";
$rnDir = "$d/rn.lock";
// The floor is the protocol's own renames: a directory named lockfile and
// a name as long as a real token (docs/protocol.md, Token grammar).
$rnFile = "$rnDir/lockfile";
$rnToken = sprintf('%s/lockfile.%d.%s-%08x.%d.%d.%016x', $rnDir, (time() + 3600) * 1000000,
    preg_replace('/[^A-Za-z0-9-]/', '_', substr(php_uname('n') ?: 'host', 0, 32)), 0, getmypid(), 1234567, 0);
if (!mkdir($rnDir) || !mkdir($rnFile)) {
    fwrite(STDERR, "php_bench.php: cannot create $rnFile\n");
    exit(1);
}
$tlCount = "$d/tl.count";
$flCount = "$d/fl.count";
$added = ['tl' => 0, 'fl' => 0];

$variants = [
    'tl_lock' => static function () use ($tlLockDir): void {
        Tokenlock\withLock($tlLockDir, static function (): void {
        });
    },
    'rn_lock' => static function () use ($rnFile, $rnToken): void {
        rename($rnFile, $rnToken);
        rename($rnToken, $rnFile);
    },
    'fl_lock' => static function () use ($flLockFile): void {
        $h = fopen($flLockFile, 'c');
        flock($h, LOCK_EX);
        flock($h, LOCK_UN);
        fclose($h);
    },
    'tl_incr' => static function () use ($tlCount, $sync, &$added): void {
        Tokenlock\increment($tlCount, ['sync' => $sync]);
        ++$added['tl'];
    },
    'fl_incr' => static function () use ($flCount, $sync, $d, &$added): void {
        $lock = fopen("$flCount.flock", 'c');
        flock($lock, LOCK_EX);
        $text = @file_get_contents($flCount);
        $value = $text === false ? 0 : (int) $text;
        $tmp = "$flCount.tmp." . getmypid();
        $out = fopen($tmp, 'wb');
        fwrite($out, ($value + 1) . "\n");
        if ($sync !== 'none') {
            fflush($out);
            fsync($out);
        }
        fclose($out);
        rename($tmp, $flCount);
        if ($sync === 'file_and_dir') {
            $dir = fopen($d, 'r');
            fsync($dir);
            fclose($dir);
        }
        flock($lock, LOCK_UN);
        fclose($lock);
        ++$added['fl'];
    },
];
$symfony = "$repo/bindings/php/tests/symfony/7.x/autoload.php";
if (is_file($symfony) && is_file('/usr/share/php/Psr/Log/autoload.php')) {
    require_once $symfony;
    $store = new Tokenlock\Symfony\TokenlockStore("$d/sf");
    $bareDir = "$d/bare.lock";
    $variants['sf_store'] = static function () use ($store): void {
        $key = new Symfony\Component\Lock\Key('bench-resource');
        $store->save($key);
        $store->delete($key);
    };
    $variants['bare_lock'] = static function () use ($bareDir): void {
        Tokenlock\Lock::acquire($bareDir, ['wait' => 0, 'lease' => 300])->release();
    };
}
if ($command !== null && function_exists('proc_open')) {
    $variants['start'] = static function () use ($command): void {
        $p = proc_open([$command, '--version'], [1 => ['file', '/dev/null', 'w']], $pipes);
        proc_close($p);
    };
}
// The first of each group is the module's; each ratio is it / another.
$groups = ['lock' => ['tl_lock', 'rn_lock', 'fl_lock'], 'incr' => ['tl_incr', 'fl_incr']];
$ratioOf = ['lock_rename' => ['tl_lock', 'rn_lock'], 'lock' => ['tl_lock', 'fl_lock'], 'incr' => ['tl_incr', 'fl_incr']];
if (isset($variants['sf_store'])) {
    $groups['store'] = ['sf_store', 'bare_lock'];
    $ratioOf['store'] = ['sf_store', 'bare_lock'];
}

$clockNs = $cpu ? static function (): int {
    $u = getrusage();
    return ($u['ru_utime.tv_sec'] + $u['ru_stime.tv_sec']) * 1000000000 + ($u['ru_utime.tv_usec'] + $u['ru_stime.tv_usec']) * 1000;
} : static fn (): int => hrtime(true);
$perCallUs = static function (callable $fn, int $n) use ($clockNs): float {
    $t = $clockNs();
    for ($i = 0; $i < $n; ++$i) {
        $fn();
    }
    return ($clockNs() - $t) / $n / 1000;
};
$median = static function (array $xs): float {
    sort($xs);
    $n = count($xs);
    return $n % 2 ? $xs[intdiv($n, 2)] : ($xs[$n / 2 - 1] + $xs[$n / 2]) / 2;
};

try {
    // One warm-up call each: the first creates the lock directory or file.
    foreach ($variants as $fn) {
        $fn();
    }
    $times = [];
    $ratios = array_fill_keys(array_keys($ratioOf), []);
    for ($round = 0; $round < $rounds; ++$round) {
        $r = [];
        foreach ($groups as $group) {
            // Rotating which goes first keeps a drift of the machine's
            // speed within a round from favouring one side.
            $shift = $round % count($group);
            foreach ([...array_slice($group, $shift), ...array_slice($group, 0, $shift)] as $key) {
                $r[$key] = $perCallUs($variants[$key], $calls);
                $times[$key][] = $r[$key];
            }
        }
        foreach ($ratioOf as $name => [$tl, $other]) {
            $ratios[$name][] = $r[$tl] / $r[$other];
        }
        if (isset($variants['start'])) {
            $times['start'][] = $perCallUs($variants['start'], $calls);
        }
    }
    if (!is_dir($rnFile) || file_exists($rnToken)) {
        throw new RuntimeException("the rename lock $rnFile did not end released");
    }

    // Both counters must hold exactly what was added, or the figures mean nothing.
    foreach ([[$tlCount, $added['tl']], [$flCount, $added['fl']]] as [$path, $n]) {
        $v = file_get_contents($path);
        if ($v !== "$n\n") {
            throw new RuntimeException("$path holds " . json_encode($v) . " after $n increments");
        }
    }

    printf("php %s, command %s; %d calls x %d rounds%s, sync=%s, %s\n", PHP_VERSION, $command ?? '(none found)',
        $calls, $rounds, $quick ? ' (quick: not for figures)' : '', $sync, $cpu ? 'CPU time' : 'wall clock');
    printf("%-44s %12s %12s %9s\n", '', 'tokenlock us', 'other us', 'ratio');
    $labels = [
        'lock_rename' => 'withLock(fn () => null) / two rename()',
        'lock' => 'withLock(fn () => null) / flock',
        'incr' => "increment() / flock'ed counter",
        'store' => 'TokenlockStore save+delete / bare Lock',
    ];
    foreach ($ratioOf as $name => [$tl, $other]) {
        printf("%-44s %12.1f %12.1f %9.2f\n", $labels[$name], $median($times[$tl]), $median($times[$other]), $median($ratios[$name]));
    }
    if (isset($times['start'])) {
        printf("%-44s %12.1f\n", 'tokenlock --version (starting the command)', $median($times['start']));
    }
    printf("php_lock_rename_ratio=%.2f\n", $median($ratios['lock_rename']));
    printf("php_lock_ratio=%.2f\n", $median($ratios['lock']));
    printf("php_incr_ratio=%.2f\n", $median($ratios['incr']));
    if (isset($ratios['store'])) {
        printf("php_store_ratio=%.2f\n", $median($ratios['store']));
    }
} catch (Throwable $e) {
    fwrite(STDERR, 'php_bench.php: ' . $e->getMessage() . "\n");
    $failed = true;
} finally {
    removeTree($d);
}
exit(isset($failed) ? 1 : 0);
