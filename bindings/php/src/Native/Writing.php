<?php

declare(strict_types=1);

namespace Tokenlock\Native;

/**
 * What a writer (an exclusive acquire) does at shared holders
 * (docs/protocol.md, Shared locks and semaphores: A writer): it marks them at once (a draining
 * cover that names it), so that no new shared holder joins, and holds
 * when the last one out hands the token over, or when it finds its mark
 * with no live entry left. At its deadline it unmarks.
 *
 * @internal
 */
trait Writing
{
    /**
     * A writer's round at the held NAME: the token (held), true (look
     * again), false (wait), or null when NAME is no shared name and not
     * our hand-over (judged as a token, unchanged).
     *
     * @param array<string, mixed> $w
     * @param array<string, mixed> $t
     */
    private static function writerAtShare(array &$w, string $name, array $t): string|bool|null
    {
        $share = self::shareOf($t);
        if ($share === null) {
            return isset($w['markNonce']) && self::isMine($t, $name, $w['markNonce']) ? self::handedOver($w, $name, $t) : null;
        }
        [$kind, , $start] = $share;
        if ($kind === self::LONE) {
            [$stale, $why] = self::judge($name, self::holderFields($t, $start));
            $w['reason'] = "shared: $why";
            if ($stale) {
                return self::takeOver($w, $name, self::token(self::nowUs() + $w['lease']));
            }
            return self::markLone($w, $name, $t, $share);
        }
        if ($kind > self::DRAINING) {
            return null;  // reserved: judged by its lease only
        }
        $e = self::tokenUsable($w['dir'], $name, 'acquire') ? self::entries($w['dir'], $name) : null;
        if ($e === null) {
            $w['reason'] = "the token $name is no directory";
            return false;
        }
        [$live, $stale, $bad] = $e;
        $mine = $kind === self::DRAINING && isset($w['markNonce']) && self::isMine(self::holderFields($t, $start), $name, $w['markNonce']);
        if ($live) {
            $w['reason'] = count(self::perHolder($live)) . ' shared holder(s), the first ' . reset($live);
            return $kind === self::COVER ? self::mark($w, $name, $t, $share) : self::keepMark($w, $name, $t, $share, $mine);
        }
        if ($bad) {
            throw self::corruptEntries('acquire', $w['dir'], $name, $bad);
        }
        self::removeStale($w['dir'], $name, $stale, 'acquire');
        if ($mine) {
            return self::takeMine($w, $name);
        }
        if ($kind === self::DRAINING && ($why = self::markGone($t, $start)) === null) {
            $w['reason'] = "another writer (pid {$t['pid']}) is handed this lock: $name";
            return false;
        }
        $w['reason'] = $kind === self::COVER ? "a group cover with no live share: $name" : "a writer's stale mark $name ($why)";
        return self::takeOver($w, $name, self::token(self::nowUs() + $w['lease']));
    }

    /**
     * Why the writer a draining cover names has lost it (provably dead on
     * this host, or the mark's lease ended), or null while it is its.
     *
     * @param array<string, mixed> $t
     */
    private static function markGone(array $t, string $start): ?string
    {
        [$stale, $why] = self::judge('', self::holderFields($t, $start));
        return $stale ? $why : null;
    }

    /**
     * Whether the fields T (a token's, or a draining cover's writer as
     * holderFields() gives them) name this process with the nonce NONCE.
     *
     * @param array<string, mixed> $t
     */
    private static function isMine(array $t, string $name, string $nonce): bool
    {
        $me = self::identity();
        return $t['tag'] === $me['tag'] && $t['pid'] === $me['pid'] && $t['start'] === $me['start'] && substr($name, -16) === $nonce;
    }

    /**
     * Marks the live lone share LONE: our copy of its holder's share made,
     * as a converter makes it, then LONE renamed to our draining cover; a
     * mark that fails removes the copy (nobody relied on it).
     *
     * @param array<string, mixed> $w
     * @param array<string, mixed> $t
     * @param array{0: int, 1: int, 2: string} $share
     */
    private static function markLone(array &$w, string $lone, array $t, array $share): bool
    {
        $dir = $w['dir'];
        if (self::tokenUsable($dir, $lone, 'acquire') !== true) {
            return false;  // a file token cannot hold entries: its lone holder is waited for
        }
        $copy = self::copyOf($lone, $t, $share[2]);
        $errno = self::makeEntryAt("$dir/$lone/$copy");
        if ($errno === 2 || $errno === 17) {
            return true;
        }
        if ($errno !== 0) {
            throw self::systemError('acquire', "$dir/$lone", "cannot make our copy $copy of the lone holder's share to mark it", $errno);
        }
        try {
            $changed = self::mark($w, $lone, $t, $share);
        } catch (\Throwable $e) {
            self::abandon($dir, null, $copy);
            throw $e;
        }
        if ($changed) {
            self::abandon($dir, null, $copy);
        }
        return $changed;
    }

    /**
     * Renames the cover NAME to a draining cover of ours: false (marked:
     * wait) or true (it changed since the listing: look again).
     *
     * @param array<string, mixed> $w
     * @param array<string, mixed> $t
     * @param array{0: int, 1: int, 2: string} $share
     */
    private static function mark(array &$w, string $name, array $t, array $share): bool
    {
        $mark = self::shareName(max($t['expiry'] + 1, self::nowUs() + $w['lease']), self::DRAINING, $share[1]);
        $errno = self::rename("$w[dir]/$name", "$w[dir]/$mark");
        if ($errno === 0) {
            $w['markNonce'] = substr($mark, -16);
            $w['markedAt'] = self::nowUs();
            return false;
        }
        if ($errno !== 2) {
            throw self::systemError('acquire', $w['dir'], "cannot mark $name as awaited by a writer", $errno);
        }
        return true;
    }

    /**
     * At a draining cover with live entries: ours is renewed when a third
     * of the lease passed, so that the hand-over is never born expired;
     * another writer's is waited for, or unmarked when that writer is
     * provably dead on this host.
     *
     * @param array<string, mixed> $w
     * @param array<string, mixed> $t
     * @param array{0: int, 1: int, 2: string} $share
     */
    private static function keepMark(array &$w, string $name, array $t, array $share, bool $mine): bool
    {
        $now = self::nowUs();
        if ($mine) {
            if ($now - $w['markedAt'] >= intdiv($w['lease'], 3)) {
                $errno = self::rename("$w[dir]/$name", "$w[dir]/" . self::withExpiry($name, max($t['expiry'] + 1, $now + $w['lease'])));
                $w['markedAt'] = $errno === 0 ? $now : $w['markedAt'];
            }
            return false;
        }
        return self::readerAtMark($w, $name, $t, $share);
    }

    /**
     * Our draining cover with no live entry left: ours, renamed to our token.
     *
     * @param array<string, mixed> $w
     */
    private static function takeMine(array &$w, string $mark): string|bool
    {
        $mine = self::token(self::nowUs() + $w['lease']);
        $errno = self::rename("$w[dir]/$mark", "$w[dir]/$mine");
        if ($errno === 0) {
            unset($w['markNonce']);
            return self::finish($w['dir'], $mine, null, $w['lease'], $w['givenUp'], $w['reason']) ? $mine : false;
        }
        if ($errno !== 2) {
            throw self::systemError('acquire', $w['dir'], "cannot take our mark $mark, which holds no live share", $errno);
        }
        return true;
    }

    /**
     * The last one out handed the token to us: it is ours from that
     * rename on; renewed to our lease when that is later.
     *
     * @param array<string, mixed> $w
     * @param array<string, mixed> $t
     */
    private static function handedOver(array &$w, string $name, array $t): string|bool
    {
        unset($w['markNonce']);
        $want = self::nowUs() + $w['lease'];
        $mine = $want > $t['expiry'] ? self::withExpiry($name, $want) : $name;
        $errno = $mine === $name ? 0 : self::rename("$w[dir]/$name", "$w[dir]/$mine");
        if ($errno !== 0) {
            $mine = $name;  // still ours under the hand-over's lease
        }
        return self::finish($w['dir'], $mine, null, $w['lease'], $w['givenUp'], $w['reason']) ? $mine : false;
    }

    /**
     * A writer whose wait ended gives its mark up (a group cover again, a
     * fresh nonce); should the hand-over have come meanwhile, the lock is
     * held and returned. Null when it holds nothing.
     *
     * @param array<string, mixed> $w
     */
    private static function unmark(array &$w): ?string
    {
        for ($i = 0; $i < self::SHARE_RETRIES && isset($w['markNonce']); ++$i) {
            $seen = self::look($w['dir']);
            if ($seen[0] !== 'held') {
                return null;
            }
            [$name, $t] = $seen[1];
            $share = self::shareOf($t);
            if ($share === null) {
                return self::isMine($t, $name, $w['markNonce']) ? (self::handedOver($w, $name, $t) ?: null) : null;
            }
            if ($share[0] !== self::DRAINING || !self::isMine(self::holderFields($t, $share[2]), $name, $w['markNonce'])) {
                return null;
            }
            $errno = self::rename("$w[dir]/$name", "$w[dir]/" . self::shareName($t['expiry'] + 1, self::COVER, $share[1]));
            if ($errno === 0) {
                return null;
            }
        }
        return null;
    }
}
