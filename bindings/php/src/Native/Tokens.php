<?php

declare(strict_types=1);

namespace Tokenlock\Native;

use Tokenlock\Command;
use Tokenlock\Exception;

/**
 * Token names made, read and judged (token_name.cpp, lock_directory.cpp):
 * whether a holder's lease is over or its process is gone.
 *
 * @internal
 */
trait Tokens
{
    /** A fresh token of this process for a lease ending at $expiry. */
    public static function token(int $expiry): string
    {
        $me = self::identity();
        return self::PREFIX . $expiry . '.' . $me['owner'] . self::nonce($me['pid']);
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

    public static function utc(int $us): string
    {
        return gmdate('Y-m-d\TH:i:s', intdiv($us, 1000000)) . sprintf('.%06dZ', $us % 1000000) ;
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
}
