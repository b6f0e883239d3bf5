<?php

declare(strict_types=1);

namespace Tokenlock\Native;

use Tokenlock\Exception;
use Tokenlock\LockLostException;

/**
 * The transitions of a shared holder (docs/protocol.md, Shared locks and semaphores:
 * Transitions): the lone share's fast path, the conversion into a group
 * cover, joining a cover, leaving it (the last one out frees it or hands
 * a draining cover to its writer), and the refresh of either. Each
 * change of the token's name is a rename of the exact name a listing
 * showed, the protocol's compare-and-swap.
 *
 * @internal
 */
trait Sharing
{
    /** Bound on the retries of a step whose name others keep renaming. */
    private const SHARE_RETRIES = 10000;

    /**
     * One round of a shared waiter: the hold (a lone share's name or an
     * entry's), true (look again at once) or false (it waits: $w['reason']).
     *
     * @param array<string, mixed> $w
     */
    private static function sharedRound(array &$w): string|bool
    {
        $dir = $w['dir'];
        clearstatcache(true, "$dir/" . self::FREE);
        // A hungry head is owed the free token; joining takes nothing from it.
        $try = $w['exists'] && !$w['hungry'] && ($w['first'] || @lstat("$dir/" . self::FREE) !== false);
        if ($try && ($mine = self::takeFree($dir, $w['lease'], self::shareName(self::nowUs() + $w['lease'], self::LONE, $w['limit']))) !== null) {
            self::hold($dir, $mine);
            return $mine;
        }
        if (!$w['looked']) {
            return false;
        }
        $seen = self::seen($w);
        if (!is_array($seen)) {
            return $seen;
        }
        [$name, $t] = $seen;
        $share = self::shareOf($t);
        if ($share === null || $share[0] > self::DRAINING) {
            [$stale, $w['reason']] = self::judge($name, $t);
            return $stale ? self::takeOver($w, $name, self::shareName(self::nowUs() + $w['lease'], self::LONE, $w['limit'])) : false;
        }
        [$kind, $limit, $start] = $share;
        if ($kind === self::DRAINING) {
            return self::readerAtMark($w, $name, $t, $share);
        }
        if ($kind === self::COVER) {
            return self::join($w, $name, $t);
        }
        [$stale, $why] = self::judge($name, self::holderFields($t, $start));
        if ($stale) {
            $w['reason'] = "lone share: $why";
            return self::takeOver($w, $name, self::shareName(self::nowUs() + $w['lease'], self::LONE, $w['limit']));
        }
        if ($limit !== $w['limit'] || $limit === 1) {
            $w['reason'] = self::mismatch($limit, $w['limit'], $why);
            return false;
        }
        return self::convert($w, $name, $t, $start);
    }

    /**
     * The listing of a round: the token [name, fields], or what the round
     * returns (true: look again).
     *
     * @param array<string, mixed> $w
     * @return array{0: string, 1: array<string, mixed>}|bool
     */
    private static function seen(array &$w): array|bool
    {
        $seen = self::look($w['dir']);
        if (!$w['exists'] && $seen[0] !== 'missing') {
            // Made by another process since the first look: judge it now.
            $w['exists'] = self::checkTrusted($w['dir'], $w['named']);
        }
        if ($seen[0] === 'missing') {
            self::create($w['dir'], $w['lease'], $w['named']);
            $w['exists'] = self::checkTrusted($w['dir'], $w['named']);
        }
        return $seen[0] === 'held' ? $seen[1] : true;
    }

    /** Why a holder of LIMIT waits for holders of another limit (or a semaphore of one). */
    private static function mismatch(int $theirs, int $mine, string $why): string
    {
        $say = fn (int $n) => $n === 0 ? 'shared (readers)' : "a semaphore of $n slots";
        if ($theirs === $mine) {
            return "the semaphore of 1 slot is taken: $why";
        }
        return 'held as ' . $say($theirs) . ', asked as ' . $say($mine) . ": $why; it waits until they have all left";
    }

    /**
     * Takes over the stale NAME by its exact name, to TO (a lone share of
     * ours or our token), and clears the workspace (entries included) as
     * any takeover does. A share is taken as a token of ours first, cleared
     * under that name, and renamed to TO after: a lone share can be joined
     * the moment it appears, and a clearing after that would remove the
     * joiner's entries, its copy of our share among them.
     *
     * @param array<string, mixed> $w
     */
    private static function takeOver(array &$w, string $name, string $to): string|bool
    {
        $dir = $w['dir'];
        $via = self::isShare($to) ? self::token(self::nowUs() + $w['lease']) : $to;
        clearstatcache(true, "$dir/$name");
        $taken = @lstat("$dir/$name");
        $errno = self::rename("$dir/$name", "$dir/$via");
        if ($errno === 0) {
            if (!self::finish($dir, $via, $name, $w['lease'], $w['givenUp'], $w['reason'], $taken ?: null)) {
                return false;
            }
            return $via === $to ? $to : self::becomeShare($dir, $via, $to);
        }
        if ($errno !== 2) {
            throw self::systemError('acquire', $dir, "cannot take over the stale token $name ({$w['reason']})", $errno);
        }
        return true;  // another taker won, or the owner refreshed or released: look again
    }

    /** Renames our token TOKEN, just cleared, to our lone share SHARE. */
    private static function becomeShare(string $dir, string $token, string $share): string
    {
        $errno = self::rename("$dir/$token", "$dir/$share");
        self::unhold($token);
        if ($errno === 0) {
            self::hold($dir, $share);
            return $share;
        }
        self::rename("$dir/$token", "$dir/" . self::FREE);  // not left held
        throw self::systemError('acquire', $dir, "cannot rename our token $token to our lone share", $errno);
    }

    /**
     * Converts the live lone share LONE into a group cover holding a copy
     * of its holder's share and our entry: the hold (our entry), or true
     * to look again.
     *
     * @param array<string, mixed> $w
     * @param array<string, mixed> $t
     */
    private static function convert(array &$w, string $lone, array $t, string $start): string|bool
    {
        $dir = $w['dir'];
        $usable = self::tokenUsable($dir, $lone, 'acquire');
        if ($usable !== true) {
            $w['reason'] = "the token $lone is no directory, and admits one shared holder only";
            return $usable === null;
        }
        $copy = self::copyOf($lone, $t, $start);
        $errno = self::makeEntryAt("$dir/$lone/$copy");
        if ($errno === 2 || $errno === 17) {
            return true;  // renamed since the listing; or another's copy by a chance of 2^-32: nothing of ours was made
        }
        if ($errno !== 0) {
            throw self::systemError('acquire', "$dir/$lone", "cannot make our copy $copy of the lone holder's share", $errno);
        }
        $expiry = self::nowUs() + $w['lease'];
        $mine = self::myEntry($expiry);
        $errno = self::makeEntryAt("$dir/$lone/$mine");
        if ($errno === 0) {
            $cover = self::shareName(max($t['expiry'] + 1, $expiry), self::COVER, $w['limit']);
            $errno = self::rename("$dir/$lone", "$dir/$cover");
            if ($errno === 0) {
                self::hold($dir, $mine);
                return $mine;
            }
        }
        // Lost to a release, a refresh, another converter or a writer.
        $fail = $errno === 2 ? null : $errno;
        self::abandon($dir, $errno === 17 ? null : $mine, $copy);
        if ($fail !== null) {
            throw $fail === 17 ? self::planted($dir, $lone, $mine) : self::systemError('acquire', $dir, "cannot convert the lone share $lone into a group", $fail);
        }
        return true;
    }

    /** lock_corrupt: something is already at a name of ours, which nobody else makes. */
    private static function planted(string $dir, string $token, string $mine): Exception
    {
        return new Exception('lock_corrupt', "tokenlock: acquire $dir: something is already at our new share entry $mine in the token $token (its name is unique to this process): it was planted; nothing was removed", 69);
    }

    /**
     * After a lost rename: removes our entry and our copy of a lone share,
     * wherever the token is now. Nobody relied on either (the rename that
     * would have made them shares failed), and a copy left behind would be
     * a share of nobody. A leaver may have seen them and left the cover to
     * us, so the last one out's steps follow.
     */
    private static function abandon(string $dir, ?string $mine, ?string $copy): void
    {
        $where = null;
        foreach (array_filter([$mine, $copy]) as $entry) {
            self::dropEntry($dir, $entry, $where, 'acquire');
        }
        self::lastOut($dir, 'acquire');
    }

    /** @param array{0: int, 1: int, 2: string}|null $share */
    private static function isCover(?array $share): bool
    {
        return $share !== null && ($share[0] === self::COVER || $share[0] === self::DRAINING);
    }

    /**
     * Joins the group cover COVER (or takes it, with no live entry left,
     * whatever its limit): the hold (our entry), true to look again, or
     * false to wait (full, or of another limit).
     *
     * @param array<string, mixed> $w
     * @param array<string, mixed> $t
     */
    private static function join(array &$w, string $cover, array $t): string|bool
    {
        $dir = $w['dir'];
        $usable = self::tokenUsable($dir, $cover, 'acquire');
        $e = $usable ? self::entries($dir, $cover) : null;
        if ($e === null) {
            $w['reason'] = "the token $cover is no directory";
            return $usable === null;
        }
        [$live, $stale] = $e;
        $limit = self::shareOf($t)[1];
        if ($live && ($limit !== $w['limit'] || ($limit > 0 && count(self::perHolder($live)) >= $limit))) {
            $w['reason'] = $limit === $w['limit'] ? 'all ' . $limit . ' slots are taken: ' . reset($live) : self::mismatch($limit, $w['limit'], reset($live));
            return false;
        }
        self::removeStale($dir, $cover, $stale, 'acquire', false);
        $expiry = self::nowUs() + $w['lease'];
        $mine = self::myEntry($expiry);
        $errno = self::makeEntryAt("$dir/$cover/$mine");
        if ($errno === 2) {
            return true;
        }
        if ($errno !== 0) {
            throw $errno === 17 ? self::planted($dir, $cover, $mine) : self::systemError('acquire', "$dir/$cover", "cannot make our share entry $mine", $errno);
        }
        $errno = self::rename("$dir/$cover", "$dir/" . self::shareName(max($t['expiry'] + 1, $expiry), self::COVER, $w['limit']));
        if ($errno === 0) {
            self::hold($dir, $mine);
            return $mine;
        }
        self::abandon($dir, $mine, null);
        if ($errno !== 2) {
            throw self::systemError('acquire', $dir, "cannot rename the group cover $cover to join it", $errno);
        }
        return true;
    }

    /**
     * A reader at a draining cover waits; the mark of a writer provably
     * dead on this host, or whose mark's lease ended, it unmarks (a group
     * cover again, a fresh nonce).
     *
     * @param array<string, mixed> $w
     * @param array<string, mixed> $t
     * @param array{0: int, 1: int, 2: string} $share
     */
    private static function readerAtMark(array &$w, string $mark, array $t, array $share): bool
    {
        $gone = self::markGone($t, $share[2]);
        if ($gone === null) {
            $w['reason'] = "a writer (pid {$t['pid']}) waits for the shared holders to leave, and new ones wait behind it";
            return false;
        }
        $errno = self::rename("$w[dir]/$mark", "$w[dir]/" . self::shareName($t['expiry'] + 1, self::COVER, $share[1]));
        if ($errno !== 0 && $errno !== 2) {
            throw self::systemError('acquire', $w['dir'], "cannot unmark $mark, a writer's stale mark ($gone)", $errno);
        }
        return true;
    }
}
