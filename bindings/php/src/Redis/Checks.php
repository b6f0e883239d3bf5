<?php

declare(strict_types=1);

namespace Tokenlock\Redis;

use Tokenlock\Command;
use Tokenlock\Exception;
use Tokenlock\Lock;
use Tokenlock\Native;

/**
 * RedisLock's arguments checked (options, name, lease), and Redis's
 * replies judged and described: a holder, a lost lock, a reply that is
 * not the scripts', and the owner id, the file locks' identity.
 *
 * @internal
 */
trait Checks
{
    /**
     * The options, checked and with their defaults.
     *
     * @param array<string, mixed> $options
     * @return array{wait: ?float, lease: float, slots: ?int, connect_timeout: float, command_timeout: float, backend: string, command?: string}
     * @throws Exception `bad_argument` for an empty name, or one that ends in a suffix of the keys,
     *         and for `shared` or `slots` as Lock::acquire() refuses them
     */
    private static function options(string $step, #[\SensitiveParameter] string $url, string $name, array $options): array
    {
        Command::checkKeys($options, self::OPTIONS, 'RedisLock');
        if ($name === '') {
            throw new Exception('bad_argument', 'tokenlock: bad redis_lock arguments: the lock name is empty', 64);
        }
        self::checkName($step, $url, $name);
        $o = $options;
        $o['wait'] = array_key_exists('wait', $options) ? Command::seconds($options['wait'], 'wait') : self::DEFAULT_WAIT;
        $o['lease'] = self::lease($options['lease'] ?? self::DEFAULT_LEASE);
        // The lock directory's options, read by the same rules: null
        // (exclusive), 0 (a reader) or N (one of N slots).
        $o['slots'] = Lock::slotsOption($options);
        foreach (['connect_timeout', 'command_timeout'] as $t) {
            $o[$t] = Command::seconds($options[$t] ?? 2.0, $t) ?? 2.0;
            if ($o[$t] <= 0) {
                throw new \InvalidArgumentException("Tokenlock\\RedisLock: $t must be more than 0 seconds");
            }
        }
        $o['backend'] = $options['backend'] ?? (extension_loaded('redis') ? 'phpredis' : 'command');
        if ($o['backend'] === 'phpredis' && !extension_loaded('redis')) {
            throw new \InvalidArgumentException("Tokenlock\\RedisLock: backend 'phpredis' asked for, but the redis extension is not loaded");
        }
        if (!in_array($o['backend'], ['phpredis', 'command'], true)) {
            throw new \InvalidArgumentException("Tokenlock\\RedisLock: backend must be 'phpredis' or 'command'");
        }
        return $o;
    }

    /**
     * Refuses a name whose grant would be a key of another lock's: the
     * lock X keeps tokenlock:X:fence, :wake, :waiters, :handoff, :shared
     * and :writer.
     */
    private static function checkName(string $step, #[\SensitiveParameter] string $url, string $name): void
    {
        if (!preg_match('/:(fence|wake|waiters|handoff|shared|writer)\z/', $name, $m)) {
            return;
        }
        $owner = substr($name, 0, -strlen($m[0]));
        throw new Exception('bad_argument', "tokenlock: $step " . Connection::serverOf($url) . " $name: bad lock name: a lock name must not end in :fence, :wake, :waiters, :handoff, :shared or :writer: "
            . "those are the keys of the lock named without that suffix (here \"$owner\"); nothing was read or written: choose a name without that ending", 64);
    }

    /** A lease in seconds, within the protocol's bounds. */
    private static function lease(int|float $lease): float
    {
        if (is_nan((float) $lease) || $lease > self::MAX_LEASE || self::ms((float) $lease) < 1) {
            throw new Exception('bad_argument', "tokenlock: bad redis_lock arguments: the lease must be more than 0 and at most 24 hours (the protocol's maximum lease, the same for every process); it is $lease s", 64);
        }
        return (float) $lease;
    }

    public static function ms(float $seconds): int
    {
        return (int) round($seconds * 1000);
    }

    /**
     * A script's answer about a key the lock cannot use ({-1, key, value,
     * length, why}) as `lock_corrupt`, with the repair.
     */
    public static function checkCorrupt(mixed $r, Connection $conn, string $step, string $name): void
    {
        if (!is_array($r) || ($r[0] ?? null) !== -1 || count($r) < 5) {
            return;
        }
        [, $key, $value, $length, $why] = $r;
        $shown = addcslashes((string) $value, "\0..\37\177..\377\\");
        $holds = str_starts_with((string) $why, 'type ') ? 'a ' . substr((string) $why, 5) . ', not a string' : "\"$shown\"" . ($length > 100 ? " ... ($length bytes)" : '');
        $fix = str_ends_with((string) $key, ':fence')
            ? "set it to a fence above every fence already handed out for this lock: redis-cli SET $key FENCE"
            : ($why === 'persistent' ? "once its holder is gone: redis-cli DEL $key, or give it a lease: redis-cli PEXPIRE $key MILLISECONDS"
                : "once no process uses the lock, delete it: redis-cli DEL $key");
        throw new Exception('lock_corrupt', "tokenlock: $step {$conn->server()} $name: the key $key holds $holds, which the lock cannot use ($why); fix: $fix", 69);
    }

    public static function unexpected(string $step, Connection $conn): Exception
    {
        return new Exception('system', "tokenlock: $step {$conn->server()}: the server's reply has an unexpected shape (is it Redis 5 or newer?)", 69, [], null, 71);
    }

    /** "pid 123 on host web-1a2b3c4d", or the owner id as it is. */
    public static function describeOwner(string $owner): string
    {
        return preg_match(self::OWNER, $owner, $m) ? "pid {$m[2]} on host {$m[1]}" : addcslashes($owner, "\0..\37\177..\377\\");
    }

    /** "held by pid 123 on host web-1a2b3c4d (fence 17), 2.500 s of its lease left". */
    public static function describeHolder(string $owner, int|string $fence, int $pttlMs): string
    {
        $who = self::describeOwner($owner);
        return "held by $who (fence $fence)" . ($pttlMs >= 0 ? sprintf(', %.3f s of its lease left', $pttlMs / 1000) : '');
    }

    private static function lostReason(string $kind, string $other, string $mine): string
    {
        return match ($kind) {
            'taken', 'newer' => "our lease ended and a newer grant (fence $other) took the lock after ours ($mine)",
            'expired' => 'our lease ended (nobody has taken the lock since)',
            default => "the server lost the lock's state (a restart without persistence, FLUSHALL, or a failover to a replica that missed our grant)",
        };
    }

    /**
     * One holder as holder() and holders() describe it: `mode` is
     * 'exclusive', 'shared' (a reader), 'slot' (one of `slots` N) or
     * 'waiting' (a writer whose mark bars new shared holders); a shared
     * holder's and a waiting writer's `fence` is null: a shared grant
     * fences nothing.
     *
     * @return array{owner: string, fence: int|string|null, remaining: float, pid: int, host_tag: string, mode: string, slots: int}
     */
    private static function holderInfo(string $owner, int|string|null $fence, int $pttlMs, string $mode = 'exclusive', int $slots = 0): array
    {
        $parsed = preg_match(self::OWNER, $owner, $m);
        return [
            'owner' => $owner,
            'fence' => $mode !== 'exclusive' ? null : (is_int($fence) ? $fence : Command::toInt((string) $fence)),
            'remaining' => max(0, $pttlMs) / 1000.0,
            'pid' => $parsed ? (int) $m[2] : 0,
            'host_tag' => $parsed ? $m[1] : '',
            'mode' => $mode,
            'slots' => $slots,
        ];
    }

    /**
     * A new owner id, `<host>-<hash8>.<pid>.<start>.<nonce16>`: the file
     * lock's identity of this process (docs/protocol.md, Token grammar), as
     * the C++ library makes it, so that its holder() and `tokenlock status
     * --redis` read the pid and host.
     */
    public static function ownerId(): string
    {
        $me = Native::identity();
        return $me['owner'] . Native::nonce($me['pid']);
    }

    /**
     * `<host>-<hash8>`: FNV-1a over boot id, pid namespace and host name
     * (a random one where /proc cannot be read, as for the file lock).
     */
    public static function hostTag(): string
    {
        return Native::identity()['tag'];
    }
}
