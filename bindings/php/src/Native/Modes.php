<?php

declare(strict_types=1);

namespace Tokenlock\Native;

/**
 * A hold's mode changed in place, never waiting (what Symfony's Lock asks
 * of a store: a read lock promoted to a write lock when no other reader
 * holds, a write lock demoted to a read lock), and whether a hold is
 * still in the lock directory.
 *
 * Both are renames of the exact name a listing showed, as a writer's
 * takeover of a cover with no live entry is (docs/protocol.md, Shared locks and semaphores: A
 * writer): a promotion succeeds only if no other live entry was in the
 * listing made after the cover was seen, and a joiner's rename that would
 * have added one then fails.
 *
 * @internal
 */
trait Modes
{
    /**
     * The shared hold HOLD becomes a writer's token, or null (it stays
     * shared) when other shared holders or a writer's mark are there.
     */
    public static function promote(string $dir, string $hold, int $leaseUs): ?string
    {
        $mine = self::token(self::nowUs() + $leaseUs);
        if (!str_starts_with($hold, self::ENTRY)) {
            $errno = self::rename("$dir/$hold", "$dir/$mine");
            if ($errno === 0) {
                self::unhold($hold);
                self::hold($dir, $mine);
                return $mine;
            }
            if ($errno !== 2) {
                throw self::systemError('acquire', $dir, "cannot rename our lone share $hold to a writer's token", $errno);
            }
        }
        $seen = self::look($dir);
        $share = $seen[0] === 'held' ? self::shareOf($seen[1][1]) : null;
        if ($share === null || $share[0] !== self::COVER) {
            return null;
        }
        $cover = $seen[1][0];
        $e = self::tokenUsable($dir, $cover, 'acquire') ? self::entries($dir, $cover) : null;
        $ours = $e === null ? [] : self::oursIn($hold, $e[0]);
        if ($ours === [] || count($e[0]) > count($ours) || $e[2]) {
            return null;
        }
        if (self::rename("$dir/$cover", "$dir/$mine") !== 0) {
            return null;
        }
        foreach ($ours as $entry) {
            self::removeEntryAt("$dir/$mine/$entry");
        }
        self::removeStale($dir, $mine, $e[1], 'acquire');
        self::unhold($hold);
        self::hold($dir, $mine);
        return $mine;
    }

    /**
     * The entries of LIVE that are the share HOLD: our entry, or every
     * copy of our converted lone share.
     *
     * @param array<string, string> $live
     * @return list<string>
     */
    private static function oursIn(string $hold, array $live): array
    {
        if (str_starts_with($hold, self::ENTRY)) {
            return isset($live[$hold]) ? [$hold] : [];
        }
        $prefix = self::ourCopyPrefix($hold);
        return array_values(array_filter(array_keys($live), fn (string $n) => self::isCopy($n, $prefix)));
    }

    /** The writer's token TOKEN becomes a lone share of LIMIT (0: a reader). */
    public static function demote(string $dir, string $token, int $leaseUs, int $limit): string
    {
        $c = self::classify($token);
        $lone = self::shareName(max($c[1]['expiry'] + 1, self::nowUs() + $leaseUs), self::LONE, $limit);
        $errno = self::rename("$dir/$token", "$dir/$lone");
        if ($errno === 2) {
            self::unhold($token);
            throw self::lost('acquire', $dir, $token);
        }
        if ($errno !== 0) {
            throw self::systemError('acquire', $dir, "cannot rename our token $token to a lone share", $errno);
        }
        self::unhold($token);
        self::hold($dir, $lone);
        return $lone;
    }

    /**
     * Whether HOLD (a token, a lone share or an entry) is still in DIR
     * with its lease not ended.
     */
    public static function stillHeld(string $dir, string $hold): bool
    {
        if (self::expiryOf($hold) <= self::nowUs()) {
            return false;
        }
        if (str_starts_with($hold, self::ENTRY)) {
            $where = self::locate($dir, $hold, 'status');
            return $where !== null && self::isCover($where[1]);
        }
        clearstatcache(true, "$dir/$hold");
        if (@lstat("$dir/$hold") !== false) {
            return true;
        }
        return self::isShare($hold) && self::findCopies($dir, $hold, 'status') !== null;
    }
}
