<?php

declare(strict_types=1);

namespace Tokenlock\Native;

use Tokenlock\LockLostException;

/**
 * A shared holder's release and refresh (docs/protocol.md, Shared locks and semaphores): the lone
 * share's one rename each way; a group member's entry removed or renewed,
 * and the last one out freeing the cover or handing a draining cover to
 * its writer.
 *
 * @internal
 */
trait Leaving
{
    /** Releases the shared hold HOLD (a lone share's name or our entry). */
    private static function releaseShared(string $dir, string $hold): void
    {
        if (!str_starts_with($hold, self::ENTRY)) {
            $errno = self::rename("$dir/$hold", "$dir/" . self::FREE);
            if ($errno === 0) {
                self::unhold($hold);
                return;
            }
            if ($errno !== 2) {
                throw self::systemError('release', $dir, "cannot rename the lone share $hold to " . self::FREE, $errno);
            }
            // Converted (our share is the copies of it in a cover), or taken over.
            $found = self::dropCopies($dir, $hold, 'release');
            self::unhold($hold);
            if (!$found) {
                throw self::lost('release', $dir, $hold);
            }
            self::lastOut($dir, 'release');
            return;
        }
        $where = null;
        $found = self::dropEntry($dir, $hold, $where);
        self::unhold($hold);
        if (!$found || $where[1] === null) {
            throw self::lost('release', $dir, $hold);
        }
        self::lastOut($dir, 'release');
    }

    /** Renews the shared hold HOLD to a lease of $leaseUs from now; returns the new hold. */
    private static function refreshShared(string $dir, string $hold, int $leaseUs): string
    {
        if (str_starts_with($hold, self::ENTRY)) {
            return self::refreshMember($dir, $hold, $leaseUs);
        }
        $new = self::withExpiry($hold, max(self::expiryOf($hold) + 1, self::nowUs() + $leaseUs));
        $errno = self::rename("$dir/$hold", "$dir/$new");
        clearstatcache(true, "$dir/$new");
        if ($errno === 0 || ($errno === 2 && @lstat("$dir/$new") !== false)) {
            self::unhold($hold);
            self::hold($dir, $new);
            return $new;
        }
        if ($errno !== 2) {
            throw self::systemError('refresh', $dir, "cannot rename the lone share $hold to $new", $errno);
        }
        if (self::findCopies($dir, $hold, 'refresh') === null) {
            self::unhold($hold);
            throw self::lost('refresh', $dir, $hold);
        }
        return self::refreshMember($dir, $hold, $leaseUs);
    }

    /**
     * The cover holding copies of our lone share LONE (it was converted,
     * or marked by a writer): [its name, the copies], or null when the
     * token is no cover or holds none (the share was taken over). A token
     * renamed under the listing is looked at again.
     *
     * @return array{0: string, 1: list<string>}|null
     */
    private static function findCopies(string $dir, string $lone, string $step): ?array
    {
        $prefix = self::ourCopyPrefix($lone);
        for ($i = 0; $i < self::SHARE_RETRIES; ++$i) {
            $seen = self::look($dir, $step);
            if ($seen[0] !== 'held' || !self::isCover(self::shareOf($seen[1][1]))) {
                return null;
            }
            $cover = $seen[1][0];
            $names = self::tokenUsable($dir, $cover, $step) ? @scandir("$dir/$cover", SCANDIR_SORT_NONE) : null;
            if (!is_array($names)) {
                clearstatcache(true, "$dir/$cover");
                if (@lstat("$dir/$cover") !== false) {
                    return null;  // no directory, or not to be listed
                }
                continue;
            }
            $copies = array_values(array_filter($names, fn (string $n) => self::isCopy($n, $prefix)));
            return $copies === [] ? null : [$cover, $copies];
        }
        return null;
    }

    /**
     * Removes every copy of our lone share LONE, wherever the token is
     * now, until a listing shows none: whether there was any.
     */
    private static function dropCopies(string $dir, string $lone, string $step): bool
    {
        $found = false;
        for ($i = 0; $i < self::SHARE_RETRIES && ($at = self::findCopies($dir, $lone, $step)) !== null; ++$i) {
            $found = true;
            foreach ($at[1] as $copy) {
                $errno = self::removeEntryAt("$dir/{$at[0]}/$copy");
                if ($errno !== 0 && $errno !== 2) {
                    throw self::systemError($step, "$dir/{$at[0]}", "cannot remove the copy $copy of our lone share", $errno);
                }
            }
        }
        return $found;
    }

    /** Removes our old share OLD: an entry, or every copy of a converted lone share. */
    private static function dropOld(string $dir, string $old, string $step): void
    {
        $where = null;
        if (str_starts_with($old, self::ENTRY)) {
            self::dropEntry($dir, $old, $where, $step);
        } else {
            self::dropCopies($dir, $old, $step);
        }
    }

    /**
     * Renews our share OLD (our entry, or our converted lone share, whose
     * copies are its share): a new entry, the cover renamed to cover it (a
     * slot holder counts the others first, as a join does), the old entry
     * or every copy removed.
     */
    private static function refreshMember(string $dir, string $old, int $leaseUs): string
    {
        $expiry = max(self::expiryOf($old) + 1, self::nowUs() + $leaseUs);
        $new = str_starts_with($old, self::ENTRY) ? self::withExpiry($old, $expiry) : self::myEntry($expiry);
        $made = $counted = false;
        for ($i = 0; $i < self::SHARE_RETRIES; ++$i) {
            $seen = self::look($dir, 'refresh');
            $t = $seen[0] === 'held' ? $seen[1][1] : null;
            $share = $t === null ? null : self::shareOf($t);
            if ($share === null || !in_array($share[0], [self::COVER, self::DRAINING], true)) {
                return self::endedShare($dir, $old, $made ? $new : null, 'the lock is no group any more (a writer took it after the lease ended)');
            }
            $cover = $seen[1][0];
            if (!$made) {
                $errno = self::makeEntryAt("$dir/$cover/$new");
                if ($errno === 2) {
                    continue;
                }
                if ($errno !== 0) {
                    throw self::systemError('refresh', "$dir/$cover", "cannot make our renewed share entry $new", $errno);
                }
                $made = true;
            }
            // Only a share whose lease may have ended can have lost its
            // slot: a joiner counts every entry whose lease is live (with
            // the skew allowance) as a holder. Counting earlier would count
            // the entries of joiners whose rename is still to come.
            if ($share[1] > 0 && ($counted || self::nowUs() > self::expiryOf($old) - self::SKEW_US || !self::oldThere($dir, $cover, $old))) {
                $counted = true;
                $e = self::entries($dir, $cover);
                if ($e === null) {
                    continue;
                }
                $ours = [substr($new, 0, -8), str_starts_with($old, self::ENTRY) ? substr($old, 0, -8) : self::ourCopyPrefix($old)];
                $others = array_diff(self::perHolder($e[0]), $ours);
                if (count($others) >= $share[1]) {
                    return self::endedShare($dir, $old, $new, "all {$share[1]} slots are taken by others: the share had ended and its slot was given");
                }
            }
            $errno = self::rename("$dir/$cover", "$dir/" . self::renewed($cover, $t, $share, self::expiryOf($new)));
            if ($errno === 0) {
                self::dropOld($dir, $old, 'refresh');
                self::unhold($old);
                self::hold($dir, $new);
                return $new;
            }
            if ($errno !== 2) {
                throw self::systemError('refresh', $dir, "cannot rename the group cover $cover to cover our renewed share", $errno);
            }
        }
        throw self::systemError('refresh', $dir, 'the group cover kept changing under ' . self::SHARE_RETRIES . ' attempts', 16);
    }

    /** Whether our old share OLD is in the token NAME; yes when the token was renamed since the listing, as the rename that follows then fails and the next round looks again. */
    private static function oldThere(string $dir, string $name, string $old): bool
    {
        if (!str_starts_with($old, self::ENTRY)) {
            return self::findCopies($dir, $old, 'refresh') !== null;
        }
        clearstatcache(true, "$dir/$name/$old");
        return @lstat("$dir/$name/$old") !== false || @lstat("$dir/$name") === false;
    }

    /** A share found ended: our entries removed, lock_lost. */
    private static function endedShare(string $dir, string $old, ?string $new, string $why): string
    {
        foreach (array_filter([$old, $new]) as $e) {
            self::dropOld($dir, $e, 'refresh');
        }
        self::unhold($old);
        throw new LockLostException('lock_lost', "tokenlock: refresh $dir: the share $old has ended: $why; nothing else was changed", 3);
    }

    /**
     * The name a cover is renamed to so as to cover an expiry: a group
     * cover names us with a fresh nonce; a draining cover keeps its
     * writer and nonce, only its expiry rises.
     *
     * @param array<string, mixed> $t
     * @param array{0: int, 1: int, 2: string} $share
     */
    private static function renewed(string $cover, array $t, array $share, int $expiry): string
    {
        $expiry = max($t['expiry'] + 1, $expiry);
        return $share[0] === self::DRAINING ? self::withExpiry($cover, $expiry) : self::shareName($expiry, self::COVER, $share[1]);
    }

    private static function lost(string $step, string $dir, string $hold): LockLostException
    {
        return new LockLostException('lock_lost', "tokenlock: $step $dir: the share $hold is not held any more: it was taken over (its lease ended, its owner was judged dead, or it was broken), so a writer may have held the lock meanwhile; nothing was changed", 3);
    }

    /**
     * Where the entry ENTRY is: [the token's name, [kind, limit, start] of
     * a shared name or null], or null when no token holds it. A token
     * renamed between the listing and the look is listed again.
     *
     * @return array{0: string, 1: array{0: int, 1: int, 2: string}|null}|null
     */
    private static function locate(string $dir, string $entry, string $step): ?array
    {
        for ($i = 0; $i < self::SHARE_RETRIES; ++$i) {
            $seen = self::look($dir, $step);
            if ($seen[0] === 'missing') {
                return null;
            }
            $name = $seen[0] === 'free' ? self::FREE : $seen[1][0];
            clearstatcache(true, "$dir/$name/$entry");
            if (@lstat("$dir/$name/$entry") !== false) {
                return [$name, $seen[0] === 'free' ? null : self::shareOf($seen[1][1])];
            }
            clearstatcache(true, "$dir/$name");
            if (@lstat("$dir/$name") !== false) {
                return null;
            }
        }
        return null;
    }

    /**
     * Removes our entry ENTRY wherever the token is now: whether it was
     * there; $where is where it was.
     *
     * @param array{0: string, 1: array{0: int, 1: int, 2: string}|null}|null $where
     */
    private static function dropEntry(string $dir, string $entry, ?array &$where, string $step = 'release'): bool
    {
        for ($i = 0; $i < self::SHARE_RETRIES; ++$i) {
            $where = self::locate($dir, $entry, $step);
            if ($where === null) {
                return false;
            }
            $errno = self::removeEntryAt("$dir/{$where[0]}/$entry");
            if ($errno === 0) {
                return true;
            }
            if ($errno !== 2) {
                throw self::systemError($step, "$dir/{$where[0]}", "cannot remove the share entry $entry", $errno);
            }
        }
        return false;
    }

    /**
     * The last one out: with no live entry left in a cover, its stale
     * entries go and it is freed (a group cover) or handed to its writer
     * (a draining cover). A slot holder that left a full semaphore renames
     * the cover, so that waiters watching DIR see a change.
     */
    private static function lastOut(string $dir, string $step): void
    {
        for ($i = 0; $i < self::SHARE_RETRIES; ++$i) {
            $seen = self::look($dir, $step);
            $share = $seen[0] === 'held' ? self::shareOf($seen[1][1]) : null;
            if ($share === null || !in_array($share[0], [self::COVER, self::DRAINING], true)) {
                return;
            }
            [$cover, $t] = $seen[1];
            $e = self::tokenUsable($dir, $cover, $step) ? self::entries($dir, $cover) : null;
            if ($e === null) {
                clearstatcache(true, "$dir/$cover");
                if (@lstat("$dir/$cover") !== false) {
                    return;  // no directory: nothing to list
                }
                continue;
            }
            [$live, $stale, $bad] = $e;
            if ($live) {
                if ($share[1] > 0 && count(self::perHolder($live)) === $share[1] - 1) {
                    self::rename("$dir/$cover", "$dir/" . self::renewed($cover, $t, $share, $t['expiry'] + 1));
                }
                return;
            }
            if ($bad) {
                throw self::corruptEntries($step, $dir, $cover, $bad);
            }
            self::removeStale($dir, $cover, $stale, $step);
            $to = $share[0] === self::COVER ? self::FREE : self::PREFIX . self::namedHolder($cover, $t, $share[2]);
            $errno = self::rename("$dir/$cover", "$dir/$to");
            if ($errno === 0) {
                return;
            }
            if ($errno !== 2) {
                throw self::systemError($step, $dir, "cannot rename the group cover $cover, which holds no live share, to $to", $errno);
            }
        }
    }
}
