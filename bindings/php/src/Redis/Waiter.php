<?php
/**
 * One acquisition of a Redis lock through phpredis, as the C++ client
 * makes it (lib/src/redis/redis_lock.cpp, acquire_impl): attempts by the
 * acquire script; a refused caller that will wait is counted as a waiter
 * and blocks on the wake list (BLPOP) until a release wakes it or the
 * holder's lease ends, and its next attempt says so, so that it takes
 * the free lock the release kept for it (docs/redis.md, Hand-off).
 *
 * @internal
 */

declare(strict_types=1);

namespace Tokenlock\Redis;

use Tokenlock\BusyException;
use Tokenlock\RedisLock;
use Tokenlock\TimeoutException;

final class Waiter
{
    private const FENCE_TTL_MS = 86400000;
    /** A wait without limit, in seconds: a century. */
    private const FOREVER = 3.15e9;

    /** @var list<string> the grant, :fence, :wake, :waiters, :handoff */
    private array $keys;

    /** @param array{wait: ?float, lease: float, command_timeout: float} $o */
    public function __construct(
        private Connection $conn,
        string $key,
        private string $name,
        private string $owner,
        private array $o,
    ) {
        $this->keys = [$key, "$key:fence", "$key:wake", "$key:waiters", "$key:handoff"];
    }

    /**
     * The fence of the grant.
     *
     * @throws BusyException|TimeoutException when the lock stays held
     */
    public function acquire(bool $mayWait): int|string
    {
        $wait = $mayWait ? ($this->o['wait'] ?? self::FOREVER) : 0.0;
        $deadline = microtime(true) + $wait;
        $before = '0';
        for (;;) {
            $left = RedisLock::ms($deadline - microtime(true));
            // Counted only while it will wait: a caller that gives up after
            // this attempt leaves no count behind to wake nobody.
            $willWait = $mayWait && $left > 0;
            $countMs = $willWait ? $left + 2 * RedisLock::ms($this->o['command_timeout']) : 0;
            [$granted, $fence, $pttl, $holder] = $this->attempt($before, $countMs);
            if ($granted) {
                return $fence;
            }
            if (!$willWait) {
                throw $this->refused($holder, $fence, $pttl, $mayWait && $wait > 0, $wait);
            }
            $block = min($left, $pttl >= 0 ? $pttl + 1 : $left);
            $woken = $this->conn->blockingPop($this->keys[2], max(1, $block) / 1000);
            $before = $woken ? '2' : '1';
        }
    }

    /**
     * One run of the acquire script.
     *
     * @return array{0: bool, 1: int|string, 2: int, 3: string} granted, fence, the
     *         lease left (ms: of the holder's, or of the hand-off), the holder
     */
    private function attempt(string $before, int $countMs): array
    {
        $r = $this->conn->run('acquire', Scripts::ACQUIRE, $this->keys, [
            $this->owner, (string) RedisLock::ms($this->o['lease']), (string) self::FENCE_TTL_MS, $before, (string) $countMs,
        ]);
        RedisLock::checkCorrupt($r, $this->conn, 'acquire', $this->name);
        if (is_int($r)) {
            // The common answer: a fresh grant, the fence alone.
            return [true, $r, RedisLock::ms($this->o['lease']), $this->owner];
        }
        if (!is_array($r) || count($r) < 5 || !is_int($r[0])) {
            throw RedisLock::unexpected('acquire', $this->conn);
        }
        // The scripts keep every fence below 2^63: it fits PHP's int.
        if (!is_int($r[2]) && !preg_match('/\A[0-9]{1,19}\z/', (string) $r[2])) {
            throw RedisLock::unexpected('acquire', $this->conn);
        }
        $fence = (int) $r[2];
        return [$r[0] === 1, $fence, (int) $r[3], (string) $r[1]];
    }

    private function refused(string $holder, int|string $fence, int $pttl, bool $waited, float $wait): BusyException|TimeoutException
    {
        $reason = $holder !== ''
            ? RedisLock::describeHolder($holder, $fence, $pttl)
            : sprintf('free, and kept %.3f s more for the waiter the last release woke', $pttl / 1000);
        $where = "tokenlock: acquire {$this->conn->server()} {$this->name}";
        if (!$waited) {
            return new BusyException('busy', "$where: the lock is $reason", 1);
        }
        return new TimeoutException('timed_out', "$where: waited " . RedisLock::ms($wait) . " ms; the lock is $reason", 1);
    }
}
