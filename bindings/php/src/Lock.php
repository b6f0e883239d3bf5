<?php

declare(strict_types=1);

namespace Tokenlock;

/**
 * A lock held by this PHP process through a token (`tokenlock acquire`).
 *
 * Obtain one with Lock::acquire() or Lock::tryAcquire(); give it back with
 * release(). The lock stays held across calls until then, until its lease
 * ends (default 3600 s; refresh() extends it), or until the request ends:
 * when PHP ends the request, however it ends (normally, exit(), an
 * uncaught exception, a fatal error such as memory_limit or
 * max_execution_time), every lock this process still holds is released,
 * after the script's own shutdown functions and before destructors, so
 * the next request gets it at once; in the CLI the request is the whole
 * script. A process killed (SIGKILL, php-fpm's request_terminate_timeout)
 * releases nothing: on the same host its death is seen, and the next
 * acquire takes the lock over at once. A forked child never releases its
 * parent's lock, neither as it ends nor when its copy of the object is
 * destroyed.
 */
final class Lock
{
    private string $dir;
    /** $dir as Native::lockPath() checked it, for release and refresh. */
    private string $path;
    private string $token;
    private ?float $lease;
    private int $ownerPid;
    private bool $held = true;
    /** Null: exclusive; 0: shared (a reader); N: one of N slots. */
    private ?int $slots;

    /** Made right after Native::acquire() made TOKEN: its pid is this process's. */
    private function __construct(string $dir, string $path, string $token, ?float $lease, ?int $slots)
    {
        $this->dir = $dir;
        $this->path = $path;
        $this->token = $token;
        $this->lease = $lease;
        $this->slots = $slots;
        $this->ownerPid = Native::tokenPid();
    }

    /**
     * Acquires the lock LOCKDIR (a directory, created on first use; its
     * parent must exist).
     *
     * @param array{wait?: int|float|null, lease?: int|float, shared?: bool, slots?: int, command?: string, group?: string|int} $options
     *        `wait`: seconds to wait for a busy lock (default 10; 0: fail at
     *        once with BusyException; null: as long as it takes);
     *        `shared`: true for a shared hold (a reader: any number of
     *        shared holders at once, never beside a writer; see
     *        acquireShared());
     *        `slots`: N from 1 to 999999 for one of N slots (a semaphore:
     *        at most N holders at once); implies `shared`;
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
        Command::checkKeys($options, ['wait', 'lease', 'shared', 'slots', 'command', 'group'], 'Lock::acquire');
        $wait = array_key_exists('wait', $options) ? Command::seconds($options['wait'], 'wait') : Command::DEFAULT_WAIT;
        $lease = isset($options['lease']) ? Command::seconds($options['lease'], 'lease') : null;
        $slots = self::slotsOption($options);
        $path = Native::lockPath($dir);
        $token = Native::acquire($path, $wait, Native::leaseUs($lease), Native::group($options['group'] ?? null), $slots);
        return new self($dir, $path, $token, $lease, $slots);
    }

    /**
     * Acquires LOCKDIR shared: any number of shared holders hold it at
     * once, and no writer (an acquire() without `shared`) holds beside
     * them. A writer that comes waits for the shared holders in it to
     * leave, and from then on new shared holders wait behind it (writer
     * preference: a stream of readers cannot starve it). With `slots` N,
     * at most N holders at once (a semaphore); holders of another limit,
     * or readers at a semaphore, wait for each other.
     *
     * A shared hold has no fence: writeFile() and increment() take the
     * lock exclusively. release() and refresh() work as for an exclusive
     * hold; token() is the hold's current name (a lone share's token or
     * its entry `s.*` inside the token).
     *
     * @param array{wait?: int|float|null, lease?: int|float, slots?: int, group?: string|int} $options as acquire()
     * @throws BusyException|TimeoutException|Exception as acquire(); `not_supported`
     *         on a filesystem that needs owner marks (GlusterFS, unknown FUSE)
     */
    public static function acquireShared(string $dir, array $options = []): self
    {
        return self::acquire($dir, ['shared' => true] + $options);
    }

    /**
     * The `shared` and `slots` options: null (exclusive), 0 (a reader) or N.
     * Tokenlock\RedisLock reads its options by the same rules.
     *
     * @internal
     * @param array<string, mixed> $options
     */
    public static function slotsOption(array $options): ?int
    {
        $shared = $options['shared'] ?? false;
        if (!is_bool($shared)) {
            throw new Exception('bad_argument', 'tokenlock: the option shared must be true or false (got ' . get_debug_type($shared) . ')', 64);
        }
        if (!isset($options['slots'])) {
            return $shared ? 0 : null;
        }
        $n = $options['slots'];
        if (!is_int($n) || $n < 1 || $n > Native::MAX_SLOTS) {
            throw new Exception('bad_argument', 'tokenlock: the option slots must be a whole number from 1 to 999999 (got ' . (is_scalar($n) ? var_export($n, true) : get_debug_type($n)) . ')', 64);
        }
        if (array_key_exists('shared', $options) && $shared === false) {
            throw new Exception('bad_argument', 'tokenlock: slots asks for a shared hold, but shared is false: leave shared out, or slots', 64);
        }
        return $n;
    }

    /** 'exclusive' or 'shared' (a reader or a slot holder). */
    public function mode(): string
    {
        return $this->slots === null ? 'exclusive' : 'shared';
    }

    /** The semaphore's size for a slot holder, else 0. */
    public function slots(): int
    {
        return $this->slots ?? 0;
    }

    /**
     * Like acquire(), but returns null when the lock is busy or the wait
     * runs out. `wait` defaults to 0 here.
     *
     * @param array{wait?: int|float|null, lease?: int|float, shared?: bool, slots?: int, command?: string, group?: string|int} $options
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
     * it. It changes with every refresh(). For a shared hold: the lone
     * share's token, or the hold's entry `s.*` inside the token once other
     * shared holders joined.
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
     * release(), after an operation found the lock lost, and once the lock
     * was released as the request ended.
     */
    public function isHeld(): bool
    {
        if ($this->held && !Native::holds($this->token)) {
            $this->held = false;  // released as the request ended
        }
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
        if (!$this->isHeld()) {
            throw new \LogicException("Tokenlock\\Lock::refresh: the lock {$this->dir} is no longer held by this object");
        }
        $this->checkOwner('refresh');
        $lease = $lease === null ? $this->lease : Command::seconds($lease, 'lease');
        try {
            $this->token = Native::refresh($this->path, $this->token, Native::leaseUs($lease));
        } catch (LockLostException $e) {
            $this->held = false;
            throw $e;
        }
        $this->lease = $lease;
        return $this->token;
    }

    /**
     * Makes a shared hold exclusive, without waiting and without letting
     * go: true when it is now a writer's hold (with a lease of $lease
     * seconds, default the one given to acquire()), false when other
     * holders (or a writer waiting for them) are there: it then stays
     * shared. An exclusive hold stays as it is (true). A slot holder
     * promoted holds the lock alone.
     *
     * @throws \LogicException after release()
     * @throws Exception on a failure of the lock directory
     */
    public function toExclusive(int|float|null $lease = null): bool
    {
        $this->checkHeld('toExclusive');
        if ($this->slots === null) {
            return true;
        }
        $lease = $lease === null ? $this->lease : Command::seconds($lease, 'lease');
        $token = Native::promote($this->path, $this->token, Native::leaseUs($lease));
        if ($token === null) {
            return false;
        }
        [$this->token, $this->slots, $this->lease] = [$token, null, $lease];
        return true;
    }

    /**
     * Makes an exclusive hold shared (a reader, or one of $slots slots),
     * in one rename: no writer can come between. A shared hold stays as
     * it is.
     *
     * @throws LockLostException when the lock was taken over meanwhile
     * @throws \LogicException after release()
     */
    public function toShared(int $slots = 0): void
    {
        $this->checkHeld('toShared');
        if ($this->slots !== null) {
            return;
        }
        $slots = self::slotsOption($slots === 0 ? ['shared' => true] : ['slots' => $slots]);
        try {
            $this->token = Native::demote($this->path, $this->token, Native::leaseUs($this->lease), $slots);
        } catch (LockLostException $e) {
            $this->held = false;
            throw $e;
        }
        $this->slots = $slots;
    }

    /**
     * Whether the hold is in the lock directory now with its lease not
     * ended (a look at the directory; isHeld() only says what this object
     * believes).
     */
    public function holdsNow(): bool
    {
        return $this->isHeld() && Native::stillHeld($this->path, $this->token);
    }

    private function checkHeld(string $step): void
    {
        if (!$this->isHeld()) {
            throw new \LogicException("Tokenlock\\Lock::$step: the lock {$this->dir} is no longer held by this object");
        }
        $this->checkOwner($step);
    }

    /**
     * Releases the lock. Does nothing if it is no longer held (released,
     * lost, or released as the request ended).
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
        if (!$this->isHeld()) {
            return;
        }
        $this->checkOwner('release');
        try {
            Native::release($this->path, $this->token);
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
