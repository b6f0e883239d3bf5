<?php
/**
 * tokenlock for PHP: file locking and atomic file updates that work where
 * flock() does not (NFS, network filesystems, shared hosting).
 *
 * This binding drives the `tokenlock` command (docs/tokenlock.1.md) instead
 * of loading the C++ library: shared hosts seldom enable FFI outside the
 * CLI, but they run programs. Each call starts one `tokenlock` process with
 * proc_open() and an argument array, so no shell ever parses a path or a
 * token. It needs nothing beyond a stock PHP 8.0 or newer.
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
 * Locks belong to the PHP process (getmypid()): one killed with SIGKILL
 * loses its locks at once, as the command's dead-owner detection sees it
 * gone. A lock still held when its Lock object is destroyed is released,
 * except in a forked child, which never owned it.
 *
 * Errors are thrown as Tokenlock\Exception (a \RuntimeException): getError()
 * names the error in the library's one vocabulary (`busy`, `timed_out`,
 * `lock_lost`, `corrupt_data`, `bad_argument`, `system`, ...: the name the
 * command gives on its last line of stderr, run with TOKENLOCK_ERRORS=json;
 * never read from a message), getErrno() is the errno of a `system` error,
 * getCode() is the command's exit status, and getMessage() is the command's
 * own message, which names the path, the step and the cause. BusyException and TimeoutException (both
 * NotAcquiredException) and LockLostException can be caught apart.
 * Arguments that are wrong before any command runs (an unknown option, a
 * negative wait) throw \InvalidArgumentException.
 *
 * The command is found, in this order: the `command` option of a call;
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
 * @param array{wait?: int|float|null, lease?: int|float, command?: string} $options
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
 * @param array{sync?: string, lock?: string, wait?: int|float|null, mode?: int, follow_symlinks?: bool, command?: string} $options
 *        `sync`: `file_and_dir` (default: the file and its directory are
 *        flushed), `file` or `none`; `lock`: a lock directory to hold while
 *        replacing; `wait`: seconds to wait for a busy `lock` (default 10;
 *        0: fail at once with BusyException; null: as long as it takes, up
 *        to a year, the command's limit); `mode`: the mode of a new FILE,
 *        e.g. 0640; `follow_symlinks`: replace the file a link points to
 *        instead of the link
 * @throws BusyException|TimeoutException when `lock` stayed busy; FILE is then unchanged
 * @throws DirSyncException the new contents are in place, but the directory
 *         could not be flushed: a crash may bring back the old ones
 * @throws Exception on any other failure; FILE is then unchanged
 */
function writeFile(string $path, string $data, array $options = []): void
{
    Command::checkKeys($options, ['sync', 'lock', 'wait', 'mode', 'follow_symlinks', 'command'], 'writeFile');
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
    array_push($args, ...$waitArgs);
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
    Command::run($args, $options, $data, $waitArgs === ['--nonblock'] ? 'busy' : 'timed_out');
}

/**
 * Adds `by` (default 1; 0 just reads) to the counter in FILE under its lock
 * and returns the new value (`tokenlock incr`).
 *
 * FILE holds one unsigned decimal and a newline; a missing FILE counts as
 * 0. Anything else throws `corrupt_data` and FILE is left as it is: a
 * counter is never reset. The new value is committed through the lock's
 * token, so a process that lost the lock cannot overwrite a newer count.
 *
 * `wait` is the command's own `-w` (0: `-n`), so it bounds the whole wait.
 * The command has no wait without limit: null, and any wait beyond a
 * year, waits a year.
 *
 * @param array{by?: int, lock?: string, wait?: int|float|null, sync?: string, command?: string} $options
 *        `lock`: the lock directory (default FILE.lock, as `tokenlock incr`
 *        and counter.cgi use); `wait`: seconds to wait for a busy lock
 *        (default 10; 0: fail at once with BusyException; null: as long as
 *        it takes, up to a year); `sync`: as for writeFile()
 * @return int|string the new value; a decimal string if it exceeds PHP_INT_MAX
 * @throws BusyException|TimeoutException when the lock stayed busy; nothing changed
 * @throws DirSyncException `dir_sync_failed`: counted (getValue() has the new
 *         value), but the directory could not be flushed; do not repeat
 * @throws Exception `corrupt_data`, `system` (errno EOVERFLOW past 2^64-1),
 *         `stale_data`, ... ; nothing changed
 */
function increment(string $path, array $options = []): int|string
{
    Command::checkKeys($options, ['by', 'lock', 'wait', 'sync', 'command'], 'increment');
    $args = ['incr'];
    if (isset($options['lock'])) {
        $args[] = '--lock';
        $args[] = Command::path($options['lock'], 'lock');
    }
    $waitArgs = Command::fileWaitArgs($options);
    array_push($args, ...$waitArgs);
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
    $h = @fopen($path, 'rb');
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
    $text = stream_get_contents($h, 32);
    fclose($h);
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
    /** @var array{command?: string} */
    private array $commandOption;
    private int $ownerPid;
    private bool $held = true;

    /** @param array{command?: string} $commandOption */
    private function __construct(string $dir, string $token, ?float $lease, array $commandOption)
    {
        $this->dir = $dir;
        $this->token = $token;
        $this->lease = $lease;
        $this->commandOption = $commandOption;
        $this->ownerPid = getmypid();
    }

    /**
     * Acquires the lock LOCKDIR (a directory, created on first use; its
     * parent must exist).
     *
     * @param array{wait?: int|float|null, lease?: int|float, command?: string} $options
     *        `wait`: seconds to wait for a busy lock (default 10; 0: fail at
     *        once with BusyException; null: as long as it takes);
     *        `lease`: seconds the lock stays valid without refresh()
     *        (default 3600)
     * @throws BusyException when busy and `wait` is 0
     * @throws TimeoutException when still busy after `wait`
     * @throws Exception on any other failure (`system` with errno ENOENT
     *         for a missing parent, `untrusted`, `lock_corrupt`, ...)
     */
    public static function acquire(string $dir, array $options = []): self
    {
        Command::checkKeys($options, ['wait', 'lease', 'command'], 'Lock::acquire');
        $wait = array_key_exists('wait', $options) ? Command::seconds($options['wait'], 'wait') : Command::DEFAULT_WAIT;
        $lease = isset($options['lease']) ? Command::seconds($options['lease'], 'lease') : null;
        $args = ['acquire'];
        if ($wait !== null && $wait <= 0) {
            $args[] = '--nonblock';
        } elseif ($wait !== null) {
            $args[] = '--wait';
            $args[] = Command::formatSeconds($wait);
        }
        if ($lease !== null) {
            $args[] = '--lease';
            $args[] = Command::formatSeconds($lease);
        }
        // The PHP process, not the short-lived command, owns the token: its
        // death frees the lock.
        $args[] = '--pid';
        $args[] = (string) getmypid();
        $args[] = '--';
        $args[] = Command::path($dir, 'lock directory');
        [$out] = Command::run($args, $options, null, $wait !== null && $wait <= 0 ? 'busy' : 'timed_out');
        return new self($dir, trim($out), $lease, array_intersect_key($options, ['command' => 1]));
    }

    /**
     * Like acquire(), but returns null when the lock is busy or the wait
     * runs out. `wait` defaults to 0 here.
     *
     * @param array{wait?: int|float|null, lease?: int|float, command?: string} $options
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
        $lease = $lease === null ? $this->lease : Command::seconds($lease, 'lease');
        $args = ['refresh'];
        if ($lease !== null) {
            $args[] = '--lease';
            $args[] = Command::formatSeconds($lease);
        }
        array_push($args, '--', Command::path($this->dir, 'lock directory'), $this->token);
        try {
            [$out] = Command::run($args, $this->commandOption);
        } catch (LockLostException $e) {
            $this->held = false;
            throw $e;
        }
        $this->token = trim($out);
        $this->lease = $lease;
        return $this->token;
    }

    /**
     * Releases the lock. Does nothing if it is no longer held.
     *
     * @throws LockLostException when the lock was taken over meanwhile
     *         (nothing was changed, and it is no longer held)
     * @throws Exception on any other failure; the lock then stays held and
     *         release() may be called again
     */
    public function release(): void
    {
        if (!$this->held) {
            return;
        }
        try {
            Command::run(['release', '--', Command::path($this->dir, 'lock directory'), $this->token], $this->commandOption);
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
        if (!$this->held || getmypid() !== $this->ownerPid) {
            return;
        }
        try {
            $this->release();
        } catch (Exception $e) {
            trigger_error('Tokenlock\Lock: releasing on destruction: ' . $e->getMessage(), E_USER_WARNING);
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
     * [stdout, stderr]. $busyAs names what status 1 means for this call.
     *
     * @param list<string> $args
     * @param array{command?: string} $options
     * @return array{0: string, 1: string}
     */
    public static function run(array $args, array $options, ?string $stdin = null, string $busyAs = 'timed_out'): array
    {
        // The subcommands that take a lock take the legacy timeout too.
        if (self::$legacyTimeout !== null && in_array($args[0], ['acquire', 'incr', 'write', 'run'], true)) {
            array_splice($args, 1, 0, ['--legacy-timeout', self::formatSeconds(self::$legacyTimeout)]);
        }
        $argv = array_merge([self::locate($options)], $args);
        $spec = [
            0 => $stdin === null ? ['file', '/dev/null', 'r'] : ['pipe', 'r'],
            1 => ['pipe', 'w'],
            2 => ['pipe', 'w'],
        ];
        // The error's name then ends stderr, as a JSON line.
        $env = getenv();
        $env['TOKENLOCK_ERRORS'] = 'json';
        $proc = @proc_open($argv, $spec, $pipes, null, $env);
        if (!is_resource($proc)) {
            $cause = error_get_last()['message'] ?? 'unknown error';
            throw new Exception('system', "tokenlock: start {$argv[0]}: proc_open failed: $cause", 71, $argv);
        }
        [$out, $err] = self::exchange($pipes, $stdin);
        [$status, $signal] = self::waitFor($proc);
        if ($status === 0) {
            return [$out, $err];
        }
        [$message, $named] = self::errorLine(rtrim($err));
        if ($signal !== null) {
            throw new Exception('command_failed', ($message !== '' ? "$message\n" : '')
                . "tokenlock: {$args[0]}: the command {$argv[0]} was killed by signal $signal", 128 + $signal, $argv);
        }
        if ($message === '') {
            $message = "tokenlock: {$args[0]}: {$argv[0]} exited with status $status";
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
