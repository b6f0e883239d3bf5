<?php
/**
 * The tokenlock lock as a NAME in a Redis server (docs/redis.md), for PHP
 * processes on hosts that share no filesystem, and shared with the C++
 * library and the `tokenlock --redis` command: the same keys
 * (tokenlock:NAME, :fence, :wake, :waiters, :handoff, :shared, :writer),
 * the same Lua scripts byte for byte, the same owner ids and the same
 * fences.
 *
 *     $lock = Tokenlock\RedisLock::acquire('redis://127.0.0.1:6379', 'invoices', ['wait' => 5, 'lease' => 30]);
 *     try {
 *         $db->update(..., fence: $lock->fence());   // refuse smaller fences there
 *         $lock->refresh();                          // before the lease ends
 *     } finally {
 *         $lock->release();
 *     }
 *
 * Held shared (acquireShared(), or the option `shared` or `slots`), any
 * number of readers, or N slot holders, hold together, never beside a
 * writer; a writer waiting for them bars new ones (docs/redis.md, Shared
 * locks and semaphores). A shared hold has no fence.
 *
 * With the phpredis extension loaded it talks to Redis itself; without
 * it, it runs `tokenlock acquire|refresh|release|status --redis URL NAME`
 * (the command is found as for the rest of the module). Redis cannot see
 * a holder die: a lock not released stays until its lease ends. A request
 * that ends holding one, however it ends (exit(), an uncaught exception,
 * memory_limit, max_execution_time), releases it as it ends; a process
 * killed outright cannot.
 */

declare(strict_types=1);

namespace Tokenlock;

use Tokenlock\Redis\Checks;
use Tokenlock\Redis\CommandClient;
use Tokenlock\Redis\Connection;
use Tokenlock\Redis\Scripts;
use Tokenlock\Redis\Waiter;

final class RedisLock
{
    use Checks;

    /** The lease without a `lease` option, as `tokenlock acquire --redis`. */
    public const DEFAULT_LEASE = 300.0;
    /** The wait without a `wait` option, as Lock::acquire() and the C++ client. */
    public const DEFAULT_WAIT = Command::DEFAULT_WAIT;
    /** The protocol's longest lease, the same for every process. */
    public const MAX_LEASE = 86400.0;

    private const PREFIX = 'tokenlock:';
    /** An owner id: host tag, pid, start time, nonce. */
    private const OWNER = '/\A(.+-[0-9a-f]{8})\.([0-9]+)\.[0-9]+\.[0-9a-f]{16}\z/';
    private const OPTIONS = ['wait', 'lease', 'shared', 'slots', 'connect_timeout', 'command_timeout', 'backend', 'command'];

    private bool $held = true;
    private int $ownerPid;

    /**
     * Each lock's URL, kept out of its properties, which var_export(),
     * (array), serialize() and debug_zval_dump() show whatever
     * __debugInfo() says: the URL may hold a password.
     *
     * @var ?\WeakMap<self, string>
     */
    private static ?\WeakMap $urls = null;

    private static bool $shutdownSet = false;

    /** @param array<string, mixed> $options */
    private function __construct(
        #[\SensitiveParameter] string $url,
        private string $name,
        private string $owner,
        private int|string|null $fence,
        private float $lease,
        /** Null: exclusive; 0: shared (a reader); N: one of N slots. */
        private ?int $slots,
        private array $options,
        private ?Connection $conn,
    ) {
        $this->ownerPid = Native::pid();
        self::$urls ??= new \WeakMap();
        self::$urls[$this] = $url;
        if (!self::$shutdownSet) {
            self::$shutdownSet = true;
            // Queued from a shutdown function, so it runs after the script's own.
            register_shutdown_function(static fn () => register_shutdown_function([self::class, 'releaseAtEnd']));
        }
    }

    /**
     * Releases every grant this process still holds as the request ends,
     * however it ends: a fatal error (memory_limit, max_execution_time)
     * skips destructors, and the grant would stay until its lease ends.
     * A failure is an E_USER_WARNING: there is no caller left to throw to.
     *
     * @internal
     */
    public static function releaseAtEnd(): void
    {
        foreach (self::$urls ?? [] as $lock => $url) {
            if ($lock->isHeld()) {
                try {
                    $lock->release();
                } catch (\Throwable $e) {
                    trigger_error('Tokenlock\RedisLock: releasing as the request ends: ' . $e->getMessage(), E_USER_WARNING);
                }
            }
        }
    }

    /**
     * Acquires the lock NAME in the Redis server at URL.
     *
     * @param array{wait?: int|float|null, lease?: int|float, shared?: bool, slots?: int, connect_timeout?: int|float, command_timeout?: int|float, backend?: string, command?: string} $options
     *        `wait`: seconds to wait (default 10; 0: BusyException at once;
     *        null: as long as it takes); `lease`: seconds the grant lasts
     *        without refresh() (default 300, at most 86400); `shared`:
     *        true for a shared hold (see acquireShared()); `slots`: N from
     *        1 to 999999 for one of N slots (a semaphore), implies `shared`;
     *        `connect_timeout`, `command_timeout`: seconds (default 2 each);
     *        `backend`: `phpredis` or `command` (default: phpredis when
     *        loaded); `command`: the tokenlock command for that backend
     * @throws BusyException|TimeoutException when it stays held
     * @throws Exception `bad_argument` (a bad URL, lease, `shared` or
     *         `slots`, an empty NAME or one ending in :fence, :wake,
     *         :waiters, :handoff, :shared or :writer, the keys of the lock
     *         named without it), `system` (the server cannot be
     *         reached: errno ECONNREFUSED, ETIMEDOUT), `server_error`,
     *         `lock_corrupt` (a key the lock cannot read; the message says
     *         how to repair it)
     */
    public static function acquire(#[\SensitiveParameter] string $url, string $name, array $options = []): self
    {
        return self::take($url, $name, $options, true);
    }

    /**
     * Acquires the lock NAME shared: any number of shared holders hold it
     * at once, and no writer (an acquire() without `shared`) beside them.
     * A writer that comes marks the lock and waits for the shared holders
     * in it to leave; from then on new shared holders wait behind it
     * (writer preference: a stream of readers cannot starve it), and the
     * last one out hands the lock to it. With `slots` N, at most N holders
     * at once (a semaphore); holders of another count, or readers at a
     * semaphore, wait for each other. Each holder has its own lease: one
     * that is not released (its process killed) leaves when its lease
     * ends, whatever the others do.
     *
     * A shared hold has no fence (fence() is null): take the lock
     * exclusively to write. refresh() renews this holder's lease alone;
     * release() and refresh() of a hold whose lease ended throw
     * LockLostException and leave nothing of it behind.
     *
     * @param array{wait?: int|float|null, lease?: int|float, slots?: int, connect_timeout?: int|float, command_timeout?: int|float, backend?: string, command?: string} $options as acquire()
     * @throws BusyException|TimeoutException|Exception as acquire()
     */
    public static function acquireShared(#[\SensitiveParameter] string $url, string $name, array $options = []): self
    {
        return self::take($url, $name, ['shared' => true] + $options, true);
    }

    /**
     * Like acquire(), without waiting: null when the lock is held.
     *
     * @param array<string, mixed> $options as for acquire() (`shared` and
     *        `slots` too); `wait` is ignored
     */
    public static function tryAcquire(#[\SensitiveParameter] string $url, string $name, array $options = []): ?self
    {
        try {
            return self::take($url, $name, ['wait' => 0] + $options, false);
        } catch (NotAcquiredException $e) {
            return null;
        }
    }

    /**
     * Who holds the lock NAME: null when free, else `owner`, `fence`,
     * `remaining` (seconds of its lease, on the server's clock), `pid` and
     * `host_tag` (read from the owner id), `mode` and `slots` (as
     * holders() says them). While shared holders hold: the first of them,
     * whose `fence` is null.
     *
     * @param array<string, mixed> $options as for acquire()
     * @return array{owner: string, fence: int|string|null, remaining: float, pid: int, host_tag: string, mode: string, slots: int}|null
     */
    public static function holder(#[\SensitiveParameter] string $url, string $name, array $options = []): ?array
    {
        $o = self::options('status', $url, $name, $options);
        if ($o['backend'] === 'command') {
            $all = self::holdersByCommand($url, $name, $o);
            return $all === [] || $all[0]['mode'] === 'waiting' ? null : $all[0];
        }
        $conn = self::connect($url, $o);
        $r = $conn->run('status', Scripts::HOLDER, [self::PREFIX . $name], []);
        self::checkCorrupt($r, $conn, 'status', $name);
        if (!is_array($r) || !isset($r[0])) {
            throw self::unexpected('status', $conn);
        }
        if ($r[0] !== 1) {
            return null;
        }
        if ($r[1] !== Waiter::SHARED_OWNER) {
            return self::holderInfo((string) $r[1], $r[2], (int) $r[3]);
        }
        $all = self::holdersOf($conn, $name);
        return $all === [] || $all[0]['mode'] === 'waiting' ? null : $all[0];
    }

    /**
     * Every holder of the lock NAME with a live lease, as holder()
     * describes one: an empty list when it is free; one `exclusive`
     * holder; or the shared holders (at most the first 500), each with
     * `mode` 'shared' (a reader) or 'slot' (one of `slots` N), then a
     * writer waiting for them, `mode` 'waiting' (`remaining`: of its mark).
     * Changes nothing.
     *
     * @param array<string, mixed> $options as for acquire()
     * @return list<array{owner: string, fence: int|string|null, remaining: float, pid: int, host_tag: string, mode: string, slots: int}>
     */
    public static function holders(#[\SensitiveParameter] string $url, string $name, array $options = []): array
    {
        $o = self::options('status', $url, $name, $options);
        if ($o['backend'] === 'command') {
            return self::holdersByCommand($url, $name, $o);
        }
        return self::holdersOf(self::connect($url, $o), $name);
    }

    /**
     * The holders script's answer (holders.lua): kind, fence, lease left,
     * the mark's owner and time left, the limit, the count, then owner and
     * ms left of each shared holder.
     *
     * @return list<array<string, mixed>>
     */
    private static function holdersOf(Connection $conn, string $name): array
    {
        $r = $conn->run('status', Scripts::HOLDERS, Waiter::keys(self::PREFIX . $name), []);
        self::checkCorrupt($r, $conn, 'status', $name);
        if (!is_array($r) || count($r) < 7 || !is_int($r[0]) || count($r) % 2 === 0) {
            throw self::unexpected('status', $conn);
        }
        [$kind, $fence, , $mark, $markMs, $limit] = $r;
        $mode = $kind === 2 ? ($limit > 0 ? 'slot' : 'shared') : 'exclusive';
        $out = [];
        for ($i = 7; $i + 1 < count($r); $i += 2) {
            $out[] = self::holderInfo((string) $r[$i], $fence, (int) $r[$i + 1], $mode, (int) $limit);
        }
        if ($mark !== '') {
            $out[] = self::holderInfo((string) $mark, null, (int) $markMs, 'waiting');
        }
        return $out;
    }

    /**
     * Every holder as `tokenlock status --json` lists them.
     *
     * @param array<string, mixed> $o
     * @return list<array<string, mixed>>
     */
    private static function holdersByCommand(#[\SensitiveParameter] string $url, string $name, array $o): array
    {
        $status = json_decode(CommandClient::run('status', $url, ['--json', '--', $name], $o), true);
        if (!is_array($status) || !isset($status['state']) || ($status['state'] === 'held' && !is_array($status['holders'] ?? null))) {
            throw new Exception('command_failed', "tokenlock: status " . Connection::serverOf($url) . " $name: the command did not print a JSON status with its holders; is it older than this module? Use the tokenlock command of the same release", 70);
        }
        $out = [];
        foreach ($status['state'] === 'held' ? $status['holders'] : [] as $h) {
            $slots = (int) ($h['slots'] ?? 0);
            $mode = !empty($h['waiting_writer']) ? 'waiting' : (($h['mode'] ?? '') === 'shared' ? ($slots > 0 ? 'slot' : 'shared') : 'exclusive');
            $out[] = self::holderInfo((string) $h['owner'], $h['fence'] ?? 0, (int) $h['remaining_ms'], $mode, $slots);
        }
        return $out;
    }

    /**
     * The grant's fencing token: larger than every earlier grant's of
     * NAME. Null for a shared hold, which fences nothing.
     */
    public function fence(): int|string|null
    {
        return $this->slots === null ? $this->fence : null;
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

    /** The holder's id, `<host>-<hash8>.<pid>.<start>.<nonce>`. */
    public function owner(): string
    {
        return $this->owner;
    }

    /**
     * fence.owner, as `tokenlock acquire --redis` prints it and release
     * takes it; a shared hold's is its owner id alone, as the command
     * prints it.
     */
    public function token(): string
    {
        return $this->slots === null ? $this->fence . '.' . $this->owner : $this->owner;
    }

    public function name(): string
    {
        return $this->name;
    }

    /** Whether this object still holds the grant: false after release() or a lost lock. */
    public function isHeld(): bool
    {
        return $this->held && Native::pid() === $this->ownerPid;
    }

    /**
     * Starts a new lease of $lease seconds (default: the last one) from now.
     *
     * @throws LockLostException when the grant is gone (the reason is in the message)
     * @throws Exception `not_owner` after release() or in a forked child
     */
    public function refresh(int|float|null $lease = null): void
    {
        $this->checkOwner('refresh');
        $lease = $lease === null ? $this->lease : self::lease($lease);
        $this->settle('refresh', $lease);
        $this->lease = $lease;
    }

    /**
     * Releases the grant. Does nothing when already released.
     *
     * @throws LockLostException when the grant was lost meanwhile: the work
     *         done under it may have overlapped another holder's
     * @throws Exception `not_owner` in a forked child; others (the server
     *         cannot be reached) leave the grant to end with its lease
     */
    public function release(): void
    {
        if (!$this->held) {
            return;
        }
        $this->checkOwner('release');
        $this->settle('release', $this->lease);
    }

    /** Releases a grant still held, only in the process that took it. */
    public function __destruct()
    {
        if (!$this->held || Native::pid() !== $this->ownerPid) {
            return;
        }
        try {
            $this->release();
        } catch (Exception $e) {
            trigger_error('Tokenlock\RedisLock: releasing on destruction: ' . $e->getMessage(), E_USER_WARNING);
        }
    }

    /**
     * What var_dump() and print_r() show: the server without the URL's
     * user and password.
     *
     * @return array<string, mixed>
     */
    public function __debugInfo(): array
    {
        return ['server' => Connection::serverOf(self::$urls[$this]), 'name' => $this->name, 'owner' => $this->owner,
            'fence' => $this->fence(), 'mode' => $this->mode(), 'slots' => $this->slots(), 'lease' => $this->lease, 'held' => $this->isHeld()];
    }

    // A copy would release the same grant twice.
    private function __clone()
    {
    }

    /**
     * Refused, as a copy is: an unserialized copy would be a second handle
     * to the same grant (and the string would carry the URL's password).
     */
    public function __serialize(): array
    {
        throw new \LogicException('Tokenlock\\RedisLock cannot be serialized: a copy would be a second handle to the same grant');
    }

    /** @param array<mixed> $data */
    public function __unserialize(array $data): void
    {
        throw new \LogicException('Tokenlock\\RedisLock cannot be unserialized: only the process that acquired a grant holds it');
    }

    /** @param array<string, mixed> $options */
    private static function take(#[\SensitiveParameter] string $url, string $name, array $options, bool $mayWait): self
    {
        $o = self::options('acquire', $url, $name, $options);
        if ($o['backend'] === 'command') {
            return self::takeByCommand($url, $name, $o);
        }
        $conn = self::connect($url, $o);
        $owner = self::ownerId();
        $fence = (new Waiter($conn, self::PREFIX . $name, $name, $owner, $o))->acquire($mayWait);
        return new self($url, $name, $owner, $fence, $o['lease'], $o['slots'], $o, $conn);
    }

    /** @param array<string, mixed> $o */
    private static function takeByCommand(#[\SensitiveParameter] string $url, string $name, array $o): self
    {
        $args = $o['wait'] === null ? [] : ($o['wait'] <= 0 ? ['--nonblock'] : ['--wait', Command::formatSeconds($o['wait'])]);
        if ($o['slots'] !== null) {
            array_push($args, ...($o['slots'] === 0 ? ['--shared'] : ['--slots', (string) $o['slots']]));
        }
        array_push($args, '--lease', Command::formatSeconds($o['lease']), '--', $name);
        $token = trim(CommandClient::run('acquire', $url, $args, $o, $o['wait'] !== null && $o['wait'] <= 0 ? 'busy' : 'timed_out'));
        // A shared hold's token is its owner id alone: it has no fence.
        $ok = $o['slots'] === null ? preg_match('/\A([0-9]{1,19})\.(.+)\z/', $token, $m) : preg_match(self::OWNER, $token, $m);
        if (!$ok) {
            throw new Exception('command_failed', "tokenlock: acquire " . Connection::serverOf($url) . " $name: the command printed \"$token\", not a token; is it older than this module? Use the tokenlock command of the same release", 70);
        }
        return $o['slots'] === null ? new self($url, $name, $m[2], Command::toInt($m[1]), $o['lease'], null, $o, null)
            : new self($url, $name, $token, null, $o['lease'], $o['slots'], $o, null);
    }

    /** Runs the settle script (release or refresh of our grant or share). */
    private function settle(string $step, float $lease): void
    {
        if ($this->conn === null) {
            $this->settleByCommand($step, $lease);
            return;
        }
        $key = self::PREFIX . $this->name;
        $r = $this->slots === null
            ? $this->conn->run($step, Scripts::SETTLE, array_slice(Waiter::keys($key), 0, 5), [$this->owner, (string) $this->fence, (string) self::ms($lease), $step])
            : $this->conn->run($step, Scripts::SETTLE_SHARED, Waiter::keys($key), [$this->owner, $step, (string) self::ms($lease)]);
        if ($r === 1) {
            $this->held = $step !== 'release';
            return;
        }
        try {
            self::checkCorrupt($r, $this->conn, $step, $this->name);
        } catch (Exception $e) {
            $this->held = false;
            throw $e;
        }
        if (!is_array($r) || count($r) < 3) {
            throw self::unexpected($step, $this->conn);
        }
        $this->held = false;
        throw new LockLostException('lock_lost', "tokenlock: $step {$this->conn->server()} {$this->name}: " . $this->lostWhy((string) $r[1], (string) $r[2]), 3);
    }

    /** Why the grant or share is no longer ours, from the settle script's answer. */
    private function lostWhy(string $kind, string $other): string
    {
        if ($this->slots === null) {
            return "the grant (fence {$this->fence}) is no longer ours: " . self::lostReason($kind, $other, (string) $this->fence);
        }
        $why = match ($kind) {
            'taken' => "our lease ended, and a writer (fence $other) holds the lock",
            'expired' => 'our lease ended (our share is removed)',
            default => self::lostReason($kind, $other, ''),
        };
        return "the shared hold of {$this->owner} is no longer ours: $why";
    }

    private function settleByCommand(string $step, float $lease): void
    {
        $args = $step === 'refresh' ? ['--lease', Command::formatSeconds($lease)] : [];
        // The token as the command printed it: fence.owner, or a share's
        // owner alone (a share has no fence).
        array_push($args, '--token', $this->token(), '--', $this->name);
        try {
            CommandClient::run($step, self::$urls[$this], $args, $this->options);
        } catch (LockLostException $e) {
            $this->held = false;
            throw $e;
        }
        $this->held = $step !== 'release';
    }

    private function checkOwner(string $step): void
    {
        if (!$this->held || Native::pid() !== $this->ownerPid) {
            throw new Exception('not_owner', "tokenlock: $step: this RedisLock does not hold a grant (released, lost, or inherited by a forked child)", 70);
        }
    }

    /** @param array<string, mixed> $o */
    private static function connect(#[\SensitiveParameter] string $url, array $o): Connection
    {
        return new Connection($url, $o['connect_timeout'], $o['command_timeout']);
    }
}
