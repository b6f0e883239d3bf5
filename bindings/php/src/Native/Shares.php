<?php

declare(strict_types=1);

namespace Tokenlock\Native;

use Tokenlock\Exception;

/**
 * The names of shared holders (docs/protocol.md, Shared locks and semaphores: Names on disk): lone
 * shares, group covers and draining covers as the token's name, and the
 * share entries `s.*` inside the token directory; what they say, and
 * whether the holders they name are live.
 *
 * PHP has no openat(): the token directory is judged with lstat() (a
 * directory, trusted as a workspace is) and its entries are made, listed
 * and removed by the path D/<token>/s.<name>, one component inside the
 * trusted token, never followed (mkdir and rmdir do not follow a link at
 * the last component).
 *
 * @internal
 */
trait Shares
{
    public const LONE = 0;
    public const COVER = 1;
    public const DRAINING = 2;
    public const ENTRY = 's.';
    /** The largest slot count: `limit` is six digits. */
    public const MAX_SLOTS = 999999;

    /**
     * [kind, limit, start] of a held name's fields when it is a shared
     * name (the fourth field is 20 digits starting with 1), else null.
     *
     * @param array{start: string, legacy: bool} $t
     * @return array{0: int, 1: int, 2: string}|null
     */
    public static function shareOf(array $t): ?array
    {
        if ($t['legacy'] || strlen($t['start']) !== 20 || $t['start'][0] !== '1') {
            return null;
        }
        return [(int) $t['start'][1], (int) substr($t['start'], 2, 6), ltrim(substr($t['start'], 8), '0') ?: '0'];
    }

    /** A host tag with its hash flipped: our `stag` from our tag, and back. */
    public static function flipTag(string $tag): string
    {
        $at = strrpos($tag, '-');
        return substr($tag, 0, $at + 1) . sprintf('%08x', hexdec(substr($tag, $at + 1)) ^ 0xffffffff);
    }

    /** Whether TOKEN (as a Lock holds it) is a shared hold: a lone share or an entry. */
    public static function isShare(string $token): bool
    {
        return str_starts_with($token, self::ENTRY) || (strlen($token) > 40 && ($c = self::classify($token))[0] === 'held' && self::shareOf($c[1]) !== null);
    }

    /**
     * A shared name of this process: kind, limit, expiry; a fresh nonce
     * unless one is given.
     */
    private static function shareName(int $expiry, int $kind, int $limit, ?string $nonce = null): string
    {
        $me = self::identity();
        $start = strlen($me['start']) > 12 ? 0 : (int) $me['start'];
        return self::PREFIX . $expiry . '.' . self::flipTag($me['tag']) . '.' . $me['pid'] . '.'
            . sprintf('1%d%06d%012d', $kind, $limit, $start) . '.' . ($nonce ?? self::nonce($me['pid']));
    }

    /** This process's entry for a lease ending at $expiry. */
    private static function myEntry(int $expiry, ?string $nonce = null): string
    {
        $me = self::identity();
        return self::ENTRY . $expiry . '.' . $me['owner'] . ($nonce ?? self::nonce($me['pid']));
    }

    /** NAME (a token or an entry) with another expiry, everything else kept. */
    private static function withExpiry(string $name, int $expiry): string
    {
        $head = str_starts_with($name, self::ENTRY) ? self::ENTRY : self::PREFIX;
        return $head . $expiry . substr($name, strpos($name, '.', strlen($head)));
    }

    private static function expiryOf(string $name): int
    {
        $head = str_starts_with($name, self::ENTRY) ? strlen(self::ENTRY) : strlen(self::PREFIX);
        return (int) substr($name, $head, strpos($name, '.', $head) - $head);
    }

    /**
     * The holder a shared name names, as a token of docs/protocol.md's
     * grammar without `lockfile.`: a lone share's holder (whose entry is
     * `s.` and this), a draining cover's writer (whose hand-over name is
     * `lockfile.` and this).
     *
     * @param array{expiry: int, tag: string, pid: int} $t
     */
    private static function namedHolder(string $name, array $t, string $start): string
    {
        return $t['expiry'] . '.' . self::flipTag($t['tag']) . ".{$t['pid']}.$start." . substr($name, -16);
    }

    /**
     * The fields of the holder a shared name names, to be judged as a
     * token of its own host (judge()).
     *
     * @param array{expiry: int, tag: string, pid: int} $t
     * @return array{expiry: int, tag: string, pid: int, start: string, legacy: bool}
     */
    private static function holderFields(array $t, string $start): array
    {
        return ['expiry' => $t['expiry'], 'tag' => self::flipTag($t['tag']), 'pid' => $t['pid'], 'start' => $start, 'legacy' => false];
    }

    /**
     * The token directory DIR/NAME judged before anything is made, listed
     * or removed in it: null when it is gone (renamed since the listing),
     * false when it is no directory (a link, a file or a FIFO planted as
     * the token: nothing goes through it), true when it may be used.
     * Throws `untrusted` for one writable by others.
     */
    private static function tokenUsable(string $dir, string $name, string $step): ?bool
    {
        $path = "$dir/$name";
        clearstatcache(true, $path);
        $st = @lstat($path);
        if ($st === false) {
            return null;
        }
        if (($st['mode'] & 0170000) !== 0040000) {
            return false;
        }
        self::checkInside($dir, $path, $step, 'the token directory', $st);
        return true;
    }

    /**
     * The share entries in the token DIR/NAME: live ones (name => holder
     * description), stale ones (name => why), malformed ones; null when
     * the token was renamed since the listing.
     *
     * @return array{0: array<string, string>, 1: array<string, string>, 2: list<string>}|null
     */
    private static function entries(string $dir, string $name): ?array
    {
        error_clear_last();
        $names = @scandir("$dir/$name", SCANDIR_SORT_NONE);
        if ($names === false) {
            $errno = self::lastErrno();
            if ($errno === 2 || $errno === 20) {
                return null;
            }
            throw self::systemError('list', "$dir/$name", 'cannot list the shared holders in the token', $errno ?: 5);
        }
        $live = $stale = $bad = [];
        foreach ($names as $n) {
            if (!str_starts_with($n, self::ENTRY)) {
                continue;
            }
            $c = self::classify(self::PREFIX . substr($n, 2));
            if ($c[0] !== 'held') {
                $bad[] = $n;
                continue;
            }
            [$gone, $why] = self::judge($n, $c[1]);
            if ($gone) {
                $stale[$n] = $why;
            } else {
                $live[$n] = $why;
            }
        }
        return [$live, $stale, $bad];
    }

    /**
     * The start of every copy of the lone share LONE (fields T, start
     * START): `s.`, its expiry, real host tag, pid and start, and the
     * first half of its nonce. A converter or a marking writer makes a
     * copy of its own (copyOf()), so that one that loses can always remove
     * what it made: were the copy one name for all, a loser's mkdir
     * landing after the holder left would be a share of nobody for the
     * rest of its lease (docs/protocol.md, the conversion).
     *
     * @param array{expiry: int, tag: string, pid: int} $t
     */
    private static function copyPrefix(string $lone, array $t, string $start): string
    {
        return self::ENTRY . substr(self::namedHolder($lone, $t, $start), 0, -8);
    }

    /** A copy of LONE made by this process: the second half of the nonce its own, at random. */
    private static function copyOf(string $lone, array $t, string $start): string
    {
        return self::copyPrefix($lone, $t, $start) . substr(self::nonce(self::identity()['pid']), 8);
    }

    /** The copy prefix of our own lone share LONE, from its name. */
    private static function ourCopyPrefix(string $lone): string
    {
        $c = self::classify($lone);
        return self::copyPrefix($lone, $c[1], self::shareOf($c[1])[2]);
    }

    /** Whether the entry N is a copy of the lone share whose copies start with PREFIX. */
    private static function isCopy(string $n, string $prefix): bool
    {
        return strlen($n) === strlen($prefix) + 8 && str_starts_with($n, $prefix);
    }

    /**
     * The holders the entries NAMES stand for: the copies of one lone
     * share are one holder however many there are (a loser's copy lives
     * until its maker removes it), so each counts by its name without the
     * last half of its nonce.
     *
     * @param array<string, mixed> $names entry => anything
     * @return array<string, string> one entry per holder, the first listed
     */
    private static function perHolder(array $names): array
    {
        $out = [];
        foreach (array_keys($names) as $n) {
            $out[substr($n, 0, -8)] ??= $n;
        }
        return array_flip($out);
    }

    /**
     * Removes the stale entries of the token DIR/NAME by their exact
     * names: a directory with rmdir, anything else (a link, a FIFO, a
     * file) with unlink, never followed, never opened.
     *
     * A joiner, which needs no empty token, passes $strict false: what it
     * cannot remove stays for a writer or the last one out to report.
     *
     * @param array<string, string> $stale
     */
    private static function removeStale(string $dir, string $name, array $stale, string $step, bool $strict = true): void
    {
        foreach (array_keys($stale) as $n) {
            $errno = self::removeEntryAt("$dir/$name/$n");
            if ($errno === 39 && $strict) {
                throw new Exception('lock_corrupt', "tokenlock: $step $dir: the stale share entry " . self::shown($n) . " in the token $name is a directory that is not empty: it is not one this protocol made; nothing in it was removed: remove it by hand", 69);
            }
        }
    }

    /** Removes one entry by its path: 0 or the errno (ENOENT: not there). */
    private static function removeEntryAt(string $path): int
    {
        error_clear_last();
        if (@rmdir($path)) {
            return 0;
        }
        $errno = self::lastErrno() ?: 5;
        if ($errno !== 20) {
            return $errno;
        }
        error_clear_last();
        return @unlink($path) ? 0 : (self::lastErrno() ?: 5);
    }

    /** Makes one entry: 0 or the errno. */
    private static function makeEntryAt(string $path): int
    {
        error_clear_last();
        return @mkdir($path, 0700) ? 0 : (self::lastErrno() ?: 5);
    }

    private static function shown(string $name): string
    {
        return addcslashes($name, "\0..\37\177..\377");
    }

    /** lock_corrupt for entries that break the grammar, as a writer and the last one out see them. */
    private static function corruptEntries(string $step, string $dir, string $name, array $bad): Exception
    {
        return new Exception('lock_corrupt', "tokenlock: $step $dir: the token $name holds " . self::shown($bad[0]) . ', which starts like a share entry but is not one; it was left alone: remove it by hand once no process uses the lock', 69);
    }

    /**
     * The holders the shared name NAME stands for (holders()): a lone
     * share's one, a cover's entries, and a draining cover's writer as
     * `waiting`; null when NAME is no shared name.
     *
     * @param array<string, mixed> $t
     * @return list<array<string, mixed>>|null
     */
    public static function sharedHolders(string $dir, string $name, array $t, int $depth = 0): ?array
    {
        $share = self::shareOf($t);
        if ($share === null || $share[0] > self::DRAINING) {
            return null;
        }
        [$kind, $limit, $start] = $share;
        $mode = $limit === 0 ? 'shared' : 'slot';
        if ($kind === self::LONE) {
            return [self::describe($mode, $limit, $name, self::holderFields($t, $start))];
        }
        $usable = self::tokenUsable($dir, $name, 'status');
        $e = $usable ? self::entries($dir, $name) : ($usable === false ? [[], [], []] : null);
        if ($e === null) {
            // Renamed since the listing: look again.
            $seen = self::look($dir, 'status');
            return $seen[0] !== 'held' || $depth > 100 ? [] : self::sharedHolders($dir, $seen[1][0], $seen[1][1], $depth + 1);
        }
        $out = [];
        foreach (self::perHolder($e[0] + $e[1]) as $n => $key) {
            $out[] = self::describe($mode, $limit, $n, self::classify(self::PREFIX . substr($n, 2))[1]);
        }
        if ($kind === self::DRAINING) {
            $out[] = self::describe('waiting', $limit, $name, self::holderFields($t, $start));
        }
        return $out;
    }

    /**
     * One holder as holders() lists it.
     *
     * @param array{expiry: int, tag: string, pid: int, start: string, legacy: bool} $f
     * @return array<string, mixed>
     */
    private static function describe(string $mode, int $limit, string $name, array $f): array
    {
        [$stale, $reason] = self::judge($name, $f);
        $me = self::identity();
        $same = $me['proc'] && $f['tag'] === $me['tag'];
        return [
            'mode' => $mode, 'slots' => $limit, 'token' => $name, 'pid' => $f['pid'], 'host_tag' => $f['tag'], 'same_host' => $same,
            'owner' => !$same ? 'unknown' : (self::ownerGone($f) === null ? 'alive' : 'dead'),
            'expires_us' => $f['expiry'], 'legacy' => false, 'stale' => $stale, 'reason' => $reason,
        ];
    }
}
