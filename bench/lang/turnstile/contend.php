<?php
/*
 * N processes on one lock, each doing lock, increment a counter file,
 * release, for SECONDS: every waiting scheme of turnstile_lock.php against
 * flock(LOCK_EX) on a file, side by side in one run (each round runs every
 * scheme once, in an order that rotates between rounds, on a fresh lock).
 *
 *   php contend.php [-n PROCS] [-t SECONDS] [-r ROUNDS] [-s SCHEMES] [-w WAIT] [-c replace|inplace] [-d DIR]
 *   php contend.php worker SCHEME LOCKDIR COUNTER SECONDS [CANARY]
 *   php contend.php probe SCHEME LOCKDIR WAIT
 *
 * SCHEMES: comma-separated, of flock, module and modulepoll (ModuleLock:
 * the PHP module with its turnstile, and with it off) and Scheme::named's (default
 * flock,poll,block,nb,fair,deputy,aged). WAIT: each acquire's budget in seconds
 * (default: none). Per run: operations per second, Jain's fairness index
 * of the per-process counts, p50/p99/max acquire latency, the CPU time
 * (user and system) all processes spent per operation; then per scheme
 * the median over rounds of its ratio to flock's operations in the same
 * round, with the smallest and largest. A lost increment (the counter
 * short of the operations counted) fails the run: that would be two
 * holders at once.
 *
 * worker: one process of the mixed case (docs/waiting-turnstile.md): runs
 * until SECONDS pass, creating CANARY with O_EXCL inside the lock when
 * given (as tests/support/lock_worker does), and prints
 * "ops N p50_us X p99_us Y max_us Z".
 */

declare(strict_types=1);

namespace TurnstileBench;

require __DIR__ . '/turnstile_lock.php';

/**
 * The counter of tests/support/lock_worker: 20 digits and a newline. In
 * place (-c inplace: a read and a write at offset 0, as lock_worker does),
 * or replaced the way the counters replace it (-c replace, the default: a
 * temporary file written and renamed over it, no fsync), so that the
 * critical section costs what the issue's counters cost.
 */
function increment($fp, string $counter, bool $inPlace): void
{
    fseek($fp, 0);
    $v = (int) fread($fp, 21);
    if ($inPlace) {
        fseek($fp, 0);
        fwrite($fp, sprintf("%020d\n", $v + 1));
        return;
    }
    $tmp = "$counter.tmp." . getmypid();
    file_put_contents($tmp, sprintf("%020d\n", $v + 1));
    rename($tmp, $counter);
}

/** Runs one process's loop from START to STOP (hrtime ns); returns [ops, latencies in ns]. */
function loop(string $scheme, string $dir, string $counter, array $when, ?float $wait, bool $inPlace, string $canary = ''): array
{
    [$start, $stop] = $when;
    $fl = $scheme === 'flock' ? fopen("$dir.flock", 'c') : null;
    $lock = $scheme === 'flock' ? null : (str_starts_with($scheme, 'module') ? new ModuleLock($dir, $scheme === 'modulepoll') : new RenameLock($dir, Scheme::named($scheme)));
    $lat = [];
    while (hrtime(true) < $start) {
        usleep(1000);
    }
    while (($t0 = hrtime(true)) < $stop) {
        if ($fl !== null ? !flock($fl, LOCK_EX) : !$lock->acquire($wait)) {
            continue;  // a budget ran out: counted as no operation
        }
        $lat[] = hrtime(true) - $t0;
        $c = $canary !== '' ? @fopen($canary, 'x') : true;
        if ($c === false) {
            fwrite(STDERR, "contend: two holders at once: $canary exists\n");
            exit(3);
        }
        $fp = $inPlace && isset($fp) ? $fp : fopen($counter, 'c+');
        increment($fp, $counter, $inPlace);
        $inPlace || fclose($fp);
        if ($canary !== '') {
            fclose($c);
            unlink($canary);
        }
        $fl !== null ? flock($fl, LOCK_UN) : $lock->release();
    }
    return [count($lat), $lat];
}

/**
 * The PHP module itself (schemes `module`, its turnstile, and `modulepoll`,
 * the same with the turnstile off: backoff polling), loaded from
 * TOKENLOCK_PHP_MODULE or bindings/php/Tokenlock.php of this tree.
 */
final class ModuleLock
{
    private ?\Tokenlock\Lock $held = null;

    public function __construct(private string $dir, bool $poll)
    {
        require_once getenv('TOKENLOCK_PHP_MODULE') ?: __DIR__ . '/../../../bindings/php/Tokenlock.php';
        if ($poll) {
            \Tokenlock\Native::$lineHere[\Tokenlock\Native::lockPath($dir)] = false;
        }
    }

    public function acquire(?float $wait): bool
    {
        try {
            $this->held = \Tokenlock\Lock::acquire($this->dir, ['wait' => $wait]);
            return true;
        } catch (\Tokenlock\TimeoutException $e) {
            return false;
        }
    }

    public function release(): void
    {
        $this->held->release();
        $this->held = null;
    }
}

/** Percentile P (0..100) of sorted values. */
function pct(array $sorted, float $p): float
{
    return $sorted ? (float) $sorted[min(count($sorted) - 1, (int) floor($p / 100 * count($sorted)))] : 0.0;
}

function jain(array $x): float
{
    $sq = array_sum(array_map(fn ($v) => $v * $v, $x));
    return $sq > 0 ? array_sum($x) ** 2 / (count($x) * $sq) : 0.0;
}

/** A fresh lock directory with its free token, and a zero counter. */
function fresh(string $work, string $name): array
{
    $dir = "$work/$name.lock";
    mkdir($dir, 0755);
    mkdir("$dir/lockfile", 0755);
    file_put_contents("$work/$name.count", sprintf("%020d\n", 0));
    return [$dir, "$work/$name.count"];
}

/** One run of SCHEME with N processes: [ops/s, jain, p50 us, p99 us, max us, CPU us per operation]. */
function run(string $scheme, int $n, float $seconds, array $opt, string $work, string $tag): array
{
    [$dir, $counter] = fresh($work, $tag);
    $start = hrtime(true) + 200000000;
    $stop = $start + (int) ($seconds * 1e9);
    $cpu = cpuOfChildren();
    $pids = [];
    for ($i = 0; $i < $n; ++$i) {
        $pid = pcntl_fork();
        if ($pid === 0) {
            [$ops, $lat] = loop($scheme, $dir, $counter, [$start, $stop], $opt['wait'], $opt['inplace']);
            file_put_contents("$work/$tag.$i", pack('P*', $ops, ...$lat));
            exit(0);
        }
        $pids[] = $pid;
    }
    foreach ($pids as $pid) {
        pcntl_waitpid($pid, $status);
        if (!pcntl_wifexited($status) || pcntl_wexitstatus($status) !== 0) {
            throw new \RuntimeException("contend: a $scheme worker failed (status $status)");
        }
    }
    $row = summarise($scheme, $n, $seconds, $work, $tag, $counter);
    $row[] = (cpuOfChildren() - $cpu) / max(1, $row[0] * $seconds);
    return $row;
}

/** CPU time (user and system, microseconds) of the children waited for so far. */
function cpuOfChildren(): float
{
    $u = getrusage(1);
    return $u['ru_utime.tv_sec'] * 1e6 + $u['ru_utime.tv_usec'] + $u['ru_stime.tv_sec'] * 1e6 + $u['ru_stime.tv_usec'];
}

/** Reads the workers' figures and checks that no increment was lost. */
function summarise(string $scheme, int $n, float $seconds, string $work, string $tag, string $counter): array
{
    $counts = [];
    $all = [];
    for ($i = 0; $i < $n; ++$i) {
        $v = unpack('P*', file_get_contents("$work/$tag.$i"));
        $counts[] = $v[1];
        array_push($all, ...array_slice($v, 1));
    }
    $total = array_sum($counts);
    $got = (int) file_get_contents($counter);
    if ($got !== $total) {
        throw new \RuntimeException("contend: $scheme: $total operations but the counter holds $got: two holders at once");
    }
    sort($all);
    return [$total / $seconds, jain($counts), pct($all, 50) / 1e3, pct($all, 99) / 1e3, (end($all) ?: 0) / 1e3];
}

function median(array $x): float
{
    sort($x);
    return $x[intdiv(count($x) - 1, 2)];
}

/** The table: per scheme, medians over rounds, and the ratio to flock measured in each round. */
function report(array $results, array $schemes): void
{
    printf("%-14s %8s %6s %8s %8s %8s %7s %8s %s\n", 'scheme', 'ops/s', 'jain', 'p50 us', 'p99 us', 'max us', 'cpu/op', 'x flock', '(min-max)');
    foreach ($schemes as $s) {
        $col = fn (int $k) => median(array_column($results[$s], $k));
        $ratios = [];
        foreach ($results[$s] as $r => $row) {
            $ratios[] = $row[0] / $results['flock'][$r][0];
        }
        printf("%-14s %8.0f %6.2f %8.0f %8.0f %8.0f %7.0f %7.2fx (%.2f-%.2f)\n", $s, $col(0), $col(1), $col(2), $col(3), $col(4), $col(5),
            median($ratios), min($ratios), max($ratios));
    }
}

/**
 * One acquisition with a budget, for the attacks (attacks.sh): prints
 * "got MS at EPOCH_MS" or "timed_out MS at EPOCH_MS" (milliseconds waited,
 * and when it ended, by the wall clock, to compare with another process's
 * release) and, when the wait could not use the turnstile, why; releases
 * what it got.
 */
function probe(string $scheme, string $dir, float $wait): int
{
    $lock = new RenameLock($dir, Scheme::named($scheme));
    $t0 = hrtime(true);
    $got = $lock->acquire($wait);
    printf("%s %.0f at %.0f%s\n", $got ? 'got' : 'timed_out', (hrtime(true) - $t0) / 1e6, microtime(true) * 1e3,
        $lock->fallback === '' ? '' : " fallback: $lock->fallback");
    if ($got) {
        $lock->release();
    }
    return 0;
}

function main(array $argv): int
{
    if (($argv[1] ?? '') === 'worker') {
        [, , $scheme, $dir, $counter, $seconds] = $argv;
        $now = hrtime(true);
        $when = [$now, $now + (int) ((float) $seconds * 1e9)];
        [$ops, $lat] = loop($scheme, $dir, $counter, $when, 30.0, true, $argv[6] ?? '');
        sort($lat);
        printf("ops %d p50_us %.0f p99_us %.0f max_us %.0f\n", $ops, pct($lat, 50) / 1e3, pct($lat, 99) / 1e3, (end($lat) ?: 0) / 1e3);
        return 0;
    }
    if (($argv[1] ?? '') === 'probe') {
        return probe($argv[2], $argv[3], (float) $argv[4]);
    }
    $o = getopt('n:t:r:s:w:d:c:');
    $n = (int) ($o['n'] ?? 8);
    $seconds = (float) ($o['t'] ?? 2);
    $rounds = (int) ($o['r'] ?? 3);
    $schemes = explode(',', $o['s'] ?? 'flock,poll,block,nb,fair,deputy,aged');
    if (!in_array('flock', $schemes, true)) {
        array_unshift($schemes, 'flock');  // every ratio is to flock's run in the same round
    }
    $opt = ['wait' => isset($o['w']) ? (float) $o['w'] : null, 'inplace' => ($o['c'] ?? 'replace') === 'inplace'];
    $work = ($o['d'] ?? sys_get_temp_dir()) . '/contend.' . getmypid();
    mkdir($work, 0700);
    printf("php %s, %d processes, %.1f s per run, %d rounds, wait %s, counter %s\n", PHP_VERSION, $n, $seconds, $rounds,
        $opt['wait'] === null ? 'none' : "{$opt['wait']} s", $opt['inplace'] ? 'in place' : 'replaced');
    $results = [];
    for ($r = 0; $r < $rounds; ++$r) {
        $order = array_merge(array_slice($schemes, $r % count($schemes)), array_slice($schemes, 0, $r % count($schemes)));
        foreach ($order as $s) {
            $results[$s][$r] = run($s, $n, $seconds, $opt, $work, "r$r-" . str_replace(['@', '/'], '_', $s));
        }
    }
    report($results, $schemes);
    exec('rm -rf ' . escapeshellarg($work));
    return 0;
}

exit(main($argv));
