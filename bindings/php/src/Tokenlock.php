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
 *     require __DIR__ . '/Tokenlock.php';
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
 * same host sees it gone. A lock still held when its Lock object is destroyed is released,
 * except in a forked child, which never owned it.
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
 * A failed tokenlock operation.
 *
 * getCode() is the `tokenlock` command's exit status (tokenlock(1), EXIT
 * STATUS); errors found before or without running it use the status the
 * command gives for the same case (127 when it cannot be found).
 */
class Exception extends \RuntimeException
{
    private string $error;
    /** @var list<string> */
    private array $commandLine;
    private int $errno;

    /**
     * @param string       $error       the error's name, see getError()
     * @param string       $message     what failed: path, step and cause
     * @param int          $status      the command's exit status
     * @param list<string> $commandLine the command that failed, if one ran
     * @param int          $errno       for `system`: the errno (else 0)
     */
    public function __construct(string $error, string $message, int $status, array $commandLine = [], ?\Throwable $previous = null, int $errno = 0)
    {
        parent::__construct($message, $status, $previous);
        $this->error = $error;
        $this->commandLine = $commandLine;
        $this->errno = $errno;
    }

    /** For a `system` error: the errno of the failed system call; else 0. */
    public function getErrno(): int
    {
        return $this->errno;
    }

    /**
     * The error's name, the library's (tokenlock/errors.hpp): `busy`,
     * `timed_out`, `lock_lost`, `bad_argument` (a malformed argument: a
     * lease, a number, a token), `corrupt_data`, `token_missing` and
     * `lock_corrupt` (the lock directory needs a human), `not_owner`,
     * `dir_sync_failed` (DirSyncException: the new contents are in place,
     * a crash may undo them), `stale_data` (a network filesystem served an
     * old version; nothing was written, retry), `untrusted` (another user
     * could change the lock directory), `system` (getErrno() says which
     * errno: ENOENT, EACCES, EOVERFLOW past 2^64-1, ...); and this module's
     * own `command_not_found`, or `command_failed` (the command died of a
     * signal, answered nonsense, or is too old to name its error).
     */
    public function getError(): string
    {
        return $this->error;
    }

    /**
     * The command line that failed (the command's path first), or an empty
     * list when no command ran.
     *
     * @return list<string>
     */
    public function getCommandLine(): array
    {
        return $this->commandLine;
    }
}

/**
 * The lock was not acquired: it was busy (BusyException) or the wait ran
 * out (TimeoutException). Nothing was changed.
 */
class NotAcquiredException extends Exception
{
}

/** The lock was held by another live process and no wait was asked for. */
class BusyException extends NotAcquiredException
{
}

/** The lock stayed held by others for the whole wait. */
class TimeoutException extends NotAcquiredException
{
}

/**
 * The new contents are in place (or the count is made) but the directory
 * could not be flushed after the rename, so a crash may undo them: error
 * `dir_sync_failed`, status 74. Do not repeat the call.
 */
class DirSyncException extends Exception
{
    private int|string|null $value = null;

    /**
     * increment()'s new value, which was counted; null for other calls.
     *
     * @return int|string|null a decimal string if it exceeds PHP_INT_MAX
     */
    public function getValue(): int|string|null
    {
        return $this->value;
    }

    /** @internal set by increment() from what the command printed */
    public function setValue(int|string $value): void
    {
        $this->value = $value;
    }
}

/**
 * The lock does not hold the token any more: it was taken over (its lease
 * ended, its owner was judged dead, or `tokenlock break --force`), so
 * another process may have entered the critical section meanwhile.
 */
class LockLostException extends Exception
{
}

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
 * when it is free (or not created yet).
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
 * A lock held by this PHP process through a token (`tokenlock acquire`).
 *
 * Obtain one with Lock::acquire() or Lock::tryAcquire(); give it back with
 * release(). The lock stays held across calls until then, until its lease
 * ends (default 3600 s; refresh() extends it), or until this process dies.
 */
final class Lock
{
    private string $dir;
    private string $token;
    private ?float $lease;
    private int $ownerPid;
    private bool $held = true;

    /** Made right after Native::acquire() made TOKEN: its pid is this process's. */
    private function __construct(string $dir, string $token, ?float $lease)
    {
        $this->dir = $dir;
        $this->token = $token;
        $this->lease = $lease;
        $this->ownerPid = Native::tokenPid();
    }

    /**
     * Acquires the lock LOCKDIR (a directory, created on first use; its
     * parent must exist).
     *
     * @param array{wait?: int|float|null, lease?: int|float, command?: string, group?: string|int} $options
     *        `wait`: seconds to wait for a busy lock (default 10; 0: fail at
     *        once with BusyException; null: as long as it takes);
     *        `lease`: seconds the lock stays valid without refresh()
     *        (default 3600; from 0.001 to 86400, else `bad_argument`);
     *        `group`: the one group (a name or a decimal gid) the lock is
     *        shared with, else TOKENLOCK_GROUP (docs/security.md): this
     *        user must be in it (else `bad_argument`); a lock directory
     *        made gets that group and group write, and another user's is
     *        trusted in that group only;
     *        `command`: still accepted, so that older calls keep working,
     *        but a lock runs no command
     * @throws BusyException when busy and `wait` is 0
     * @throws TimeoutException when still busy after `wait`
     * @throws Exception on any other failure (`system` with errno ENOENT
     *         for a missing parent, `untrusted`, `lock_corrupt`, ...)
     */
    public static function acquire(string $dir, array $options = []): self
    {
        Command::checkKeys($options, ['wait', 'lease', 'command', 'group'], 'Lock::acquire');
        $wait = array_key_exists('wait', $options) ? Command::seconds($options['wait'], 'wait') : Command::DEFAULT_WAIT;
        $lease = isset($options['lease']) ? Command::seconds($options['lease'], 'lease') : null;
        $path = Native::lockPath($dir);
        $token = Native::acquire($path, $wait, Native::leaseUs($lease), Native::group($options['group'] ?? null));
        return new self($dir, $token, $lease);
    }

    /**
     * Like acquire(), but returns null when the lock is busy or the wait
     * runs out. `wait` defaults to 0 here.
     *
     * @param array{wait?: int|float|null, lease?: int|float, command?: string, group?: string|int} $options
     * @throws Exception on failures other than a busy lock
     */
    public static function tryAcquire(string $dir, array $options = []): ?self
    {
        try {
            return self::acquire($dir, $options + ['wait' => 0]);
        } catch (NotAcquiredException $e) {
            return null;
        }
    }

    /**
     * The current token, as `tokenlock release` and `tokenlock status` name
     * it. It changes with every refresh().
     */
    public function token(): string
    {
        return $this->token;
    }

    /** The lock directory, as given to acquire(). */
    public function dir(): string
    {
        return $this->dir;
    }

    /**
     * Whether this object still believes it holds the lock: false after
     * release() or after an operation found the lock lost.
     */
    public function isHeld(): bool
    {
        return $this->held;
    }

    /**
     * Extends the lease to $lease seconds from now (default: the lease given
     * to acquire(), else 3600) and returns the new token.
     *
     * @throws LockLostException when the lock was taken over; it is then
     *         no longer held
     * @throws \LogicException after release()
     * @throws Exception on any other failure
     */
    public function refresh(int|float|null $lease = null): string
    {
        if (!$this->held) {
            throw new \LogicException("Tokenlock\\Lock::refresh: the lock {$this->dir} is no longer held by this object");
        }
        $this->checkOwner('refresh');
        $lease = $lease === null ? $this->lease : Command::seconds($lease, 'lease');
        try {
            $this->token = Native::refresh(Native::lockPath($this->dir), $this->token, Native::leaseUs($lease));
        } catch (LockLostException $e) {
            $this->held = false;
            throw $e;
        }
        $this->lease = $lease;
        return $this->token;
    }

    /**
     * Releases the lock. Does nothing if it is no longer held.
     *
     * @throws LockLostException when the lock was taken over meanwhile
     *         (nothing was changed, and it is no longer held)
     * @throws Exception `not_owner` in a forked child of the process that
     *         acquired it; the lock stays held by that process
     * @throws Exception on any other failure; the lock then stays held and
     *         release() may be called again
     */
    public function release(): void
    {
        if (!$this->held) {
            return;
        }
        $this->checkOwner('release');
        try {
            Native::release(Native::lockPath($this->dir), $this->token);
        } catch (LockLostException $e) {
            $this->held = false;
            throw $e;
        }
        $this->held = false;
    }

    /**
     * Releases a lock still held, but only in the process that acquired
     * it: a forked child shares the object, not the lock. A failure is
     * reported as an E_USER_WARNING, since a destructor cannot throw to
     * anyone who would handle it.
     */
    public function __destruct()
    {
        if (!$this->held || Native::pid() !== $this->ownerPid) {
            return;
        }
        try {
            $this->release();
        } catch (Exception $e) {
            trigger_error('Tokenlock\Lock: releasing on destruction: ' . $e->getMessage(), E_USER_WARNING);
        }
    }

    /**
     * A forked child shares this object, not the lock: the token names its
     * parent, which may still be in its critical section.
     */
    private function checkOwner(string $step): void
    {
        $pid = Native::pid();
        if ($pid !== $this->ownerPid) {
            throw new Exception('not_owner', "tokenlock: $step {$this->dir}: the lock belongs to process {$this->ownerPid}, and this is its forked child $pid; nothing was changed: only the process that acquired a lock may release or refresh it", 70);
        }
    }

    // A copy would release the same token twice.
    private function __clone()
    {
    }
}

/**
 * Finding and running the `tokenlock` command.
 *
 * @internal
 */
final class Command
{
    /**
     * The longest wait `tokenlock write` and `incr` accept (a year). They
     * have no wait without limit, so this stands in for one.
     */
    public const LONGEST_WAIT = 31536000.0;
    /** Lock::acquire()'s wait when none is given, as the library's. */
    public const DEFAULT_WAIT = 10.0;

    /** Set by setCommand(). */
    public static ?string $configured = null;
    /** Set by setLegacyTimeout(). */
    public static ?float $legacyTimeout = null;
    /** @var array<string, string> search inputs => path found */
    private static array $found = [];

    /**
     * The command a call with these options runs (see findCommand()).
     *
     * @param array{command?: string} $options
     */
    public static function locate(array $options): string
    {
        if (isset($options['command']) && $options['command'] !== '') {
            return self::checkExecutable((string) $options['command'], "the 'command' option");
        }
        if (self::$configured !== null) {
            return self::checkExecutable(self::$configured, 'Tokenlock\setCommand()');
        }
        $env = getenv('TOKENLOCK_COMMAND');
        if ($env !== false && $env !== '') {
            return self::checkExecutable($env, 'TOKENLOCK_COMMAND');
        }
        $script = get_included_files()[0] ?? '';
        $home = self::home();
        $path = (string) getenv('PATH');
        $key = "$script\0$home\0$path";
        if (isset(self::$found[$key])) {
            return self::$found[$key];
        }
        $places = [];
        if ($script !== '') {
            $places[] = dirname($script) . '/tokenlock';
        }
        if ($home !== '') {
            $places[] = rtrim($home, '/') . '/bin/tokenlock';
        }
        foreach (explode(':', $path) as $dir) {
            if ($dir !== '') {
                $places[] = rtrim($dir, '/') . '/tokenlock';
            }
        }
        foreach ($places as $candidate) {
            if (is_file($candidate) && is_executable($candidate)) {
                return self::$found[$key] = $candidate;
            }
        }
        throw new Exception(
            'command_not_found',
            'tokenlock: cannot find the tokenlock command: TOKENLOCK_COMMAND is not set, and it is not '
            . ($script !== '' ? 'beside the script in ' . dirname($script) . ', ' : '')
            . ($home !== '' ? "in $home/bin, " : '')
            . "nor in PATH ($path); copy it to one of these places or set TOKENLOCK_COMMAND to its path",
            127
        );
    }

    /**
     * Runs `tokenlock ARGS`, feeding $stdin (none when null), and returns
     * [stdout, stderr]. $busyAs names what status 1 means for this call;
     * $where is what the messages made here name (default: the
     * subcommand), so that a caller can name its lock without a secret.
     *
     * @param list<string> $args
     * @param array{command?: string} $options
     * @return array{0: string, 1: string}
     */
    public static function run(array $args, array $options, ?string $stdin = null, string $busyAs = 'timed_out', ?string $where = null,
        #[\SensitiveParameter] array $env = []): array
    {
        $where ??= $args[0];
        // The subcommands that take a lock directory take the legacy
        // timeout too; a Redis lock has no legacy tokens, and the command
        // refuses the option there.
        if (self::$legacyTimeout !== null && in_array($args[0], ['acquire', 'incr', 'write', 'run'], true) && ($args[1] ?? '') !== '--redis') {
            array_splice($args, 1, 0, ['--legacy-timeout', self::formatSeconds(self::$legacyTimeout)]);
        }
        $argv = array_merge([self::locate($options)], $args);
        $spec = [
            0 => $stdin === null ? ['file', '/dev/null', 'r'] : ['pipe', 'r'],
            1 => ['pipe', 'w'],
            2 => ['pipe', 'w'],
        ];
        // The error's name then ends stderr, as a JSON line.
        // $env: what the command reads from its environment rather than
        // from argv, which every local user can read (a server's URL).
        $env = ['TOKENLOCK_ERRORS' => 'json'] + $env + getenv();
        $proc = @proc_open($argv, $spec, $pipes, null, $env);
        if (!is_resource($proc)) {
            $cause = error_get_last()['message'] ?? 'unknown error';
            throw new Exception('system', "tokenlock: $where: cannot start {$argv[0]}: proc_open failed: $cause; if proc_open is in disable_functions, use the calls that start no process (locks, writeFile() and increment() without `command`, RedisLock with the phpredis extension)", 71, $argv);
        }
        [$out, $err] = self::exchange($pipes, $stdin);
        [$status, $signal] = self::waitFor($proc);
        if ($status === 0) {
            return [$out, $err];
        }
        [$message, $named] = self::errorLine(rtrim($err));
        if ($signal !== null) {
            // Its exit status would be a guess: a signal is no error name.
            throw new Exception('command_failed', ($message !== '' ? "$message\n" : '')
                . "tokenlock: $where: the command {$argv[0]} was killed by signal $signal before it finished, so what it did is not known"
                . ' (a lock it took is free at the latest when its lease ends); find what sent the signal (the kernel log names the out-of-memory killer) and call again', 128 + $signal, $argv);
        }
        if ($message === '') {
            $message = "tokenlock: $where: {$argv[0]} exited with status $status";
        }
        [$error, $class] = self::classify($status, $named === null ? null : $named[0], $busyAs);
        $e = new $class($error, $message, $status, $argv, null, $named === null ? 0 : $named[1]);
        // incr prints the value it counted before reporting the failed flush.
        if ($e instanceof DirSyncException && $args[0] === 'incr' && preg_match('/\A[0-9]{1,20}\z/', trim($out))) {
            $e->setValue(self::toInt(trim($out)));
        }
        throw $e;
    }

    /**
     * Feeds stdin and collects stdout and stderr together, so that a
     * command that fills one pipe while PHP waits on another cannot stall.
     *
     * @param array<int, resource> $pipes
     * @return array{0: string, 1: string}
     */
    private static function exchange(array $pipes, ?string $stdin): array
    {
        $out = '';
        $err = '';
        $offset = 0;
        $writer = $stdin === null ? null : $pipes[0];
        if ($writer !== null) {
            stream_set_blocking($writer, false);
            if ($stdin === '') {
                fclose($writer);
                $writer = null;
            }
        }
        $readers = [1 => $pipes[1], 2 => $pipes[2]];
        while ($readers || $writer !== null) {
            $r = array_values($readers);
            $w = $writer === null ? [] : [$writer];
            $e = null;
            if (@stream_select($r, $w, $e, null) === false) {
                // Interrupted by a signal: look again.
                continue;
            }
            if ($w) {
                $n = @fwrite($writer, substr($stdin, $offset, 65536));
                if ($n === false || $n === 0) {
                    // The command stopped reading; its status says why.
                    fclose($writer);
                    $writer = null;
                } else {
                    $offset += $n;
                    if ($offset >= strlen($stdin)) {
                        fclose($writer);
                        $writer = null;
                    }
                }
            }
            foreach ($r as $stream) {
                $key = array_search($stream, $readers, true);
                $chunk = fread($stream, 65536);
                if ($chunk === false || ($chunk === '' && feof($stream))) {
                    fclose($stream);
                    unset($readers[$key]);
                } elseif ($key === 1) {
                    $out .= $chunk;
                } else {
                    $err .= $chunk;
                }
            }
        }
        return [$out, $err];
    }

    /**
     * The command's exit status and, if a signal ended it, that signal.
     * proc_close() would report a signal as if it were an exit status.
     *
     * @param resource $proc
     * @return array{0: int, 1: ?int}
     */
    private static function waitFor($proc): array
    {
        // The command has closed its output, so it is exiting: the wait is
        // short, and the backoff keeps it from spinning.
        for ($pause = 0; ; $pause = min(max(2 * $pause, 20), 5000)) {
            $st = proc_get_status($proc);
            if (!$st['running']) {
                proc_close($proc);
                return $st['signaled'] ? [128 + $st['termsig'], $st['termsig']] : [$st['exitcode'], null];
            }
            if ($pause > 0) {
                usleep($pause);
            }
        }
    }

    /**
     * The command's stderr without its JSON error line, and the name and
     * errno that line gives (null when the last line is not one: a command
     * from before --errors=json).
     *
     * @return array{0: string, 1: ?array{0: string, 1: int}}
     */
    private static function errorLine(string $err): array
    {
        $cut = strrpos($err, "\n");
        $last = $cut === false ? $err : substr($err, $cut + 1);
        if (!str_starts_with($last, '{"error"')) {
            return [$err, null];
        }
        $fields = json_decode($last, true);
        if (!is_array($fields) || !is_string($fields['error'] ?? null) || !is_int($fields['errno'] ?? null)) {
            return [$err, null];
        }
        return [rtrim($cut === false ? '' : substr($err, 0, $cut)), [$fields['error'], $fields['errno']]];
    }

    /**
     * The name and exception class for a failure: by the name the command
     * gave, else (an older command) by what its exit status alone says.
     *
     * @return array{0: string, 1: class-string<Exception>}
     */
    private static function classify(int $status, ?string $name, string $busyAs): array
    {
        if ($name === null) {
            $name = match ($status) {
                1 => $busyAs,
                3 => 'lock_lost',
                64 => 'bad_argument',
                126, 127 => 'command_not_found',
                default => 'command_failed',
            };
        }
        $class = match ($name) {
            'busy' => BusyException::class,
            'timed_out' => TimeoutException::class,
            'lock_lost' => LockLostException::class,
            'dir_sync_failed' => DirSyncException::class,
            default => Exception::class,
        };
        return [$name, $class];
    }

    /**
     * The value `tokenlock incr` printed.
     *
     * @param list<string> $argv the command line, for the error
     */
    public static function counterValue(string $out, array $argv): int|string
    {
        $text = trim($out);
        if (!preg_match('/\A[0-9]{1,20}\z/', $text)) {
            throw new Exception('command_failed', "tokenlock: incr: the command printed \"$text\" instead of a number", 70, $argv);
        }
        return self::toInt($text);
    }

    /** A decimal as an int, or as the string itself beyond PHP_INT_MAX. */
    public static function toInt(string $digits): int|string
    {
        $max = (string) PHP_INT_MAX;
        if (strlen($digits) < strlen($max) || (strlen($digits) === strlen($max) && strcmp($digits, $max) <= 0)) {
            return (int) $digits;
        }
        return $digits;
    }

    /** Whether a decimal without leading zeros is at most 2^64-1, the counter's range. */
    public static function fitsUint64(string $digits): bool
    {
        return strlen($digits) < 20 || (strlen($digits) === 20 && strcmp($digits, '18446744073709551615') <= 0);
    }

    /**
     * Refuses option names a function does not take, so that a misspelt
     * option is not silently ignored.
     *
     * @param array<string, mixed> $options
     * @param list<string> $known
     */
    public static function checkKeys(array $options, array $known, string $function): void
    {
        $unknown = array_diff(array_keys($options), $known);
        if ($unknown) {
            throw new \InvalidArgumentException("Tokenlock\\$function: unknown option '" . implode("', '", $unknown)
                . "'; it takes " . implode(', ', $known));
        }
    }

    /**
     * A duration option in seconds; null (and INF) mean no limit.
     *
     * @param mixed $value
     */
    public static function seconds($value, string $name): ?float
    {
        if ($value === null) {
            return null;
        }
        if ((!is_int($value) && !is_float($value)) || is_nan((float) $value) || $value < 0) {
            throw new \InvalidArgumentException("Tokenlock: $name must be a number of seconds, 0 or more");
        }
        return is_infinite((float) $value) ? null : (float) $value;
    }

    /**
     * The options that give `tokenlock write` or `incr` the `wait` of
     * $options: none without one (the command's 10 s), `--nonblock` for 0,
     * else `--wait SECS`, null and anything beyond a year as a year.
     *
     * @param array{wait?: int|float|null} $options
     * @return list<string>
     */
    public static function fileWaitArgs(array $options): array
    {
        if (!array_key_exists('wait', $options)) {
            return [];
        }
        $wait = self::seconds($options['wait'], 'wait');
        if ($wait !== null && $wait <= 0) {
            return ['--nonblock'];
        }
        return ['--wait', self::formatSeconds(min($wait ?? self::LONGEST_WAIT, self::LONGEST_WAIT))];
    }

    /**
     * `--group G` for the `group` option; without it the command reads
     * TOKENLOCK_GROUP from the environment it inherits, as this module does.
     *
     * @param array{group?: string|int|null} $options
     * @return list<string>
     */
    public static function groupArgs(array $options): array
    {
        if (!isset($options['group'])) {
            return [];
        }
        Native::group($options['group']);
        return ['--group', (string) $options['group']];
    }

    /**
     * The `wait` of a native writeFile() or increment(), as Native::acquire()
     * takes it: none given is the command's 10 s, null waits without limit.
     *
     * @param array{wait?: int|float|null} $options
     * @return array{wait: ?float}
     */
    public static function fileWait(array $options): array
    {
        return ['wait' => array_key_exists('wait', $options) ? self::seconds($options['wait'], 'wait') : self::DEFAULT_WAIT];
    }

    /** Seconds as the command reads them: plain decimal, never an exponent. */
    public static function formatSeconds(float $seconds): string
    {
        $text = rtrim(rtrim(sprintf('%.6F', $seconds), '0'), '.');
        return $text === '' ? '0' : $text;
    }

    /**
     * A durability level, checked.
     *
     * @param mixed $level
     */
    public static function sync($level): string
    {
        if (!in_array($level, ['none', 'file', 'file_and_dir'], true)) {
            throw new \InvalidArgumentException('Tokenlock: sync must be none, file or file_and_dir');
        }
        return $level;
    }

    /**
     * A path argument, checked: PHP strings may hold NUL, which no path can.
     *
     * @param mixed $path
     */
    public static function path($path, string $what): string
    {
        if (!is_string($path) || $path === '' || strpos($path, "\0") !== false) {
            throw new \InvalidArgumentException("Tokenlock: the $what must be a non-empty path without NUL bytes");
        }
        return $path;
    }

    private static function checkExecutable(string $path, string $source): string
    {
        if (!is_file($path) || !is_executable($path)) {
            throw new Exception(
                'command_not_found',
                "tokenlock: the tokenlock command $path (from $source) "
                . (file_exists($path) ? 'is not an executable file' : 'does not exist'),
                127
            );
        }
        return $path;
    }

    private static function home(): string
    {
        $home = getenv('HOME');
        if ($home !== false && $home !== '') {
            return $home;
        }
        // A CGI program is seldom given HOME.
        if (function_exists('posix_getpwuid') && function_exists('posix_geteuid')) {
            $entry = posix_getpwuid(posix_geteuid());
            if (is_array($entry) && ($entry['dir'] ?? '') !== '') {
                return $entry['dir'];
            }
        }
        return '';
    }
}

/**
 * The rename-token lock of docs/protocol.md, in PHP: no process is started
 * and no extension is needed (posix is used when loaded).
 *
 * Owner marks are made where docs/protocol.md asks for them (GlusterFS,
 * unknown FUSE filesystems, a filesystem that cannot be told): PHP has no
 * statfs, so the type comes from /proc/self/mountinfo, and a lock whose
 * mount table is out of reach (open_basedir) gets marks, as the library
 * gives them to a filesystem it cannot ask.
 *
 * What it leaves out, and why: the wait board (a waiter polls with
 * backoff), and opening the lock directory by descriptor (PHP has no
 * renameat: every step goes through the path, which is judged with lstat
 * first).
 *
 * @internal
 */
final class Native
{
    public const FREE = 'lockfile';
    public const PREFIX = 'lockfile.';
    /** Microseconds; the protocol's bound on any lease (protocol_max_lease). */
    public const MAX_LEASE_US = 86400000000;
    public const SKEW_US = 1000000;
    public const DEFAULT_LEASE = 3600.0;
    public const DIR_MODE = 0755;
    private const BACKOFF_MIN_US = 100;
    private const BACKOFF_MAX_US = 50000;
    /** A waiter lists the lock directory at most this often (and on its last round). */
    private const LOOK_EVERY_NS = 10000000;

    /** @var array{pid: int, start: string, tag: string, proc: bool}|null */
    private static ?array $identity = null;
    private static bool $noticeGiven = false;
    private static ?bool $hidepid = null;

    /** Linux's errno for the texts PHP's warnings carry (strerror). */
    private const ERRNO = [
        'Operation not permitted' => 1, 'No such file or directory' => 2, 'Input/output error' => 5,
        'Permission denied' => 13, 'Device or resource busy' => 16, 'File exists' => 17,
        'Invalid cross-device link' => 18, 'Not a directory' => 20, 'Is a directory' => 21,
        'Invalid argument' => 22, 'No space left on device' => 28, 'Read-only file system' => 30,
        'File name too long' => 36, 'Directory not empty' => 39, 'Too many levels of symbolic links' => 40,
        'Disk quota exceeded' => 122, 'Stale file handle' => 116, 'File too large' => 27,
        'Value too large for defined data type' => 75,
    ];

    public static function pid(): int
    {
        return function_exists('posix_getpid') ? posix_getpid() : getmypid();
    }

    /**
     * The pid identity() last read, which made the last token: right after
     * a call that made one it is this process's, without a system call.
     */
    public static function tokenPid(): int
    {
        return self::$identity['pid'] ?? self::pid();
    }

    /**
     * pid, start time and host tag, as posix_os.cpp makes them; read again
     * in a forked child, whose pid differs.
     *
     * @return array{pid: int, start: string, tag: string, proc: bool}
     */
    public static function identity(): array
    {
        $pid = self::pid();
        if (self::$identity !== null && self::$identity['pid'] === $pid) {
            return self::$identity;
        }
        $stat = self::procStat($pid);
        $proc = $stat !== null;
        $name = (string) gethostname();
        // Without ctype, which PHP may be built without.
        $host = (string) preg_replace('/[^A-Za-z0-9-]/', '_', substr($name, 0, 32));
        if ($host === '') {
            $host = 'host';
        }
        if ($proc) {
            $boot = @file_get_contents('/proc/sys/kernel/random/boot_id');
            $boot = $boot === false ? '' : strtok($boot, "\n");
            $ns = @readlink('/proc/self/ns/pid');
            [$hi, $lo] = self::fnv1a($host, self::fnv1a($ns === false ? '' : $ns, self::fnv1a($boot === false ? '' : $boot)));
            $tag = sprintf('%s-%08x', $host, $hi ^ $lo);
        } else {
            // Without /proc this process cannot tell its boot or pid
            // namespace apart, so its tag must never equal a tag of one
            // that can: owners are then judged by their lease only.
            $tag = sprintf('%s-%s', $host, bin2hex(random_bytes(4)));
            self::notice();
        }
        return self::$identity = ['pid' => $pid, 'start' => $proc ? $stat[1] : '0', 'tag' => $tag, 'proc' => $proc];
    }

    private static function notice(): void
    {
        if (self::$noticeGiven) {
            return;
        }
        self::$noticeGiven = true;
        $why = ini_get('open_basedir') ? 'open_basedir (' . ini_get('open_basedir') . ') excludes it' : 'it is not mounted or not readable';
        trigger_error("Tokenlock: /proc cannot be read ($why): a lock whose owner died is taken over only when its lease ends; add /proc to open_basedir to have dead owners detected at once", E_USER_NOTICE);
    }

    /**
     * FNV-1a, 64 bits, in two 32-bit halves: PHP's integers overflow to
     * floats instead of wrapping.
     *
     * @param array{0: int, 1: int} $h
     * @return array{0: int, 1: int}
     */
    public static function fnv1a(string $s, array $h = [0xcbf29ce4, 0x84222325]): array
    {
        [$hi, $lo] = $h;
        for ($i = 0, $n = strlen($s); $i < $n; ++$i) {
            $lo ^= ord($s[$i]);
            // prime = 2^40 + 0x1b3
            $l = $lo * 0x1b3;
            $hi = ($hi * 0x1b3 + ($l >> 32) + ($lo << 8)) & 0xffffffff;
            $lo = $l & 0xffffffff;
        }
        return [$hi, $lo];
    }

    /**
     * State and start time (field 22) of /proc/PID/stat, or null when it
     * cannot be read.
     *
     * @return array{0: string, 1: string}|null
     */
    public static function procStat(int $pid): ?array
    {
        $text = @file_get_contents("/proc/$pid/stat");
        if ($text === false || $text === '') {
            return null;
        }
        // comm may hold spaces and parentheses: count from the last ')'.
        $close = strrpos($text, ')');
        if ($close === false) {
            return null;
        }
        $fields = preg_split('/ +/', trim(substr($text, $close + 1)));
        if (count($fields) < 20 || !preg_match('/\A[0-9]+\z/', $fields[19])) {
            return null;
        }
        return [$fields[0][0], $fields[19]];
    }

    public static function nowUs(): int
    {
        [$frac, $secs] = explode(' ', microtime());
        return (int) $secs * 1000000 + (int) substr($frac, 2, 6);
    }

    /** A fresh token of this process for a lease ending at $expiry. */
    public static function token(int $expiry): string
    {
        $me = self::identity();
        return self::PREFIX . $expiry . '.' . $me['tag'] . '.' . $me['pid'] . '.' . $me['start'] . '.' . bin2hex(random_bytes(8));
    }

    /**
     * What a name in a lock directory is: 'free', 'held' (with its fields),
     * 'legacy', 'malformed' or 'other', as token_name.cpp classifies it.
     *
     * @return array{0: string, 1?: array{expiry: int, tag: string, pid: int, start: string, legacy: bool}}
     */
    public static function classify(string $name): array
    {
        if ($name === self::FREE) {
            return ['free'];
        }
        if (preg_match('/\Alockfile([0-9].*)\z/s', $name, $m)) {
            if (!preg_match('/\A[1-9][0-9]{0,11}\z/', $m[1])) {
                return ['other'];
            }
            return ['legacy', ['expiry' => (int) $m[1] * 1000000, 'tag' => '', 'pid' => 0, 'start' => '0', 'legacy' => true]];
        }
        if (!str_starts_with($name, self::PREFIX)) {
            return ['other'];
        }
        if (!preg_match('/\Alockfile\.(0|[1-9][0-9]{0,18})\.([A-Za-z0-9_-]{1,32}-[0-9a-f]{8})\.([1-9][0-9]{0,9})\.(0|[1-9][0-9]{0,19})\.[0-9a-f]{16}\z/', $name, $m)
            || (strlen($m[1]) === 19 && strcmp($m[1], '9223372036854775807') > 0)
            || (strlen($m[3]) === 10 && strcmp($m[3], '2147483647') > 0)
            || (strlen($m[4]) === 20 && strcmp($m[4], '18446744073709551615') > 0)) {
            return ['malformed'];
        }
        return ['held', ['expiry' => (int) $m[1], 'tag' => $m[2], 'pid' => (int) $m[3], 'start' => $m[4], 'legacy' => false]];
    }

    /**
     * Whether a held token is stale, and why (lock_directory.cpp, judge).
     *
     * @param array{expiry: int, tag: string, pid: int, start: string, legacy: bool} $t
     * @return array{0: bool, 1: string}
     */
    public static function judge(string $name, array $t): array
    {
        $now = self::nowUs();
        if ($t['legacy']) {
            $timeout = (int) round((Command::$legacyTimeout ?? 60.0) * 1000000);
            $ends = $t['expiry'] + $timeout;
            $who = "a script using the legacy rename lock ($name)";
            if ($ends - $now > self::MAX_LEASE_US + self::SKEW_US) {
                return [true, "legacy token of $who is dated implausibly far in the future: treated as stale"];
            }
            if ($now > $ends + self::SKEW_US) {
                return [true, "legacy token of $who is older than the legacy timeout"];
            }
            return [false, "held by $who until " . self::utc($ends)];
        }
        $me = self::identity();
        $same = $me['proc'] && $t['tag'] === $me['tag'];
        $who = "pid {$t['pid']} " . ($same ? 'on this host' : "on host {$t['tag']}");
        if ($t['expiry'] - $now > self::MAX_LEASE_US + self::SKEW_US) {
            return [true, "lease of $who ends implausibly far in the future (" . self::utc($t['expiry']) . '): treated as stale'];
        }
        if ($now > $t['expiry'] + self::SKEW_US) {
            return [true, "lease of $who ended at " . self::utc($t['expiry'])];
        }
        $until = "held by $who until " . self::utc($t['expiry']);
        if (!$same) {
            return [false, $until];
        }
        $gone = self::ownerGone($t);
        return $gone === null ? [false, $until] : [true, "owner pid {$t['pid']} on this host $gone"];
    }

    /**
     * Why the owner of a token of this host is provably gone, or null.
     * Anything uncertain (EPERM, an unreadable /proc entry) counts as alive:
     * the next look, or the lease, settles it.
     *
     * @param array{pid: int, start: string} $t
     */
    public static function ownerGone(array $t): ?string
    {
        $pid = $t['pid'];
        if (function_exists('posix_kill')) {
            if (!@posix_kill($pid, 0) && posix_get_last_error() === 3) {
                return 'no longer exists';
            }
        } elseif (!file_exists("/proc/$pid") && !self::hidepid()) {
            // Without kill(2), a missing /proc entry is the proof, unless
            // /proc hides other users' processes.
            return 'no longer exists';
        }
        $st = self::procStat($pid);
        if ($st === null) {
            return null;
        }
        if ($st[0] === 'Z' || $st[0] === 'X') {
            return 'has exited (zombie)';
        }
        if ($t['start'] !== '0' && $st[1] !== $t['start']) {
            return "is gone; the pid now belongs to another process (start time {$st[1]}, token says {$t['start']})";
        }
        return null;
    }

    private static function hidepid(): bool
    {
        if (self::$hidepid === null) {
            $mounts = (string) @file_get_contents('/proc/self/mounts');
            self::$hidepid = $mounts === '' || (bool) preg_match('/^\S+ \/proc proc \S*hidepid=(?!0[ ,]|off[ ,])/m', $mounts);
        }
        return self::$hidepid;
    }

    public static function utc(int $us): string
    {
        return gmdate('Y-m-d\TH:i:s', intdiv($us, 1000000)) . sprintf('.%06dZ', $us % 1000000) ;
    }

    /** The errno in the last PHP warning (0 when it names none). */
    public static function lastErrno(): int
    {
        $msg = error_get_last()['message'] ?? '';
        foreach (self::ERRNO as $text => $errno) {
            if (str_ends_with($msg, $text)) {
                return $errno;
            }
        }
        return 0;
    }

    public static function cause(int $errno): string
    {
        $text = array_search($errno, self::ERRNO, true);
        return $text === false ? (error_get_last()['message'] ?? 'unknown error') : $text;
    }

    /** rename(2): 0 or the errno. */
    public static function rename(string $from, string $to): int
    {
        error_clear_last();
        if (@rename($from, $to)) {
            return 0;
        }
        return self::lastErrno() ?: 5;
    }

    /** A `system` failure with the command's status for that errno. */
    public static function systemError(string $step, string $path, string $what, int $errno, string $fix = ''): Exception
    {
        $status = match ($errno) {
            2 => 66,
            1, 13 => 77,
            20, 21, 27, 28, 30, 36, 122 => 73,
            22, 40, 75 => 65,
            5 => 74,
            default => 71,
        };
        if ($fix === '') {
            $fix = match ($errno) {
                1, 13 => 'this user needs write and search permission on ' . $path,
                28, 122 => 'free some space or raise the quota',
                30 => 'put the lock on a writable filesystem',
                default => '',
            };
        }
        return new Exception('system', "tokenlock: $step $path: $what: " . self::cause($errno) . ($fix === '' ? '' : "; $fix"), $status, [], null, $errno);
    }

    /** The lock directory path, checked as make_lock_paths does. */
    public static function lockPath(string $dir): string
    {
        $s = Command::path($dir, 'lock directory');
        $s = strlen($s) > 1 ? rtrim($s, '/') : $s;
        if ($s === '' || $s === '/' || $s === '.' || $s === '..') {
            throw new Exception('bad_argument', "tokenlock: \"$dir\" cannot be a lock directory: the lock directory is created and replaced by rename; name a directory of its own, such as data.lock", 64);
        }
        return $s;
    }

    /** Lease seconds as microseconds, within the protocol's bounds. */
    public static function leaseUs(?float $lease): int
    {
        $lease ??= self::DEFAULT_LEASE;
        if ($lease < 0.001 || $lease * 1000000 > self::MAX_LEASE_US) {
            throw new Exception('bad_argument', 'tokenlock: the lease must be from 0.001 to 86400 seconds (got ' . Command::formatSeconds($lease) . ')', 64);
        }
        return (int) round($lease * 1000000);
    }

    /**
     * Per lock directory: the identity and group choice it was last judged
     * with, and the group chosen for it (null: none), which applies to its
     * token and workspace. A lock directory is judged again only when an
     * lstat() shows it changed, so that the fast path costs one lstat.
     *
     * @var array<string, array{0: string, 1: ?int}>
     */
    private static array $judged = [];

    /**
     * Refuses a lock directory another user could change (trust.cpp). A
     * missing one is fine (it is created); returns whether it exists.
     * $named is the group named for sharing (group()), or null.
     */
    public static function checkTrusted(string $dir, ?int $named = null, string $step = 'acquire', string $what = 'the lock directory'): bool
    {
        clearstatcache(true, $dir);
        $st = @lstat($dir);
        if ($st === false) {
            // Before anything is made: who we are decides what we trust.
            self::euid($step, $dir);
            return false;
        }
        $sharing = (self::dirMode($step) & 020) !== 0;
        $key = "{$st['dev']}:{$st['ino']}:{$st['mode']}:{$st['uid']}:{$st['gid']}:$named:$sharing";
        if ((self::$judged[$dir][0] ?? null) === $key) {
            return true;
        }
        $type = $st['mode'] & 0170000;
        // As the library, which opens it with O_DIRECTORY|O_NOFOLLOW: a link
        // is refused as untrusted, anything else that is not a directory
        // is ENOTDIR.
        if ($type !== 0040000 && $type !== 0120000) {
            throw self::systemError($step, $dir, "cannot open $what", 20, "remove it, or name a directory");
        }
        $euid = self::euid($step, $dir);
        // The group of a lock directory of our own that we made shared.
        $chosen = $named ?? (($type === 0040000 && $st['uid'] === $euid && $sharing) ? $st['gid'] : null);
        $why = $type !== 0040000 ? 'it is not a directory; remove it' : self::distrust($dir, $st, $euid, $chosen, $named !== null);
        if ($why !== '') {
            throw self::untrusted($step, $dir, $what, $st, $euid, $why);
        }
        self::$judged[$dir] = [$key, $chosen];
        return true;
    }

    /**
     * Refuses an entry of lock directory DIR (its token, the workspace `w`)
     * that another user could change: trusted by the group chosen when DIR
     * was judged by checkTrusted().
     */
    public static function checkInside(string $dir, string $path, string $step, string $what): void
    {
        clearstatcache(true, $path);
        $st = @lstat($path);
        if ($st === false) {
            throw self::systemError($step, $path, "cannot look at $what", self::lastErrno() ?: 2);
        }
        $euid = self::euid($step, $path);
        $why = ($st['mode'] & 0170000) !== 0040000 ? 'it is not a directory; remove it'
            : self::distrust($path, $st, $euid, self::$judged[$dir][1] ?? null, true);
        if ($why !== '') {
            throw self::untrusted($step, $path, $what, $st, $euid, $why);
        }
    }

    /** The group chosen for sharing when DIR was last judged, or null. */
    public static function chosenGroup(string $dir): ?int
    {
        return self::$judged[$dir][1] ?? null;
    }

    /** @param array{mode: int, uid: int} $st */
    private static function untrusted(string $step, string $path, string $what, array $st, int $euid, string $why): Exception
    {
        return new Exception('untrusted', sprintf('tokenlock: %s %s: refusing %s (owner uid %d, mode %04o; this process runs as uid %d): another user could plant or swap entries in it, and nothing in it was touched; %s',
            $step, $path, $what, $st['uid'], $st['mode'] & 07777, $euid, $why), 77);
    }

    /**
     * Why a directory another user could change is not trusted (trust.cpp),
     * or ''. Only the one group chosen for sharing is trusted, never every
     * group this user happens to be in (many hosts put everyone in
     * `users`): a directory of ours or root's may be writable by that group
     * only, and one of another user's must be in that group, which for a
     * lock directory itself must be a named one ($named).
     *
     * @param array{mode: int, uid: int, gid: int} $st
     */
    private static function distrust(string $dir, array $st, int $euid, ?int $chosen, bool $named): string
    {
        $mode = $st['mode'] & 07777;
        if ($mode & 002) {
            return sprintf('it is writable by every user (mode %04o); run chmod o-w %s if its contents are yours, or remove it; share it through one group instead: name the group (the group option or TOKENLOCK_GROUP=%s)',
                $mode, $dir, self::groupName($st['gid']));
        }
        if ($st['uid'] === $euid || $st['uid'] === 0) {
            if (($mode & 020) && $st['gid'] !== $chosen) {
                $name = self::groupName($st['gid']);
                return sprintf('it is writable by group %s (mode %04o), which is not the group chosen for sharing; run chmod g-w %s if the group is not meant to share it, or name the group: the group option or TOKENLOCK_GROUP=%s', $name, $mode, $dir, $name);
            }
            return '';
        }
        if ($st['gid'] === $chosen && $named) {
            return '';
        }
        return sprintf('it belongs to uid %d (mode %04o), who could change it; have that user (or root) remove it and it is created again on next use, or name the group both share (the group option or TOKENLOCK_GROUP=%s), if that user shares it on purpose',
            $st['uid'], $mode, self::groupName($st['gid']));
    }

    /** A group's name for messages, else its gid. */
    private static function groupName(int $gid): string
    {
        $entry = function_exists('posix_getgrgid') ? @posix_getgrgid($gid) : false;
        return is_array($entry) && isset($entry['name']) ? $entry['name'] : (string) $gid;
    }

    /** @var array<string, int> what TOKENLOCK_DIR_MODE said => its mode */
    private static array $dirModes = [];

    /**
     * The mode of the lock directories and workspaces this process creates:
     * TOKENLOCK_DIR_MODE, as the command reads it, else 0755. With group
     * write (0775, 0770) locks are shared with a group.
     */
    public static function dirMode(string $step = 'acquire'): int
    {
        $text = getenv('TOKENLOCK_DIR_MODE');
        if ($text === false || $text === '') {
            return self::DIR_MODE;
        }
        return self::$dirModes[$text] ??= self::parseDirMode($text, $step);
    }

    private static function parseDirMode(string $text, string $step): int
    {
        if (!preg_match('/\A[0-7]{1,5}\z/', $text) || octdec($text) > 07777) {
            throw new Exception('bad_argument', "tokenlock: $step: TOKENLOCK_DIR_MODE takes an octal mode such as 0775, not \"$text\"", 64);
        }
        $mode = (int) octdec($text);
        $problem = ($mode & 0700) !== 0700 ? 'the owner needs read, write and search permission (0700) on a lock directory'
            : (($mode & 0002) ? 'a lock directory writable by others is refused by every process that uses it (docs/security.md): share it with a group instead, with 0775 or 0770 and a common group'
            : (($mode & 01000) ? 'in a sticky lock directory only a token\'s owner may rename it, so users lock each other out' : ''));
        if ($problem !== '') {
            throw new Exception('bad_argument', "tokenlock: $step: TOKENLOCK_DIR_MODE $text: $problem", 64);
        }
        return $mode;
    }

    /** @var array<string, int> what named a group => its gid, membership checked */
    private static array $groups = [];

    /**
     * The group named for sharing: $option (a name or a decimal gid), else
     * TOKENLOCK_GROUP, else null. This user must be a member of it.
     *
     * @throws Exception `bad_argument` for an unknown group or one this
     *         user is not in
     */
    public static function group(mixed $option, string $step = 'acquire'): ?int
    {
        if ($option === null) {
            $option = getenv('TOKENLOCK_GROUP');
            if ($option === false || $option === '') {
                return null;
            }
        }
        if (!is_string($option) && !is_int($option)) {
            throw new \InvalidArgumentException('Tokenlock: the group option takes a group name or a decimal gid');
        }
        $text = (string) $option;
        return self::$groups[$text] ??= self::resolveGroup($text, $step);
    }

    private static function resolveGroup(string $text, string $step): int
    {
        $shown = addcslashes($text, "\0..\37\177..\377");
        if (preg_match('/\A[0-9]{1,10}\z/', $text)) {
            $gid = (int) $text;
        } elseif (function_exists('posix_getgrnam')) {
            $entry = @posix_getgrnam($text);
            $gid = is_array($entry) ? $entry['gid'] : null;
        } else {
            $gid = null;
            foreach (@file('/etc/group', FILE_IGNORE_NEW_LINES) ?: [] as $line) {
                $f = explode(':', $line);
                if (count($f) >= 3 && $f[0] === $text && preg_match('/\A[0-9]{1,10}\z/', $f[2])) {
                    $gid = (int) $f[2];
                }
            }
        }
        if ($gid === null) {
            throw new Exception('bad_argument', "tokenlock: $step: the group \"$shown\" named for sharing does not exist (or cannot be looked up here: name it by its decimal gid)", 64);
        }
        $member = self::inGroup($gid);
        if ($member !== true) {
            throw new Exception('bad_argument', "tokenlock: $step: the group \"$shown\" named for sharing (gid $gid) " . ($member === false
                ? 'is not one of this user\'s groups; name a group this user is in, or add the user to it'
                : 'cannot be checked: this process cannot learn its groups (posix_getgroups() is disabled and /proc/self/status cannot be read); enable the posix extension or allow /proc in open_basedir'), 64);
        }
        return $gid;
    }

    /** Whether GID is this process's effective group or one of its groups; null when it cannot tell. */
    private static function inGroup(int $gid): ?bool
    {
        if (function_exists('posix_getegid') && function_exists('posix_getgroups')) {
            return $gid === posix_getegid() || in_array($gid, posix_getgroups() ?: [], true);
        }
        // Without posix: the Gid and Groups lines of /proc/self/status.
        $status = (string) @file_get_contents('/proc/self/status');
        if (!preg_match('/^Gid:\s+\d+\s+(\d+)/m', $status, $g)) {
            return null;
        }
        $groups = preg_match('/^Groups:([ \t\d]*)$/m', $status, $m) ? preg_split('/\s+/', trim($m[1])) : [];
        return in_array((string) $gid, array_merge([$g[1]], $groups), true);
    }

    /** The effective uid found without posix, once per process. */
    private static ?int $euidSeen = null;

    /**
     * The effective uid. Without posix_geteuid(), the Uid line of
     * /proc/self/status, else the owner of a temporary file this process
     * makes (a new file belongs to its creator's effective uid). Never a
     * guess: who we are decides what is trusted.
     *
     * @throws Exception `system` when none of these can be had
     */
    public static function euid(string $step = 'acquire', string $path = ''): int
    {
        if (function_exists('posix_geteuid')) {
            return posix_geteuid();
        }
        if (self::$euidSeen !== null) {
            return self::$euidSeen;
        }
        $status = (string) @file_get_contents('/proc/self/status');
        if (preg_match('/^Uid:\s+\d+\s+(\d+)/m', $status, $m)) {
            return self::$euidSeen = (int) $m[1];
        }
        $h = @tmpfile();
        $st = $h === false ? false : fstat($h);
        if ($h !== false) {
            fclose($h);
        }
        if ($st !== false) {
            return self::$euidSeen = $st['uid'];
        }
        throw new Exception('system', "tokenlock: $step" . ($path === '' ? '' : " $path") . ': cannot tell which user this process runs as, which decides whom it trusts: posix_geteuid() is disabled or missing, /proc/self/status cannot be read and no temporary file could be made; nothing was touched: enable the posix extension, or allow /proc or sys_temp_dir in open_basedir', 71, [], null, 13);
    }

    /**
     * Acquires DIR: returns the token. $wait null waits without limit.
     *
     * @throws BusyException|TimeoutException|Exception
     */
    public static function acquire(string $dir, ?float $wait, int $leaseUs, ?int $named = null): string
    {
        $deadline = $wait === null ? null : hrtime(true) + (int) ($wait * 1e9);
        $exists = self::checkTrusted($dir, $named);
        $delay = self::BACKOFF_MIN_US;
        $reason = '';
        // Tokens a rename made ours that no owner mark confirmed: should one
        // show up under our name again, it is ours to confirm, not a live
        // holder's to wait for.
        $givenUp = [];
        $lastLook = 0;
        for ($round = 0; ; ++$round) {
            $now = hrtime(true);
            $final = $deadline !== null && $now >= $deadline;
            $look = $round === 0 || $final || $now - $lastLook >= self::LOOK_EVERY_NS;
            if ($look) {
                $lastLook = $now;
            }
            $got = self::round($dir, $leaseUs, $named, $exists, $givenUp, $reason, $look, $round === 0);
            if ($got === true) {
                continue;
            }
            if (is_string($got)) {
                return $got;
            }
            if ($final) {
                if ($wait <= 0) {
                    throw new BusyException('busy', "tokenlock: acquire $dir: the lock is busy: $reason", 1);
                }
                throw new TimeoutException('timed_out', "tokenlock: acquire $dir: timed out after " . Command::formatSeconds($wait) . " s: $reason", 1);
            }
            // Leftovers of killed creators: only occasionally, as a waiter has time to spare.
            if ($look && random_int(0, 31) === 0) {
                self::sweep($dir, $leaseUs);
            }
            $sleep = (int) ($delay * (0.75 + 0.5 * mt_rand() / mt_getrandmax()));
            if ($deadline !== null) {
                $sleep = max(0, min($sleep, intdiv($deadline - hrtime(true), 1000) + 1));
            }
            usleep($sleep);
            $delay = min(2 * $delay, self::BACKOFF_MAX_US);
        }
    }

    /**
     * One round of the protocol: the token (acquired), true (look again at
     * once) or false (busy: $reason says why). After the first round a
     * lookup, which takes no lock, tells whether a rename, which locks the
     * directory, can succeed; the directory is listed only when $look.
     *
     * @param array<string, bool> $givenUp
     */
    private static function round(string $dir, int $leaseUs, ?int $named, bool &$exists, array &$givenUp, string &$reason, bool $look, bool $first): string|bool
    {
        clearstatcache(true, "$dir/" . self::FREE);
        $try = $exists && ($first || @lstat("$dir/" . self::FREE) !== false);
        // Only a rename needs a token: a waiter's round mostly has none to try.
        $mine = $try ? self::token(self::nowUs() + $leaseUs) : '';
        $errno = $try ? self::rename("$dir/" . self::FREE, "$dir/$mine") : 2;
        if ($errno !== 0 && $errno !== 2) {
            throw self::systemError('acquire', $dir, 'cannot rename the free token ' . self::FREE . " to $mine", $errno, $errno === 1 ? self::stickyFix($dir) : '');
        }
        // ENOENT: an NFS client may retransmit a rename whose reply was lost.
        if ($try) {
            clearstatcache(true, "$dir/$mine");
        }
        if ($errno === 0 || ($try && @lstat("$dir/$mine") !== false)) {
            return self::finish($dir, $mine, null, $leaseUs, $givenUp, $reason) ? $mine : false;
        }
        if (!$look) {
            return false;
        }
        $seen = self::look($dir);
        $state = $seen[0];
        if (!$exists && $state !== 'missing') {
            // Made by another process since the first look: judge it now.
            $exists = self::checkTrusted($dir, $named);
        }
        if ($state === 'free') {
            return true;
        }
        if ($state === 'missing') {
            self::create($dir, $leaseUs, $named);
            $exists = self::checkTrusted($dir, $named);
            return true;
        }
        // One held token: take it over if stale, else wait.
        $found = $seen[1];
        if (isset($givenUp[$found[0]])) {
            return self::finish($dir, $found[0], null, $leaseUs, $givenUp, $reason) ? $found[0] : false;
        }
        [$stale, $reason] = self::judge($found[0], $found[1]);
        if (!$stale) {
            return false;
        }
        // What the rename takes over, to know it again before clearing it.
        clearstatcache(true, "$dir/{$found[0]}");
        $taken = @lstat("$dir/{$found[0]}");
        $mine = self::token(self::nowUs() + $leaseUs);
        $errno = self::rename("$dir/{$found[0]}", "$dir/$mine");
        if ($errno === 0) {
            return self::finish($dir, $mine, $found[0], $leaseUs, $givenUp, $reason, $taken ?: null) ? $mine : false;
        }
        if ($errno !== 2) {
            throw self::systemError('acquire', $dir, "cannot take over the stale token {$found[0]} ($reason)", $errno);
        }
        return true;  // another taker won, or the owner refreshed or released: look again
    }

    /** The fix for EPERM on a rename: a sticky lock directory lets only the token's owner rename it. */
    private static function stickyFix(string $dir): string
    {
        clearstatcache();
        $d = @stat($dir);
        $t = @lstat("$dir/" . self::FREE);
        if ($d !== false && ($d['mode'] & 01000) && $t !== false) {
            return sprintf('lock directory %s is sticky and the token belongs to uid %d (we are uid %d); use a non-sticky directory shared by the users that lock', $dir, $t['uid'], self::euid());
        }
        return 'the filesystem or a file attribute forbids this rename; a sticky directory only lets the token\'s owner rename it';
    }

    /**
     * A rename made TOKEN ours (taking over $takenFrom, if given). Where a
     * rename can move a token through a name it no longer has, the owner
     * mark confirms it first; false when it does not ($reason says why).
     *
     * @param array<string, bool> $givenUp
     */
    private static function finish(string $dir, string $token, ?string $takenFrom, int $leaseUs, array &$givenUp, string &$reason, ?array $taken = null): bool
    {
        $marks = self::needsMarks($dir);
        if ($marks) {
            [$outcome, $holder] = self::markAndCheck($dir, $token, $takenFrom);
            if ($outcome !== 'held') {
                $givenUp[$token] = true;
                $reason = $holder ?? 'taken by another client at the same moment';
                return false;
            }
        }
        if ($takenFrom !== null) {
            if ($taken !== null) {
                self::clearWorkspace($dir, $token, $taken, $marks);
            }
            self::sweep($dir, $leaseUs);
        }
        return true;
    }

    /**
     * The tokens of DIR: ['free'], ['held', [name, fields]] or ['missing']
     * (no directory, or an empty one). No token beside other entries, two
     * tokens or a malformed one fail, once a second listing agrees.
     *
     * @return array{0: string, 1?: array{0: string, 1: array{expiry: int, tag: string, pid: int, start: string, legacy: bool}}}
     */
    public static function look(string $dir, string $step = 'acquire'): array
    {
        for ($attempt = 0; ; ++$attempt) {
            error_clear_last();
            $names = @scandir($dir);
            if ($names === false) {
                $errno = self::lastErrno();
                if ($errno === 2) {
                    return ['missing'];
                }
                throw self::systemError($step, $dir, 'cannot list the lock directory', $errno ?: 5);
            }
            $names = array_values(array_diff($names, ['.', '..']));
            $tokens = [];
            $malformed = [];
            foreach ($names as $name) {
                $c = self::classify($name);
                if ($c[0] === 'free') {
                    return ['free'];
                } elseif ($c[0] === 'held' || $c[0] === 'legacy') {
                    $tokens[] = [$name, $c[1]];
                } elseif ($c[0] === 'malformed') {
                    $malformed[] = $name;
                }
            }
            if (!$malformed && count($tokens) === 1) {
                return ['held', $tokens[0]];
            }
            if (!$names) {
                return ['missing'];
            }
            // A listing during a rename may miss a name or show it twice.
            if ($attempt === 0) {
                usleep(2000);
                continue;
            }
            if ($malformed) {
                throw new Exception('lock_corrupt', "tokenlock: $step $dir: the entry " . addcslashes($malformed[0], "\0..\37\177..\377") . ' starts like a token but is not one; it was left alone: remove it by hand once no process uses the lock', 69);
            }
            if ($tokens) {
                throw new Exception('lock_corrupt', "tokenlock: $step $dir: it holds " . count($tokens) . ' tokens (' . implode(', ', array_column($tokens, 0)) . '): something outside the protocol copied one; nothing was changed: remove all but one by hand once no process uses the lock', 69);
            }
            throw new Exception('token_missing', "tokenlock: $step $dir: it holds no token, only other entries (" . implode(', ', array_map(fn ($n) => addcslashes($n, "\0..\37\177..\377"), $names)) . '); nothing was changed: remove the directory once no process uses it, and it is created again', 69);
        }
    }

    /**
     * Creates DIR by renaming a populated temporary directory onto its
     * name, so that concurrent creators cannot make two tokens.
     */
    private static function create(string $dir, int $leaseUs, ?int $named): void
    {
        $slash = strrpos($dir, '/');
        $parent = $slash === false ? '.' : ($slash === 0 ? '/' : substr($dir, 0, $slash));
        $name = $slash === false ? $dir : substr($dir, $slash + 1);
        $owned = substr(self::token(self::nowUs() + $leaseUs), strlen(self::PREFIX));
        $initName = strlen("$name.init.$owned") <= 255 ? "$name.init.$owned" : "$name.init." . bin2hex(random_bytes(8));
        $init = "$parent/$initName";
        // A named group shares it: its group, and group write.
        $mode = self::dirMode() | ($named === null ? 0 : 0070);
        error_clear_last();
        if (!@mkdir($init, 0700)) {
            $errno = self::lastErrno() ?: 5;
            throw self::systemError('create', $dir, "cannot create the temporary directory $init", $errno,
                $errno === 2 ? 'the parent directory of the lock directory must exist' : '');
        }
        // chmod after mkdir, so that the umask cannot narrow the mode; the
        // group first, as chgrp may clear the setgid bit.
        if ($named !== null) {
            @chgrp($init, $named);
        }
        @chmod($init, $mode);
        error_clear_last();
        if (!@mkdir("$init/" . self::FREE, 0700)) {
            $errno = self::lastErrno() ?: 5;
            @rmdir($init);
            throw self::systemError('create', $dir, "cannot create the token $init/" . self::FREE, $errno);
        }
        if ($named !== null) {
            @chgrp("$init/" . self::FREE, $named);
        }
        @chmod("$init/" . self::FREE, $mode);
        $errno = self::syncDirectory($init);
        if ($errno !== 0) {
            @rmdir("$init/" . self::FREE);
            @rmdir($init);
            throw self::systemError('create', $dir, "cannot sync $init", $errno);
        }
        $errno = self::rename($init, $dir);
        if ($errno === 0) {
            // Not an error of the lock if this fails: the directory works,
            // and a crash that undoes it is repaired by the next acquire.
            self::syncDirectory($parent);
            self::sweep($dir, $leaseUs);
            return;
        }
        @rmdir("$init/" . self::FREE);
        @rmdir($init);
        clearstatcache(true, $dir);
        // ENOTEMPTY, EEXIST: another creator won. sshfs answers EPERM and
        // EACCES for the same race; an existing DIR tells them apart.
        if ($errno === 39 || $errno === 17 || (($errno === 1 || $errno === 13) && @lstat($dir) !== false) || $errno === 2) {
            return;
        }
        throw self::systemError('create', $dir, "cannot rename $init to the lock directory", $errno);
    }

    /**
     * fsync(2) of a directory: 0 or the errno. PHP 8.0 has no fsync(); the
     * directory then works unflushed, and a crash that undoes it is
     * repaired by the next acquire creating it again.
     */
    private static function syncDirectory(string $path): int
    {
        if (!function_exists('fsync')) {
            return 0;
        }
        error_clear_last();
        $h = @fopen($path, 'r');
        if ($h === false) {
            return self::lastErrno() ?: 5;
        }
        error_clear_last();
        $errno = @fsync($h) ? 0 : (self::lastErrno() ?: 5);
        fclose($h);
        return $errno;
    }

    /**
     * Removes creation leftovers of DIR whose creator died or stalled past
     * its lease: our own directories of the exact form only.
     */
    private static function sweep(string $dir, int $leaseUs): void
    {
        $slash = strrpos($dir, '/');
        $parent = $slash === false ? '.' : ($slash === 0 ? '/' : substr($dir, 0, $slash));
        $prefix = ($slash === false ? $dir : substr($dir, $slash + 1)) . '.init.';
        $names = @scandir($parent);
        if ($names === false) {
            return;
        }
        $euid = self::euid();
        foreach ($names as $n) {
            if (strlen($n) <= strlen($prefix) || !str_starts_with($n, $prefix)) {
                continue;
            }
            $path = "$parent/$n";
            clearstatcache(true, $path);
            $st = @lstat($path);
            if ($st === false || ($st['mode'] & 0170000) !== 0040000 || $st['uid'] !== $euid) {
                continue;
            }
            $rest = substr($n, strlen($prefix));
            $c = self::classify(self::PREFIX . $rest);
            if ($c[0] === 'held') {
                if (!self::judge($n, $c[1])[0]) {
                    continue;
                }
            } elseif (!preg_match('/\A[0-9a-f]{16}\z/', $rest) || $st['mtime'] * 1000000 > self::nowUs() - self::MAX_LEASE_US - self::SKEW_US) {
                continue;
            }
            // By name: had its creator renamed it onto DIR meanwhile, these
            // find nothing under this name.
            @rmdir("$path/" . self::FREE);
            @rmdir($path);
        }
    }

    /**
     * Empties the token TOKEN of DIR, just taken over from a dead owner:
     * what that owner left there (and, in a token others can write, anybody
     * else) goes, and nothing outside it, even while another user renames
     * names on the way. PHP has no openat()/unlinkat(), and any name on a
     * path can be swapped for a link between a check and a use; a working
     * directory cannot: chdir() resolves a name once, and stat('.') then
     * shows whether the directory pinned is the one lstat() judged (a
     * directory, not a link: $taken, what the takeover renamed). Every
     * removal names one entry relative to that pinned directory, never a
     * path through another name. Coming back up, '..' must be the parent
     * judged again. Anything else stops the walk: what is left stays for
     * the next takeover, nothing outside was touched. The working directory
     * is restored after (php-fpm serves its next request in this process).
     * Under ZTS PHP keeps a working directory of its own and expands
     * relative names itself, so nothing pins: the token is left as it is.
     *
     * @param array{dev: int, ino: int, mode: int} $taken
     */
    private static function clearWorkspace(string $dir, string $token, array $taken, bool $keepMarks): void
    {
        // Only where the way back is open: open_basedir may refuse a
        // chdir() to the directory a php-fpm worker started in.
        $cwd = PHP_ZTS ? false : getcwd();
        if ($cwd === false || !@chdir($cwd)) {
            return;
        }
        try {
            if (self::enter("$dir/$token", $taken)) {
                self::clearHere($taken, 0, $keepMarks);
            }
        } finally {
            @chdir($cwd);
        }
    }

    /**
     * chdir() to NAME, and whether the working directory is then the
     * directory $id (from an lstat that showed a directory).
     *
     * @param array{dev: int, ino: int, mode: int} $id
     */
    private static function enter(string $name, array $id): bool
    {
        if (($id['mode'] & 0170000) !== 0040000 || !@chdir($name)) {
            return false;
        }
        clearstatcache();
        $here = @stat('.');
        return $here !== false && $here['dev'] === $id['dev'] && $here['ino'] === $id['ino'];
    }

    /**
     * Empties the working directory, pinned as $id; false when the walk
     * must stop (the working directory is then not known to be $id).
     * Depth-limited: a workspace holds temporary files, not trees.
     *
     * @param array{dev: int, ino: int, mode: int} $id
     */
    private static function clearHere(array $id, int $depth, bool $keepMarks): bool
    {
        $names = @scandir('.', SCANDIR_SORT_NONE);
        foreach ($names ?: [] as $n) {
            // Owner marks were judged one by one; ours stays.
            if ($n === '.' || $n === '..' || ($keepMarks && $depth === 0 && self::tokenOfMark($n) !== null)) {
                continue;
            }
            // Relative names: PHP caches the last stat by its name.
            clearstatcache();
            $st = @lstat($n);
            if ($st === false) {
                continue;
            }
            if (($st['mode'] & 0170000) !== 0040000) {
                @unlink($n);  // a symbolic link itself, never what it names
                continue;
            }
            if ($depth < 8 && @chdir($n)) {
                clearstatcache();
                $here = @stat('.');
                if ($here === false || $here['dev'] !== $st['dev'] || $here['ino'] !== $st['ino']
                    || !self::clearHere($st, $depth + 1, false) || !self::enter('..', $id)) {
                    return false;
                }
            }
            @rmdir($n);
        }
        return true;
    }

    /** Renames TOKEN back to the free token. */
    public static function release(string $dir, string $token): void
    {
        $marked = self::needsMarks($dir);
        $mark = "$dir/$token/" . self::markOf($token);
        // The next holder of the free token would find our mark and step back.
        error_clear_last();
        if ($marked && !@rmdir($mark) && ($errno = self::lastErrno() ?: 5) !== 2) {
            throw self::systemError('release', $dir, "cannot remove our owner mark from $token (the lock is still ours)", $errno);
        }
        // Never retried after ENOENT: on GlusterFS a rename through a stale
        // name can move the token of whoever took ours over.
        $errno = self::rename("$dir/$token", "$dir/" . self::FREE);
        if ($errno === 2) {
            throw new LockLostException('lock_lost', "tokenlock: release $dir: the lock does not hold $token any more: it was taken over (its lease ended, its owner was judged dead, or it was broken), so another process may have held it meanwhile; nothing was changed", 3);
        }
        if ($errno !== 0) {
            // Still ours; held without its mark, another client's rename
            // through a stale name could take it.
            $fix = '';
            error_clear_last();
            if ($marked && !@mkdir($mark, 0700) && self::lastErrno() !== 17) {
                $fix = 'and our owner mark could not be put back: until the release succeeds, another GlusterFS client may take the lock too';
            }
            throw self::systemError('release', $dir, "cannot rename $token to " . self::FREE, $errno, $fix);
        }
    }

    /** Renames TOKEN to the same owner with a new expiry; returns the new name. */
    public static function refresh(string $dir, string $token, int $leaseUs): string
    {
        $owner = substr($token, strpos($token, '.', strlen(self::PREFIX)) + 1);
        $new = self::PREFIX . (self::nowUs() + $leaseUs) . '.' . $owner;
        if ($new === $token) {
            return $token;
        }
        $errno = self::rename("$dir/$token", "$dir/$new");
        clearstatcache(true, "$dir/$new");
        // An NFS client may retransmit a rename whose reply was lost.
        if ($errno === 2 && @lstat("$dir/$new") === false) {
            throw new LockLostException('lock_lost', "tokenlock: refresh $dir: the lock does not hold $token any more: it was taken over (its lease ended, its owner was judged dead, or it was broken); nothing was changed", 3);
        }
        if ($errno !== 0 && $errno !== 2) {
            throw self::systemError('refresh', $dir, "cannot rename $token to $new", $errno);
        }
        // The mark names the current lease: one naming the old lease would
        // look expired to a process judging it after that lease's end.
        if (self::needsMarks($dir)) {
            $errno = self::rename("$dir/$new/" . self::markOf($token), "$dir/$new/" . self::markOf($new));
            error_clear_last();
            if ($errno !== 0 && !($errno === 2 && (@mkdir("$dir/$new/" . self::markOf($new), 0700) || self::lastErrno() === 17))) {
                throw self::systemError('refresh', $dir, "the lease was renewed (the token is now $new), but our owner mark in it could not be renamed to match", $errno ?: 5,
                    'until a refresh succeeds, another GlusterFS client may judge it expired at the old lease\'s end');
            }
        }
        return $new;
    }

    // ---- Owner marks (docs/protocol.md, Owner marks) ---------------------

    /**
     * Filesystems whose renames keep the protocol's property by themselves:
     * local ones (the wait board's allowlist), and network ones whose
     * server renames by name.
     */
    private const NO_MARKS = ['ext2', 'ext3', 'ext4', 'xfs', 'btrfs', 'tmpfs', 'ramfs', 'f2fs', 'overlay', 'zfs', 'reiserfs', 'jfs',
        'bcachefs', 'nilfs2', 'fuse.sshfs', 'fuse.mfs', 'fuse.moosefs', 'nfs', 'nfs4', 'cifs', 'smb3', 'ceph', 'fuse.ceph', 'fuse.ceph-fuse'];

    /**
     * Per lock directory: whether owner marks are made, asked once per
     * process. Tests set an entry to force them.
     *
     * @var array<string, bool>
     */
    public static array $ownerMarks = [];

    /**
     * The type of the filesystem holding PATH, from the mount table by
     * device number, else by the mount point that is the longest prefix of
     * its real path (a btrfs subvolume's device is in no mount); null when
     * it cannot be told (a missing path, a mount table out of reach).
     */
    public static function fsType(string $path, string $table = '/proc/self/mountinfo'): ?string
    {
        clearstatcache(true, $path);
        $st = @stat($path);
        $text = $st === false ? false : @file_get_contents($table);
        if ($text === false) {
            return null;
        }
        $dev = $st['dev'];
        $id = ((($dev >> 8) & 0xfff) | (($dev >> 32) & ~0xfff)) . ':' . (($dev & 0xff) | (($dev >> 12) & ~0xff));
        $mounts = [];
        foreach (explode("\n", $text) as $line) {
            $f = explode(' ', $line);
            $sep = array_search('-', array_slice($f, 6, null, true), true);
            if (count($f) <= 4 || $sep === false || !isset($f[$sep + 1])) {
                continue;
            }
            if ($f[2] === $id) {
                return $f[$sep + 1];
            }
            $point = (string) preg_replace_callback('/\\\\([0-7]{3})/', fn ($m) => chr(octdec($m[1])), $f[4]);
            $mounts[] = [$point, $f[$sep + 1]];
        }
        $real = realpath($path);
        if ($real === false) {
            return null;
        }
        $best = '';
        $type = null;
        foreach ($mounts as [$point, $fs]) {
            if (($real === $point || $point === '/' || str_starts_with($real, "$point/")) && strlen($point) >= strlen($best)) {
                [$best, $type] = [$point, $fs];
            }
        }
        return $type;
    }

    /** Whether acquisitions of DIR make owner marks: unless its filesystem is known not to need them. */
    public static function needsMarks(string $dir): bool
    {
        if (isset(self::$ownerMarks[$dir])) {
            return self::$ownerMarks[$dir];
        }
        // The lock directory may not exist yet; its parent is then asked.
        $slash = strrpos($dir, '/');
        $type = self::fsType($dir) ?? self::fsType($slash === false ? '.' : ($slash === 0 ? '/' : substr($dir, 0, $slash)));
        return self::$ownerMarks[$dir] = $type === null || !in_array($type, self::NO_MARKS, true);
    }

    private static function markOf(string $token): string
    {
        return 'h.' . substr($token, strlen(self::PREFIX));
    }

    /**
     * The held token a mark names, or null when NAME is no mark.
     *
     * @return array{0: string, 1: array{expiry: int, tag: string, pid: int, start: string, legacy: bool}}|null
     */
    private static function tokenOfMark(string $name): ?array
    {
        if (!str_starts_with($name, 'h.')) {
            return null;
        }
        $token = self::PREFIX . substr($name, 2);
        $c = self::classify($token);
        return $c[0] === 'held' ? [$token, $c[1]] : null;
    }

    private static function ownerPart(string $token): string
    {
        return (string) preg_replace('/\Alockfile\.[0-9]+\./', '', $token);
    }

    /**
     * The live marks in a token other than ours, after removing those of
     * the owner taken over from and those of dead or expired owners:
     * ['seen', [token, reason] of the first live one, or null], or ['gone',
     * errno] when the token cannot be listed (errno 0: it is gone).
     *
     * @return array{0: string, 1: array{0: string, 1: string}|int|null}
     */
    private static function judgeMarks(string $path, string $ours, ?string $takenFrom): array
    {
        error_clear_last();
        $names = @scandir($path);
        if ($names === false) {
            $errno = self::lastErrno() ?: 5;
            return ['gone', $errno === 2 || $errno === 116 ? 0 : $errno];
        }
        $takenOwner = $takenFrom === null ? null : self::ownerPart($takenFrom);
        $live = null;
        foreach ($names as $n) {
            $t = $n === $ours ? null : self::tokenOfMark($n);
            if ($t === null) {
                continue;
            }
            [$stale, $reason] = $takenOwner !== null && self::ownerPart($t[0]) === $takenOwner ? [true, ''] : self::judge($t[0], $t[1]);
            if ($stale) {
                @rmdir("$path/$n");
            } elseif ($live === null) {
                $live = [$t[0], $reason];
            }
        }
        return ['seen', $live];
    }

    /**
     * Confirms with an owner mark a token that a rename made ours: 'held';
     * 'yielded' (with the reason) after handing the token back to the live
     * holder whose mark is in it; 'abandoned' when it is gone from under us.
     *
     * @return array{0: string, 1: ?string}
     */
    private static function markAndCheck(string $dir, string $token, ?string $takenFrom): array
    {
        $path = "$dir/$token";
        $mark = self::markOf($token);
        for ($try = 0; $try < 3; ++$try) {
            error_clear_last();
            $ok = @mkdir("$path/$mark", 0700);
            $errno = $ok ? 0 : (self::lastErrno() ?: 5);
            if ($ok || $errno === 17 || $errno !== 116) {
                break;
            }
        }
        if ($errno !== 0 && $errno !== 17) {
            // Gone already: a second rename of the name we took moved it.
            if ($errno === 2 || $errno === 116) {
                return ['abandoned', null];
            }
            self::giveUp($dir, $token, $takenFrom, 'cannot make the owner mark in', $errno);
        }
        [$what, $live] = self::judgeMarks($path, $mark, $takenFrom);
        if ($what === 'gone') {
            if ($live !== 0) {
                self::giveUp($dir, $token, $takenFrom, 'cannot list the owner marks in', $live);
            }
            @rmdir("$path/$mark");
            return ['abandoned', null];
        }
        if ($live === null) {
            return ['held', null];
        }
        // The mark stays inside during the rename: whoever holds the
        // directory through a stale name of its own meanwhile finds it and
        // steps back too.
        $back = "$dir/{$live[0]}";
        if (self::rename($path, $back) === 0) {
            @rmdir("$back/$mark");
        } else {
            @rmdir("$path/$mark");
        }
        return ['yielded', $live[1]];
    }

    /** Fails an acquisition whose mark could not be made or listed. */
    private static function giveUp(string $dir, string $token, ?string $takenFrom, string $what, int $errno): void
    {
        $path = "$dir/$token";
        @rmdir("$path/" . self::markOf($token));
        [$seen, $live] = self::judgeMarks($path, self::markOf($token), $takenFrom);
        $outcome = 'the token stays until its lease ends';
        if ($seen === 'seen' && $live === null && self::rename($path, "$dir/" . self::FREE) === 0) {
            $outcome = 'the lock was freed again';
        }
        throw self::systemError('acquire', $dir, "$what $token", $errno, $outcome);
    }
}

/**
 * The atomic write and the update committed through the lock's token
 * (docs/atomic-writes.md, docs/protocol.md "The fence made of path
 * names"), in PHP: no process is started.
 *
 * PHP gives file times in whole seconds, so the version marks it writes
 * name the second of the commit; that only makes it more cautious about a
 * file changed outside the lock within two seconds of a commit. PHP's
 * fopen() cannot ask for O_NOFOLLOW (it can for O_NONBLOCK, mode 'n'): the
 * target is judged with lstat() before it is opened and checked to be the
 * same file after.
 *
 * @internal
 */
final class Files
{
    /** The largest file an update reads (default_read_limit). */
    public const READ_LIMIT = 64 << 20;
    /**
     * The largest counter file read (docs/security.md): one unsigned
     * decimal and a newline take 21 bytes. Bounded this tightly so that
     * no counter, whatever it holds, makes increment() allocate past a
     * host's memory_limit, a fatal error that would skip the release.
     */
    public const COUNTER_LIMIT = 64;
    private const LOCAL_FS = ['ext2', 'ext3', 'ext4', 'xfs', 'btrfs', 'tmpfs', 'ramfs', 'f2fs', 'overlay', 'zfs', 'reiserfs', 'jfs', 'bcachefs', 'nilfs2'];

    /** How long a stale read on a network filesystem is read again; tests shorten it. */
    public static int $staleReadBudgetUs = 3000000;
    /**
     * Per lock directory: whether it is on a local filesystem. Tests set
     * an entry to play a network filesystem on a local disk.
     *
     * @var array<string, bool>
     */
    public static array $localFor = [];
    /** @var array<string, bool> asked once per lock directory and process */
    private static array $localSeen = [];

    /**
     * Whether a call with these options runs natively: unless it names a
     * command, or asks for a flush this PHP (before 8.1) cannot make.
     *
     * @param array<string, mixed> $options
     */
    public static function native(array $options, string $sync): bool
    {
        return !isset($options['command']) && ($sync === 'none' || function_exists('fsync'));
    }

    private static function onLocalFs(string $lockDir): bool
    {
        return self::$localFor[$lockDir] ?? self::$localSeen[$lockDir] ??= (function () use ($lockDir): bool {
            $type = Native::fsType($lockDir);
            return $type === null || in_array($type, self::LOCAL_FS, true);
        })();
    }

    private static function advice(int $errno, string $dir): string
    {
        return match ($errno) {
            1, 13 => "check the permissions of $dir: this process must be able to write and search it",
            2 => 'the directory of the file must exist',
            28, 122 => "the filesystem of $dir is full or over quota: free space",
            30 => "the filesystem of $dir is mounted read-only",
            default => '',
        };
    }

    /** @param array{path: string, dir: string} $t */
    private static function fileError(string $step, array $t, string $what, int $errno): Exception
    {
        return Native::systemError($step, $t['path'], $what, $errno, self::advice($errno, $t['dir']));
    }

    /**
     * The target of a write: path, directory, name, and what a replacement
     * keeps. A symbolic link is replaced unless $follow: then the chain is
     * resolved (at most 40 links), each checked as protected_symlinks does.
     *
     * @return array{path: string, dir: string, name: string, exists: bool, keepMode: ?int, keepOwner: ?array{0: int, 1: int}}
     */
    public static function resolveTarget(string $step, string $path, bool $follow): array
    {
        $bad = fn (string $why) => new Exception('bad_argument', "tokenlock: $step \"$path\": $why", 64);
        if (str_ends_with($path, '/')) {
            throw $bad("the target path ends in '/': name a file");
        }
        for ($hops = 0; ; ++$hops) {
            $slash = strrpos($path, '/');
            $dir = $slash === false ? '.' : ($slash === 0 ? '/' : substr($path, 0, $slash));
            $name = $slash === false ? $path : substr($path, $slash + 1);
            if ($name === '.' || $name === '..') {
                throw $bad('the target must name a file');
            }
            $t = ['path' => $path, 'dir' => $dir, 'name' => $name, 'exists' => false, 'keepMode' => null, 'keepOwner' => null];
            clearstatcache(true, $path);
            $st = @lstat($path);
            if ($st === false) {
                break;
            }
            $type = $st['mode'] & 0170000;
            if ($type === 0120000) {
                if (!$follow) {
                    break;
                }
                if ($hops >= 40) {
                    throw self::fileError($step, $t, 'too many levels of symbolic links', 40);
                }
                self::checkLink($step, $t, $st);
                $to = @readlink($path);
                if ($to === false) {
                    throw self::fileError($step, $t, 'cannot read the symbolic link', Native::lastErrno() ?: 5);
                }
                $path = str_starts_with($to, '/') ? $to : "$dir/$to";
                continue;
            }
            if ($type === 0040000) {
                throw self::fileError($step, $t, 'the target is a directory', 21);
            }
            if ($type !== 0100000) {
                throw Native::systemError($step, $path, 'the target is not a regular file (a device, FIFO or socket cannot be replaced atomically)', 22, 'put a regular file there');
            }
            // Its setuid, setgid and sticky bits belonged to its contents.
            $t['exists'] = true;
            $t['keepMode'] = $st['mode'] & 0777;
            $t['keepOwner'] = [$st['uid'], $st['gid']];
            break;
        }
        clearstatcache(true, $t['dir']);
        $dst = @stat($t['dir']);
        if ($dst === false) {
            throw Native::systemError($step, $t['path'], "its directory {$t['dir']} does not exist or cannot be searched", 2, 'create the directory first');
        }
        if (($dst['mode'] & 0170000) !== 0040000) {
            throw self::fileError($step, $t, "{$t['dir']} is not a directory", 20);
        }
        return $t;
    }

    /**
     * In a directory that is sticky and writable by all, anyone may plant
     * a link: one is followed only when it is ours or the directory owner's.
     *
     * @param array{path: string, dir: string} $t
     * @param array{uid: int} $link
     */
    private static function checkLink(string $step, array $t, array $link): void
    {
        $d = @stat($t['dir']);
        if ($d === false) {
            throw self::fileError($step, $t, "cannot look at the directory {$t['dir']} of the symbolic link", Native::lastErrno() ?: 2);
        }
        $euid = Native::euid();
        if (!($d['mode'] & 01000) || !($d['mode'] & 0002) || $link['uid'] === $euid || $link['uid'] === $d['uid']) {
            return;
        }
        throw new Exception('untrusted', sprintf('tokenlock: %s %s: refusing to follow the symbolic link %s: it is owned by uid %d, neither this user (uid %s) nor the owner of %s (uid %d), a directory that is sticky and writable by all (mode %04o), where anyone may plant a link; nothing was written or read: name the file it points to directly, or have that link removed and made by this user',
            $step, $t['path'], $t['path'], $link['uid'], $euid, $t['dir'], $d['uid'], $d['mode'] & 07777), 77);
    }

    /**
     * Writes DATA to a new temporary file .NAME.tmp.<16 hex> in $inDir,
     * flushed as $sync asks, and returns its path; on failure nothing is left.
     *
     * @param array{path: string, dir: string, name: string, keepOwner: ?array{0: int, 1: int}} $t
     */
    public static function writeTemp(array $t, string $inDir, string $data, string $sync, int $mode): string
    {
        $tmp = "$inDir/.{$t['name']}.tmp." . bin2hex(random_bytes(8));
        error_clear_last();
        // PHP has no fchmod(): a mode without execute bits is given at
        // creation, through the umask, so that no later call by path can be
        // turned onto another file by someone who swaps the name meanwhile.
        $exact = ($mode & ~0666) === 0;
        $umask = $exact ? umask(0777 & ~$mode) : null;
        // 'x' is O_CREAT|O_EXCL, which never follows a link planted there.
        $h = @fopen($tmp, 'xb');
        if ($umask !== null) {
            umask($umask);
        }
        if ($h === false) {
            throw self::fileError('create', $t, "cannot create the temporary file $tmp", Native::lastErrno() ?: 5);
        }
        $fail = null;
        // As root, the replaced file's owner and group are kept, so that the
        // program owning the data can still write it.
        if ($t['keepOwner'] !== null && Native::euid() === 0) {
            @lchown($tmp, $t['keepOwner'][0]);
            @lchgrp($tmp, $t['keepOwner'][1]);
        }
        error_clear_last();
        if (!$exact && !@chmod($tmp, $mode)) {
            $fail = ['create', "cannot set the mode of the temporary file $tmp"];
        }
        for ($off = 0, $n = strlen($data); $fail === null && $off < $n; $off += $w) {
            error_clear_last();
            $w = @fwrite($h, $off === 0 ? $data : substr($data, $off));
            if ($w === false || $w === 0) {
                $fail = ['write', "cannot write the temporary file $tmp"];
                $w = 0;
            }
        }
        error_clear_last();
        if ($fail === null && $sync !== 'none' && (!@fflush($h) || !@fsync($h))) {
            $fail = ['sync', "cannot flush the temporary file $tmp"];
        }
        $errno = $fail === null ? 0 : (Native::lastErrno() ?: 5);
        // A failure here counts: NFS reports write errors at close.
        error_clear_last();
        if (!@fclose($h) && $fail === null) {
            $fail = ['close', "closing the temporary file $tmp failed"];
            $errno = Native::lastErrno() ?: 5;
        }
        if ($fail !== null) {
            @unlink($tmp);
            throw self::fileError($fail[0], $t, $fail[1], $errno);
        }
        return $tmp;
    }

    /**
     * Flushes the target's directory after a rename, as `file_and_dir`
     * asks: a failure is DirSyncException, since the change is made.
     *
     * @param array{path: string, dir: string} $t
     */
    public static function syncTargetDir(array $t, string $sync, string $done, string $advice, int|string|null $value = null): void
    {
        if ($sync !== 'file_and_dir') {
            return;
        }
        error_clear_last();
        $h = @fopen($t['dir'], 'r');
        $errno = $h === false ? (Native::lastErrno() ?: 5) : 0;
        if ($h !== false) {
            error_clear_last();
            $errno = @fsync($h) ? 0 : (Native::lastErrno() ?: 5);
            fclose($h);
        }
        if ($errno === 0) {
            return;
        }
        $what = "$done, but flushing the directory {$t['dir']} failed (" . Native::cause($errno) . "): a crash may undo it$advice";
        if ($errno === 13 || $errno === 1) {
            $what .= "; give this user read permission on {$t['dir']} (chmod u+r, or g+r for a shared group), or write with sync file";
        }
        $e = new DirSyncException('dir_sync_failed', "tokenlock: sync {$t['path']}: $what", 74, [], null, $errno);
        if ($value !== null) {
            $e->setValue($value);
        }
        throw $e;
    }

    private static function modeOf(array $t, ?int $mode): int
    {
        if ($mode !== null) {
            return $mode;
        }
        if ($t['keepMode'] !== null) {
            return $t['keepMode'];
        }
        return 0644 & ~umask();
    }

    /** writeFile() without a lock: the temporary file beside the target, renamed over it. */
    public static function write(string $path, string $data, string $sync, ?int $mode, bool $follow): void
    {
        $t = self::resolveTarget('write', $path, $follow);
        $tmp = self::writeTemp($t, $t['dir'], $data, $sync, self::modeOf($t, $mode));
        $errno = Native::rename($tmp, $t['path']);
        if ($errno !== 0) {
            @unlink($tmp);
            throw self::fileError('rename', $t, "cannot rename $tmp over the target", $errno);
        }
        self::syncTargetDir($t, $sync, 'the new contents are in place', '');
    }

    /**
     * Reads the target under the lock: a regular file only, at most the
     * read limit, never through a symbolic link (the commit replaces a
     * link, so what it points to is not the target's contents).
     *
     * @param array{path: string, dir: string} $t
     * @return array{0: ?string, 1: int} the contents (null: missing) and their mtime in microseconds
     */
    public static function readTarget(array $t, int $limit = self::READ_LIMIT): array
    {
        // A network client may answer the lstat from its cache and the open
        // from the server (GlusterFS): two files for one name until the
        // cache lets go. Under the lock nothing else replaces the file, so
        // it is read again, for as long as a stale read is.
        $start = hrtime(true);
        for ($pause = 5000; ; $pause = min(2 * $pause, 200000)) {
            try {
                return self::readTargetOnce($t, $limit);
            } catch (Exception $e) {
                if ($e->getError() !== 'system' || $e->getErrno() !== self::EREPLACED
                    || (hrtime(true) - $start) / 1000 > self::$staleReadBudgetUs) {
                    throw $e;
                }
            }
            usleep($pause);
        }
    }

    /** The errno of a target replaced between its lstat and its open. */
    private const EREPLACED = 11;

    /**
     * @param array{path: string, dir: string} $t
     * @return array{0: ?string, 1: int}
     */
    private static function readTargetOnce(array $t, int $limit): array
    {
        $path = $t['path'];
        clearstatcache(true, $path);
        $st = @lstat($path);
        if ($st === false) {
            return [null, 0];
        }
        $type = $st['mode'] & 0170000;
        if ($type === 0120000) {
            throw Native::systemError('read', $path, 'it is a symbolic link, and links are not followed here (the write replaces the link), so what it points to, maybe another user\'s file, was not read; nothing was written: name the file it points to, ask to follow links, or remove the link', 40, 'pass follow_symlinks to update the file it points to');
        }
        if ($type === 0040000) {
            throw Native::systemError('read', $path, 'it is a directory; nothing was written', 21, 'remove it or name a file');
        }
        if ($type !== 0100000) {
            throw Native::systemError('read', $path, 'it is not a regular file (a FIFO, device or socket), and was not read; nothing was written', 22, 'put a regular file there');
        }
        if ($st['size'] > $limit) {
            throw self::tooLarge($path, $st['size'], $limit);
        }
        error_clear_last();
        // 'n': O_NONBLOCK, so that a FIFO swapped in since the lstat is
        // refused by the check below rather than waited on.
        $h = @fopen($path, 'rbn');
        if ($h === false) {
            $errno = Native::lastErrno() ?: 5;
            if ($errno === 2) {
                return [null, 0];
            }
            throw self::fileError('read', $t, 'cannot open the target', $errno);
        }
        try {
            $fst = fstat($h);
            // Swapped since the lstat (for a link, say): not what was judged.
            if ($fst === false || $fst['ino'] !== $st['ino'] || $fst['dev'] !== $st['dev']) {
                throw Native::systemError('read', $path, 'it was replaced while being opened, again and again; nothing was written', self::EREPLACED, 'retry; on a network filesystem, turn its client caches off (tokenlock doctor DIR --peer DIR2 checks a mount)');
            }
            // In pieces: a length given to stream_get_contents() is allocated whole.
            for ($text = ''; !feof($h);) {
                error_clear_last();
                $chunk = @fread($h, min(65536, $limit + 1));
                if ($chunk === false) {
                    throw self::fileError('read', $t, 'cannot read the target', Native::lastErrno() ?: 5);
                }
                $text .= $chunk;
                if (strlen($text) > $limit) {
                    throw self::tooLarge($path, strlen($text), $limit);
                }
            }
            return [$text, $fst['mtime'] * 1000000];
        } finally {
            fclose($h);
        }
    }

    /** A target past the read limit: for a counter, corrupt data. */
    private static function tooLarge(string $path, int $size, int $limit): Exception
    {
        if ($limit === self::COUNTER_LIMIT) {
            return new Exception('corrupt_data', "tokenlock: read counter $path: it holds at least $size bytes, more than the " . self::COUNTER_LIMIT . ' a counter may (one unsigned decimal and a newline); it was not read and was left as it is: repair or remove it by hand', 65);
        }
        return Native::systemError('read', $path, "it is too large (at least $size bytes, the limit is $limit); nothing was written", 27, 'keep such files out of updates');
    }

    // ---- version marks, on network filesystems ----------------------------
    // `D/<token>/w/v.<FNV-1a of the contents>.<mtime of the new file, µs>`:
    // what the last commit wrote, so that the next holder can tell a stale
    // read from its client's cache (docs/atomic-writes.md).

    public static function fnvHex(string $data): string
    {
        [$hi, $lo] = Native::fnv1a($data);
        return sprintf('%08x%08x', $hi, $lo);
    }

    /** @return array{name: string, hash: string, mtime: int}|null */
    private static function readVersionMark(string $w): ?array
    {
        $best = null;
        foreach (@scandir($w) ?: [] as $n) {
            if (preg_match('/\Av\.([0-9a-f]{16})\.(-?[0-9]{1,19})\z/', $n, $m) && ($best === null || (int) $m[2] > $best['mtime'])) {
                $best = ['name' => $n, 'hash' => $m[1], 'mtime' => (int) $m[2]];
            }
        }
        return $best;
    }

    /** @param array{name: string}|null $old */
    private static function writeVersionMark(string $w, ?array $old, string $hash, int $mtimeUs): void
    {
        $name = "v.$hash.$mtimeUs";
        if ($old !== null && ($old['name'] === $name || Native::rename("$w/{$old['name']}", "$w/$name") === 0)) {
            return;
        }
        $h = @fopen("$w/$name", 'x');
        if ($h !== false) {
            fclose($h);
        }
    }

    // ---- the fenced update ------------------------------------------------

    private static function lostBeforeCommit(string $path, string $token): LockLostException
    {
        return new LockLostException('lock_lost', "tokenlock: commit $path: the lock was taken over before the commit (our token $token is gone: our lease ended or we were judged dead); nothing was written and the new owner's data is intact", 3);
    }

    /**
     * Whether our token is gone: a lookup's ENOENT is confirmed by a
     * listing, since a network client may answer a lookup from its cache.
     * ESTALE (116) counts as ENOENT: a GlusterFS client that still has a
     * token cached that a takeover moved answers with it.
     */
    private static function tokenGone(string $dir, string $token): bool
    {
        // A lookup that finds the token is checked against a listing too:
        // an sshfs client keeps a renamed name in its entry cache. Only
        // failed steps ask.
        clearstatcache(true, "$dir/$token");
        $found = @lstat("$dir/$token") !== false;
        $names = @scandir($dir);
        return $names === false ? !$found : !in_array($token, $names, true);
    }

    /**
     * The token's workspace `w`, made by the first update and judged by
     * the trust rules: another user who could write it could swap the
     * temporary file. Returns [path, made].
     *
     * @return array{0: string, 1: bool}
     */
    private static function workspace(string $dir, string $token, array $t): array
    {
        $w = "$dir/$token/w";
        $made = false;
        clearstatcache(true, $w);
        if (@lstat($w) === false) {
            error_clear_last();
            if (@mkdir($w, 0700)) {
                $made = true;
                // Shared with the lock directory's chosen group, whose
                // members commit through it too.
                $group = Native::chosenGroup($dir);
                if ($group !== null) {
                    @chgrp($w, $group);
                }
                @chmod($w, Native::dirMode('commit') | ($group === null ? 0 : 0070));
            } elseif (($errno = Native::lastErrno() ?: 5) !== 17) {
                if (($errno === 2 || $errno === 116) && self::tokenGone($dir, $token)) {
                    throw self::lostBeforeCommit($t['path'], $token);
                }
                throw self::fileError('create', $t, "cannot create the workspace $w", $errno);
            }
            clearstatcache(true, $w);
        }
        foreach (["$dir/$token" => "lock's token", $w => "lock's workspace"] as $path => $what) {
            try {
                Native::checkInside($dir, $path, 'commit', "the $what");
            } catch (Exception $e) {
                if ($made) {
                    @rmdir($w);
                }
                throw $e;
            }
        }
        return [$w, $made];
    }

    /**
     * Commits DATA over the target through the token: the temporary file
     * in D/<token>/w, renamed over the target by a path through the
     * token's name, which fails once the lock was taken over. False
     * (nothing written) when the token cannot fence it: a file token, or
     * the target on another filesystem.
     *
     * @param array{path: string, dir: string, name: string, keepOwner: ?array{0: int, 1: int}} $t
     * @param array{name: string}|null $oldMark
     */
    private static function fencedCommit(string $dir, string $token, array $t, string $data, string $sync, int $mode, bool $marks, ?array $oldMark): bool
    {
        clearstatcache();
        $tok = @stat("$dir/$token");
        if ($tok === false) {
            if (self::tokenGone($dir, $token)) {
                throw self::lostBeforeCommit($t['path'], $token);
            }
            throw self::fileError('commit', $t, "cannot look at the lock's token $dir/$token", Native::lastErrno() ?: 5);
        }
        $dst = @stat($t['dir']);
        // A token that is a file (a legacy setup's) has no room for the
        // temporary file; a rename cannot cross filesystems.
        if ($dst === false || ($tok['mode'] & 0170000) !== 0040000 || $tok['dev'] !== $dst['dev']) {
            return false;
        }
        [$w, $made] = self::workspace($dir, $token, $t);
        try {
            $tmp = self::writeTemp($t, $w, $data, $sync, $mode);
        } catch (Exception $e) {
            if ($made) {
                @rmdir($w);
            }
            if (($e->getErrno() === 2 || $e->getErrno() === 116) && self::tokenGone($dir, $token)) {
                throw self::lostBeforeCommit($t['path'], $token);
            }
            throw $e;
        }
        clearstatcache(true, $tmp);
        $written = $marks ? @lstat($tmp) : false;
        $errno = Native::rename($tmp, $t['path']);
        if ($errno !== 0) {
            @unlink($tmp);
            if ($made) {
                @rmdir($w);
            }
            if ($errno === 18) {
                return false;
            }
            // Made through the token's name a moment ago: a rename that no
            // longer finds it, into a directory that is there, lost the
            // token (an sshfs client may still find the old name in its caches).
            clearstatcache(true, $t['dir']);
            if (($errno === 2 || $errno === 116) && (self::tokenGone($dir, $token) || is_dir($t['dir']))) {
                throw self::lostBeforeCommit($t['path'], $token);
            }
            throw self::fileError('rename', $t, "cannot rename $tmp over the target", $errno);
        }
        if ($written !== false) {
            self::writeVersionMark($w, $oldMark, self::fnvHex($data), $written['mtime'] * 1000000);
        }
        return true;
    }

    /**
     * The update flow of update_file: lock, read, compute, commit through
     * the token, release, flush the directory. $compute gets the current
     * contents (null: missing) and returns [new contents, value]; the value
     * is returned.
     *
     * @param callable(?string): array{0: string, 1: mixed} $compute
     * @param array{wait?: ?float, sync: string, mode?: ?int, follow?: bool, lease_us?: int} $o
     */
    public static function update(string $path, string $lockDir, callable $compute, array $o): mixed
    {
        $dir = Native::lockPath($lockDir);
        $leaseUs = $o['lease_us'] ?? Native::leaseUs(null);
        $token = Native::acquire($dir, array_key_exists('wait', $o) ? $o['wait'] : Command::DEFAULT_WAIT, $leaseUs, Native::group($o['group'] ?? null));
        $t = null;
        $value = null;
        try {
            $t = self::resolveTarget('write', $path, $o['follow'] ?? false);
            if (random_int(0, 31) === 0) {
                self::sweepTemps($t, $leaseUs);
            }
            $marks = !self::onLocalFs($dir);
            $oldMark = $marks ? self::readVersionMark("$dir/$token/w") : null;
            $limit = empty($o['counter']) ? self::READ_LIMIT : self::COUNTER_LIMIT;
            [$current, $mtime] = self::readTarget($t, $limit);
            if ($oldMark !== null) {
                [$current, $mtime] = self::readPastStale($t, $oldMark, $leaseUs, $current, $mtime, $limit);
            }
            [$next, $value] = $compute($current);
            $mode = self::modeOf($t, $o['mode'] ?? null);
            if (!self::fencedCommit($dir, $token, $t, $next, $o['sync'], $mode, $marks, $oldMark)) {
                $token = self::unfencedCommit($dir, $token, $t, $next, $o['sync'], $mode, $leaseUs);
            }
        } finally {
            // Released whatever happened; after a commit a failure to
            // release is not reported, which would invite a retry that
            // counts twice.
            try {
                Native::release($dir, $token);
            } catch (Exception $ignored) {
            }
        }
        self::syncTargetDir($t, $o['sync'], 'the update is committed', '; do not repeat the update', $value);
        return $value;
    }

    /**
     * Across filesystems, or through a file token: beside the target, with
     * ownership proved by a refresh rename just before the commit (the
     * window between the two remains). Returns the token's new name.
     */
    private static function unfencedCommit(string $dir, string $token, array $t, string $data, string $sync, int $mode, int $leaseUs): string
    {
        $tmp = self::writeTemp($t, $t['dir'], $data, $sync, $mode);
        try {
            $token = Native::refresh($dir, $token, $leaseUs);
        } catch (Exception $e) {
            @unlink($tmp);
            throw $e instanceof LockLostException ? self::lostBeforeCommit($t['path'], $token) : $e;
        }
        $errno = Native::rename($tmp, $t['path']);
        if ($errno !== 0) {
            @unlink($tmp);
            throw self::fileError('rename', $t, "cannot rename $tmp over the target", $errno);
        }
        return $token;
    }

    /**
     * Reads again, for a while, a version older than the one the version
     * mark says the last commit wrote: a network client's stale cache.
     *
     * @param array{hash: string, mtime: int} $mark
     * @return array{0: ?string, 1: int}
     */
    private static function readPastStale(array $t, array $mark, int $leaseUs, ?string $current, int $mtime, int $limit): array
    {
        $start = hrtime(true);
        $budget = min(self::$staleReadBudgetUs, intdiv($leaseUs, 4)) * 1000;
        $pause = 5000;
        // One version, read for the whole wait and newer than the mark
        // though within the skew: written outside the lock just after the
        // last commit (a stale cache serves an older one).
        $first = $current === null ? null : self::fnvHex($current);
        for ($reads = 1; ; ++$reads) {
            if ($current !== null && (self::fnvHex($current) === $mark['hash'] || $mtime > $mark['mtime'] + Native::SKEW_US)) {
                return [$current, $mtime];
            }
            if ($first === null || $current === null || self::fnvHex($current) !== $first) {
                $first = null;
            }
            $left = $start + $budget - hrtime(true);
            if ($left <= 0 && $first !== null && $mtime > $mark['mtime']) {
                return [$current, $mtime];
            }
            if ($left <= 0) {
                $fs = Native::fsType($t['dir']) ?? 'a network filesystem';
                throw new Exception('stale_data', "tokenlock: read {$t['path']}: this client keeps reading a version older than the one the last update committed ($reads reads in " . intdiv(hrtime(true) - $start, 1000000) . " ms); nothing was written; the filesystem ($fs) serves stale cached data: turn its client caches off (tokenlock doctor DIR --peer DIR2 checks a mount)", 75);
            }
            usleep(min($pause, intdiv($left, 1000) + 1));
            $pause = min(2 * $pause, 200000);
            [$current, $mtime] = self::readTarget($t, $limit);
        }
    }

    /**
     * Removes this target's temporary files older than a lease, which no
     * live writer holding the lock can own: those of crashed writes beside
     * it. Only regular files named exactly .NAME.tmp.<16 hex>.
     *
     * @param array{dir: string, name: string} $t
     */
    public static function sweepTemps(array $t, int $leaseUs): int
    {
        $prefix = ".{$t['name']}.tmp.";
        $removed = 0;
        foreach (@scandir($t['dir']) ?: [] as $n) {
            if (!str_starts_with($n, $prefix) || !preg_match('/\A[0-9a-f]{16}\z/', substr($n, strlen($prefix)))) {
                continue;
            }
            $p = "{$t['dir']}/$n";
            clearstatcache(true, $p);
            $st = @lstat($p);
            if ($st !== false && ($st['mode'] & 0170000) === 0100000 && $st['mtime'] * 1000000 < Native::nowUs() - $leaseUs && @unlink($p)) {
                ++$removed;
            }
        }
        return $removed;
    }

    /** The sum of two unsigned decimals, or null past 2^64-1. */
    public static function addU64(string $a, string $b): ?string
    {
        $r = '';
        $carry = 0;
        for ($i = strlen($a) - 1, $j = strlen($b) - 1; $i >= 0 || $j >= 0 || $carry; --$i, --$j) {
            $s = $carry + ($i >= 0 ? (int) $a[$i] : 0) + ($j >= 0 ? (int) $b[$j] : 0);
            $r = ($s % 10) . $r;
            $carry = intdiv($s, 10);
        }
        $r = ltrim($r, '0');
        $r = $r === '' ? '0' : $r;
        return Command::fitsUint64($r) ? $r : null;
    }

    /**
     * increment()'s step: the counter's new contents and value.
     *
     * @return array{0: string, 1: int|string}
     */
    public static function count(string $path, ?string $text, int $by): array
    {
        $old = '0';
        if ($text !== null) {
            if (!preg_match('/\A(0|[1-9][0-9]{0,19})\n\z/', $text, $m) || !Command::fitsUint64($m[1])) {
                $shown = addcslashes(substr($text, 0, 24), "\0..\37\177..\377") . (strlen($text) > 24 ? '...' : '');
                throw new Exception('corrupt_data', "tokenlock: read counter $path: the file does not hold one unsigned decimal and a newline (it holds \"$shown\", " . strlen($text) . ' bytes); it was left as it is: repair or remove it by hand', 65);
            }
            $old = $m[1];
        }
        $new = self::addU64($old, (string) $by);
        if ($new === null) {
            throw Native::systemError('increment', $path, "adding $by to $old would overflow 64 bits; the counter was left as it is", 75, 'reset the counter by hand if it is meant to wrap');
        }
        return ["$new\n", Command::toInt($new)];
    }
}
