<?php
/**
 * tokenlock for PHP: file locking and atomic file updates that work where
 * flock() does not (NFS, network filesystems, shared hosting).
 *
 * Locks (Lock, withLock()) are the protocol of docs/protocol.md written in
 * PHP (class Native): no process is started, so they work where
 * disable_functions lists proc_open and friends, and without the
 * `tokenlock` command. They exclude the C++ library and the command, and
 * the other way round. Where open_basedir keeps /proc out of reach, an
 * owner that died is not seen as dead: its lock is free when its lease
 * ends, and an E_USER_NOTICE says so once per process.
 *
 * writeFile() and increment() are written in PHP too (class Files): the
 * atomic write beside the target, and the update committed through the
 * lock's token (docs/atomic-writes.md), with the version marks of network
 * filesystems. Only a call given the `command` option (or one asking for
 * a flush on PHP 8.0, which has no fsync()) runs the `tokenlock` command
 * (docs/tokenlock.1.md), with proc_open() and an argument array, so no
 * shell ever parses a path or a token.
 *
 * Calling sequence:
 *
 *     require __DIR__ . '/Tokenlock.php';   // the module in one file, copied beside the script
 *     // or: require 'vendor/autoload.php';       (composer, tokenlock/tokenlock)
 *     // or: require '.../bindings/php/autoload.php'; (the sources, one class per file)
 *
 *     // A critical section; the lock is released however the callable ends.
 *     $total = Tokenlock\withLock('/srv/app/data/ledger.lock', function () {
 *         return updateLedger();
 *     });
 *
 *     // Or by hand, across several steps.
 *     $lock = Tokenlock\Lock::acquire('/srv/app/data/db.lock', ['wait' => 30]);
 *     try { ... } finally { $lock->release(); }
 *
 *     $hits = Tokenlock\increment('/srv/app/data/hits.count');
 *     Tokenlock\writeFile('/srv/app/data/config.json', $json);
 *
 * Locks belong to the PHP process (its pid and start time): one killed
 * with SIGKILL loses its locks at once, as dead-owner detection on the
 * same host sees it gone. A lock still held when its Lock object is
 * destroyed is released, and so is every lock still held when the request
 * ends, however it ends (exit(), an uncaught exception, a fatal error such
 * as memory_limit or max_execution_time, in php-fpm as in the CLI), so
 * that the next request gets it at once; a forked child never releases
 * its parent's locks.
 *
 * Errors are thrown as Tokenlock\Exception (a \RuntimeException): getError()
 * names the error in the library's one vocabulary (`busy`, `timed_out`,
 * `lock_lost`, `corrupt_data`, `bad_argument`, `system`, ...; where a call
 * runs the command, the name it gives on its last line of stderr, run with
 * TOKENLOCK_ERRORS=json, never read from a message), getErrno() is the errno
 * of a `system` error, getCode() is the exit status the command gives for
 * the same error, and getMessage() names the path, the step and the cause. BusyException and TimeoutException (both
 * NotAcquiredException) and LockLostException can be caught apart.
 * Arguments that are wrong before any command runs (an unknown option, a
 * negative wait) throw \InvalidArgumentException.
 *
 * The command, for findCommand(), is found in this order: the `command` option of a call;
 * setCommand(); the TOKENLOCK_COMMAND environment variable; `tokenlock`
 * beside the main script (a cgi-bin that holds its own copy); ~/bin/tokenlock;
 * the directories of PATH.
 */

declare(strict_types=1);

namespace Tokenlock;

/**
 * Sets the `tokenlock` command used by calls that give no `command` option,
 * ahead of TOKENLOCK_COMMAND and the search; null returns to the search.
 */
function setCommand(?string $path): void
{
    Command::$configured = ($path === null || $path === '') ? null : $path;
}

/**
 * Sets the age, in seconds, at which a token of the widely deployed Perl
 * rename lock (`lockfile<epoch seconds>`, docs/protocol.md, Legacy tokens)
 * counts as stale and is taken over, for every lock taken from now on in
 * this process (`tokenlock --legacy-timeout`); null returns to the default,
 * 60 s, which is that procedure's own. Set it to the timeout your old
 * scripts use while they share lock directories with tokenlock.
 *
 * @throws \InvalidArgumentException for a value that is not more than 0 seconds
 */
function setLegacyTimeout(int|float|null $seconds): void
{
    if ($seconds !== null && (is_nan((float) $seconds) || $seconds <= 0 || $seconds > 1e9)) {
        throw new \InvalidArgumentException('Tokenlock\setLegacyTimeout: the timeout must be more than 0 seconds');
    }
    Command::$legacyTimeout = $seconds === null ? null : (float) $seconds;
}

/**
 * The path of the `tokenlock` command that a call with these options would
 * run.
 *
 * @param array{command?: string} $options
 * @throws Exception `command_not_found` when there is none
 */
function findCommand(array $options = []): string
{
    return Command::locate($options);
}

/**
 * Runs $fn while holding the lock LOCKDIR, and returns what it returns.
 *
 * The lock is released however $fn ends. An exception from $fn reaches
 * the caller unchanged; if releasing fails too, that is reported as an
 * E_USER_WARNING. After a normal return, a lock that was lost meanwhile
 * throws LockLostException: the critical section may have overlapped
 * another process's, and the caller has to know.
 *
 * @param callable(Lock): mixed $fn called with the held Lock (for refresh())
 * @param array{wait?: int|float|null, lease?: int|float, command?: string, group?: string|int} $options
 *        as for Lock::acquire()
 * @return mixed $fn's value
 * @throws BusyException|TimeoutException when the lock is not acquired
 * @throws LockLostException when the lock was taken over before the release
 * @throws Exception on any other failure to acquire or release
 */
function withLock(string $lockDir, callable $fn, array $options = []): mixed
{
    $lock = Lock::acquire($lockDir, $options);
    try {
        $result = $fn($lock);
    } catch (\Throwable $e) {
        try {
            $lock->release();
        } catch (Exception $releaseError) {
            trigger_error('Tokenlock\withLock: ' . $releaseError->getMessage(), E_USER_WARNING);
        }
        throw $e;
    }
    $lock->release();
    return $result;
}

/**
 * Replaces FILE with $data atomically: readers see the old contents or the
 * new, never a mix, and a failure leaves FILE as it was (`tokenlock write`).
 * Empty $data is written as an empty file.
 *
 * @param array{sync?: string, lock?: string, wait?: int|float|null, mode?: int, follow_symlinks?: bool, command?: string, group?: string|int} $options
 *        `sync`: `file_and_dir` (default: the file and its directory are
 *        flushed), `file` or `none`; `lock`: a lock directory to hold while
 *        replacing; `wait`: seconds to wait for a busy `lock` (default 10;
 *        0: fail at once with BusyException; null: as long as it takes, up
 *        to a year, the command's limit); `mode`: the mode of a new FILE,
 *        e.g. 0640; `follow_symlinks`: replace the file a link points to
 *        instead of the link; `group`: the group `lock` is shared with, as
 *        for Lock::acquire()
 * @throws BusyException|TimeoutException when `lock` stayed busy; FILE is then unchanged
 * @throws DirSyncException the new contents are in place, but the directory
 *         could not be flushed: a crash may bring back the old ones
 * @throws Exception on any other failure; FILE is then unchanged
 */
function writeFile(string $path, string $data, array $options = []): void
{
    Command::checkKeys($options, ['sync', 'lock', 'wait', 'mode', 'follow_symlinks', 'command', 'group'], 'writeFile');
    $args = ['write', '--allow-empty'];
    if (isset($options['sync'])) {
        $args[] = '--sync';
        $args[] = Command::sync($options['sync']);
    }
    if (isset($options['lock'])) {
        $args[] = '--lock';
        $args[] = Command::path($options['lock'], 'lock');
    }
    $waitArgs = Command::fileWaitArgs($options);
    array_push($args, ...$waitArgs, ...Command::groupArgs($options));
    if (isset($options['mode'])) {
        if (!is_int($options['mode']) || $options['mode'] < 0 || $options['mode'] > 07777) {
            throw new \InvalidArgumentException('Tokenlock\writeFile: mode must be an integer such as 0640');
        }
        $args[] = '--mode';
        $args[] = sprintf('0%o', $options['mode']);
    }
    if (!empty($options['follow_symlinks'])) {
        $args[] = '--follow-symlinks';
    }
    $args[] = '--';
    $args[] = Command::path($path, 'path');
    $sync = isset($options['sync']) ? $options['sync'] : 'file_and_dir';
    if (Files::native($options, $sync)) {
        if (!isset($options['lock'])) {
            Files::write($path, $data, $sync, $options['mode'] ?? null, !empty($options['follow_symlinks']));
            return;
        }
        Files::update($path, $options['lock'], fn (?string $current) => [$data, null], Command::fileWait($options) + [
            'sync' => $sync, 'mode' => $options['mode'] ?? null, 'follow' => !empty($options['follow_symlinks']), 'group' => $options['group'] ?? null,
        ]);
        return;
    }
    Command::run($args, $options, $data, $waitArgs === ['--nonblock'] ? 'busy' : 'timed_out');
}

/**
 * Adds `by` (default 1; 0 just reads) to the counter in FILE under its lock
 * and returns the new value (`tokenlock incr`).
 *
 * FILE holds one unsigned decimal and a newline; a missing FILE counts as
 * 0. Anything else, and anything over 64 bytes (not read further), throws
 * `corrupt_data` and FILE is left as it is: a counter is never reset. The new value is committed through the lock's
 * token, so a process that lost the lock cannot overwrite a newer count.
 *
 * `wait` is the command's own `-w` (0: `-n`), so it bounds the whole wait.
 * The command has no wait without limit: null, and any wait beyond a
 * year, waits a year.
 *
 * @param array{by?: int, lock?: string, wait?: int|float|null, sync?: string, command?: string, group?: string|int} $options
 *        `lock`: the lock directory (default FILE.lock, as `tokenlock incr`
 *        and counter.cgi use); `wait`: seconds to wait for a busy lock
 *        (default 10; 0: fail at once with BusyException; null: as long as
 *        it takes, up to a year); `sync`: as for writeFile(); `group`: as
 *        for Lock::acquire()
 * @return int|string the new value; a decimal string if it exceeds PHP_INT_MAX
 * @throws BusyException|TimeoutException when the lock stayed busy; nothing changed
 * @throws DirSyncException `dir_sync_failed`: counted (getValue() has the new
 *         value), but the directory could not be flushed; do not repeat
 * @throws Exception `corrupt_data`, `system` (errno EOVERFLOW past 2^64-1),
 *         `stale_data`, ... ; nothing changed
 */
function increment(string $path, array $options = []): int|string
{
    Command::checkKeys($options, ['by', 'lock', 'wait', 'sync', 'command', 'group'], 'increment');
    $args = ['incr'];
    if (isset($options['lock'])) {
        $args[] = '--lock';
        $args[] = Command::path($options['lock'], 'lock');
    }
    $waitArgs = Command::fileWaitArgs($options);
    array_push($args, ...$waitArgs, ...Command::groupArgs($options));
    if (isset($options['by'])) {
        if (!is_int($options['by']) || $options['by'] < 0) {
            throw new \InvalidArgumentException('Tokenlock\increment: by must be an integer of 0 or more');
        }
        $args[] = '--by';
        $args[] = (string) $options['by'];
    }
    if (isset($options['sync'])) {
        $args[] = '--sync';
        $args[] = Command::sync($options['sync']);
    }
    $args[] = '--';
    $args[] = Command::path($path, 'path');
    $sync = isset($options['sync']) ? $options['sync'] : 'file_and_dir';
    if (Files::native($options, $sync)) {
        $by = $options['by'] ?? 1;
        return Files::update($path, $options['lock'] ?? "$path.lock", fn (?string $current) => Files::count($path, $current, $by),
            Command::fileWait($options) + ['sync' => $sync, 'group' => $options['group'] ?? null, 'counter' => true]);
    }

    [$out] = Command::run($args, $options, null, $waitArgs === ['--nonblock'] ? 'busy' : 'timed_out');
    return Command::counterValue($out, $args);
}

/**
 * Reads the counter in FILE without locking (renames replace it whole, so
 * any read sees one committed value). A missing FILE reads as null: no
 * counter yet, as in the Perl and Python modules (the next increment()
 * makes it 1).
 *
 * @return int|string|null the value, a decimal string if it exceeds
 *         PHP_INT_MAX; null when FILE does not exist
 * @throws Exception `corrupt_data` (65) when FILE is not one unsigned
 *         decimal and a newline; `system` when it cannot be read (77 and
 *         errno EACCES when it is not readable, else 71)
 */
function readCounter(string $path): int|string|null
{
    // 'n': O_NONBLOCK, so that a FIFO planted at the path is refused below
    // rather than waited on for ever.
    $h = @fopen($path, 'rbn');
    if ($h === false) {
        clearstatcache(true, $path);
        if (!file_exists($path) && !is_link($path)) {
            return null;
        }
        $cause = error_get_last()['message'] ?? 'unknown error';
        // PHP gives no errno: a file there that cannot be read is EACCES.
        $denied = !is_readable($path);
        throw new Exception('system', "tokenlock: read counter $path: cannot open it: $cause", $denied ? 77 : 71, [], null, $denied ? 13 : 0);
    }
    $st = fstat($h);
    if ($st === false || ($st['mode'] & 0170000) !== 0100000) {
        fclose($h);
        throw Native::systemError('read counter', $path, 'it is not a regular file (a FIFO, device, socket or directory), and was not read', 22, 'put a counter file there');
    }
    // One byte past the limit tells a file that grew since the fstat.
    $text = $st['size'] > Files::COUNTER_LIMIT ? '' : stream_get_contents($h, Files::COUNTER_LIMIT + 1);
    fclose($h);
    if ($text !== false && ($st['size'] > Files::COUNTER_LIMIT || strlen($text) > Files::COUNTER_LIMIT)) {
        throw new Exception('corrupt_data', "tokenlock: read counter $path: it holds " . max($st['size'], strlen($text)) . ' bytes or more, more than the ' . Files::COUNTER_LIMIT . ' a counter may (one unsigned decimal and a newline); it was not read: repair or remove it by hand', 65);
    }
    if ($text === false || !preg_match('/\A(0|[1-9][0-9]{0,19})\n\z/', $text, $m) || !Command::fitsUint64($m[1])) {
        $shown = $text === false ? '' : addcslashes(substr($text, 0, 24), "\0..\37\177..\377");
        throw new Exception(
            'corrupt_data',
            "tokenlock: read counter $path: the file does not hold one unsigned decimal and a newline (it begins \"$shown\"); it was left as it is: repair or remove it by hand",
            65
        );
    }
    return Command::toInt($m[1]);
}

/**
 * Who holds the lock LOCKDIR, looked at without changing anything; null
 * when it is free (or not created yet). Of shared holders, the first
 * live one (holders() lists them all).
 *
 * @param array{group?: string|int} $options `group`: the group the lock
 *        is shared with, as for Lock::acquire(), which decides whether
 *        another user's lock directory is trusted
 * @return array{token: string, pid: int, host_tag: string, same_host: bool, owner: string, expires_us: int, legacy: bool, stale: bool, reason: string}|null
 *         `owner`: 'alive' or 'dead' on this host, else 'unknown';
 *         `pid` and `host_tag` are 0 and '' for a legacy token, whose
 *         `expires_us` is when its legacy timeout ends; `stale`: the next
 *         acquire takes it over, `reason` says why or until when it is held
 * @throws Exception `untrusted`, `token_missing`, `lock_corrupt`, `system`
 */
function holder(string $lockDir, array $options = []): ?array
{
    Command::checkKeys($options, ['group'], 'holder');
    $dir = Native::lockPath($lockDir);
    Native::checkTrusted($dir, Native::group($options['group'] ?? null, 'status'), 'status');
    $seen = Native::look($dir, 'status');
    if ($seen[0] !== 'held') {
        return null;
    }
    [$name, $t] = $seen[1];
    // Shared holders: the first live one, as holders() lists them.
    $shared = Native::sharedHolders($dir, $name, $t) ?? [];
    usort($shared, fn (array $a, array $b) => $a['stale'] <=> $b['stale']);
    if ($shared !== []) {
        return array_diff_key($shared[0], ['mode' => 0, 'slots' => 0]);
    }
    [$stale, $reason] = Native::judge($name, $t);
    $me = Native::identity();
    $sameHost = !$t['legacy'] && $me['proc'] && $t['tag'] === $me['tag'];
    return [
        'token' => $name,
        'pid' => $t['pid'],
        'host_tag' => $t['tag'],
        'same_host' => $sameHost,
        // Whether the owner process lives: known only on this host, as the
        // library's holder() says it (owner_liveness).
        'owner' => !$sameHost ? 'unknown' : (Native::ownerGone($t) === null ? 'alive' : 'dead'),
        'expires_us' => $t['legacy'] ? $t['expiry'] + (int) round((Command::$legacyTimeout ?? 60.0) * 1000000) : $t['expiry'],
        'legacy' => $t['legacy'],
        'stale' => $stale,
        'reason' => $reason,
    ];
}

/**
 * Every holder of LOCKDIR, as `tokenlock status` lists them: an empty
 * list when it is free; one exclusive holder (as holder() describes it,
 * with `mode` 'exclusive'); or its shared holders, each with `mode`
 * 'shared' (a reader) or 'slot' (one of `slots` N), and, while a writer
 * waits for them, that writer with `mode` 'waiting'. Stale holders are
 * listed too (`stale` true, `reason` why), as holder() does.
 *
 * @param array{group?: string|int} $options as holder()
 * @return list<array{mode: string, slots: int, token: string, pid: int, host_tag: string, same_host: bool, owner: string, expires_us: int, legacy: bool, stale: bool, reason: string}>
 * @throws Exception `untrusted`, `lock_corrupt`, `system`, as holder()
 */
function holders(string $lockDir, array $options = []): array
{
    Command::checkKeys($options, ['group'], 'holders');
    $dir = Native::lockPath($lockDir);
    Native::checkTrusted($dir, Native::group($options['group'] ?? null, 'status'), 'status');
    $seen = Native::look($dir, 'status');
    if ($seen[0] !== 'held') {
        return [];
    }
    $shared = Native::sharedHolders($dir, $seen[1][0], $seen[1][1]);
    if ($shared !== null) {
        return $shared;
    }
    $h = holder($lockDir, $options);
    return $h === null ? [] : [['mode' => 'exclusive', 'slots' => 0] + $h];
}
