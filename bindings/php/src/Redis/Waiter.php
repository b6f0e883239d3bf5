<?php
/**
 * One acquisition of a Redis lock through phpredis, as the C++ client
 * makes it (lib/src/redis/redis_lock.cpp, acquire_impl): attempts by the
 * acquire script (acquire_shared for a share); a refused caller that will
 * wait is counted as a waiter and blocks on the wake list (BLPOP) until a
 * release wakes it or the holder's lease ends, and its next attempt says
 * so, so that it takes the free lock the release kept for it
 * (docs/redis.md, Hand-off). A writer that finds shared holders marks the
 * lock, which bars new ones, and its grant removes the mark (Shared locks
 * and semaphores).
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
    /** The grant's owner id while shared holders hold (shared.lua). */
    public const SHARED_OWNER = 'shared-00000000.0.0.0000000000000000';

    /** @var list<string> the grant, :fence, :wake, :waiters, :handoff, :shared, :writer */
    private array $keys;
    /** An earlier attempt's mark bars shared holders for us: our grant removes it. */
    private bool $marked = false;

    /** @param array{wait: ?float, lease: float, slots: ?int, command_timeout: float} $o */
    public function __construct(
        private Connection $conn,
        string $key,
        private string $name,
        private string $owner,
        private array $o,
    ) {
        $this->keys = self::keys($key);
    }

    /**
     * The seven keys of the lock whose grant is KEY, in the scripts' order.
     *
     * @return list<string>
     */
    public static function keys(string $key): array
    {
        return array_map(fn (string $s) => $key . $s, ['', ':fence', ':wake', ':waiters', ':handoff', ':shared', ':writer']);
    }

    /**
     * The fence of the grant (of the shared grant, for a share).
     *
     * @throws BusyException|TimeoutException when the lock stays held
     */
    public function acquire(bool $mayWait): int
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
            $a = $this->attempt($before, $countMs);
            if ($a['granted']) {
                return $a['fence'];
            }
            $this->marked = $this->marked || $a['why'] === 'marked';
            if (!$willWait) {
                throw $this->refused($a, $mayWait && $wait > 0, $wait);
            }
            $block = min($left, $a['pttl'] >= 0 ? $this->blockBound($a) + 1 : $left);
            $woken = $this->conn->blockingPop($this->keys[2], max(1, $block) / 1000);
            $before = $woken ? '2' : '1';
        }
    }

    /**
     * How long a refused caller blocks at most: the holder's lease, and a
     * third of ours while our mark waits, since each attempt renews the
     * mark, which expires with our lease.
     *
     * @param array{pttl: int, why: string} $a
     */
    private function blockBound(array $a): int
    {
        return $a['why'] === 'marked' ? min($a['pttl'], intdiv(RedisLock::ms($this->o['lease']), 3)) : $a['pttl'];
    }

    /**
     * One run of the acquire script.
     *
     * @return array{granted: bool, fence: int, pttl: int, holder: string, why: string, limit: int}
     *         the lease left (ms: of the holder's, or of the hand-off), the
     *         holder, why refused (the scripts' word) and the holders' limit
     */
    private function attempt(string $before, int $countMs): array
    {
        $shared = $this->o['slots'] !== null;
        $last = $shared ? (string) $this->o['slots'] : ($this->marked ? '1' : '0');
        $r = $this->conn->run('acquire', $shared ? Scripts::ACQUIRE_SHARED : Scripts::ACQUIRE, $this->keys, [
            $this->owner, (string) RedisLock::ms($this->o['lease']), (string) self::FENCE_TTL_MS, $before, (string) $countMs, $last,
        ]);
        RedisLock::checkCorrupt($r, $this->conn, 'acquire', $this->name);
        if (is_int($r)) {
            // The common answer: a fresh grant, the fence alone.
            return ['granted' => true, 'fence' => $r, 'pttl' => RedisLock::ms($this->o['lease']), 'holder' => $this->owner, 'why' => '', 'limit' => 0];
        }
        if (!is_array($r) || count($r) < 5 || !is_int($r[0])) {
            throw RedisLock::unexpected('acquire', $this->conn);
        }
        // The scripts keep every fence below 2^63: it fits PHP's int.
        if (!is_int($r[2]) && !preg_match('/\A[0-9]{1,19}\z/', (string) $r[2])) {
            throw RedisLock::unexpected('acquire', $this->conn);
        }
        return ['granted' => $r[0] === 1, 'fence' => (int) $r[2], 'pttl' => (int) $r[3], 'holder' => (string) $r[1],
            'why' => (string) ($r[5] ?? ''), 'limit' => (int) ($r[6] ?? 0)];
    }

    /** @param array{fence: int, pttl: int, holder: string, why: string, limit: int} $a */
    private function refused(array $a, bool $waited, float $wait): BusyException|TimeoutException
    {
        $reason = $this->reason($a);
        $where = "tokenlock: acquire {$this->conn->server()} {$this->name}";
        if (!$waited) {
            return new BusyException('busy', "$where: the lock is $reason", 1);
        }
        return new TimeoutException('timed_out', "$where: waited " . RedisLock::ms($wait) . " ms; the lock is $reason", 1);
    }

    /**
     * Why the lock was refused, in the C++ client's words: "held by ...".
     *
     * @param array{fence: int, pttl: int, holder: string, why: string, limit: int} $a
     */
    private function reason(array $a): string
    {
        if ($a['holder'] === '') {
            return sprintf('free, and kept %.3f s more for the waiter the last release woke', $a['pttl'] / 1000);
        }
        $left = sprintf(", %.3f s of the shared holders' leases left", $a['pttl'] / 1000);
        return match (true) {
            $a['why'] === 'marked' || ($a['why'] === '' && $a['holder'] === self::SHARED_OWNER) => "held by shared holders$left",
            $a['why'] === 'mark' => 'held or kept by shared holders, and a writer (' . RedisLock::describeOwner($a['holder'])
                . ") waits for them, which bars new shared holders$left",
            $a['why'] === 'limit' => 'held by ' . self::slotsText($a['limit']) . ', and this lock asks for ' . self::slotsText((int) $this->o['slots'])
                . " (every process of a lock gives the same count; this one waits until those holders are gone)$left",
            $a['why'] === 'full' => "full: all {$a['limit']} slots of the semaphore are held$left",
            default => RedisLock::describeHolder($a['holder'], $a['fence'], $a['pttl']),
        };
    }

    private static function slotsText(int $n): string
    {
        return $n === 0 ? 'shared holders without a limit' : "a semaphore of $n " . ($n === 1 ? 'slot' : 'slots');
    }
}
