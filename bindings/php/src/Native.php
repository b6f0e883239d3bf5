<?php

declare(strict_types=1);

namespace Tokenlock;

use Tokenlock\Native\Identity;
use Tokenlock\Native\Tokens;
use Tokenlock\Native\Errors;
use Tokenlock\Native\Trust;
use Tokenlock\Native\Clearing;
use Tokenlock\Native\Marks;
use Tokenlock\Native\Directory;
use Tokenlock\Native\Held;
use Tokenlock\Native\Turnstile;
use Tokenlock\Native\Shares;
use Tokenlock\Native\Sharing;
use Tokenlock\Native\Leaving;
use Tokenlock\Native\Writing;
use Tokenlock\Native\Modes;

/**
 * The rename-token lock of docs/protocol.md, in PHP: no process is started
 * and no extension is needed (posix is used when loaded).
 *
 * Owner marks are made where docs/protocol.md asks for them (GlusterFS,
 * unknown FUSE filesystems, a filesystem that cannot be told): PHP has no
 * statfs, so the type comes from /proc/self/mountinfo, and a lock whose
 * mount table is out of reach (open_basedir) gets marks, as the library
 * gives them to a filesystem it cannot ask.
 *
 * What it leaves out, and why: the wait board (PHP cannot map it: waiters
 * line up in the turnstile of docs/waiting-turnstile.md instead), and opening the lock directory by descriptor (PHP has no
 * renameat: every step goes through the path, which is judged with lstat
 * first).
 *
 * @internal
 */
final class Native
{
    use Identity;
    use Tokens;
    use Errors;
    use Trust;
    use Clearing;
    use Marks;
    use Directory;
    use Held;
    use Turnstile;
    use Shares;
    use Sharing;
    use Leaving;
    use Writing;
    use Modes;

    public const FREE = 'lockfile';
    public const PREFIX = 'lockfile.';
    /** Microseconds; the protocol's bound on any lease (protocol_max_lease). */
    public const MAX_LEASE_US = 86400000000;
    public const SKEW_US = 1000000;
    public const DEFAULT_LEASE = 3600.0;
    public const DIR_MODE = 0755;
    private const BACKOFF_MIN_US = 100;
    private const BACKOFF_MAX_US = 50000;
    /** A waiter lists the lock directory at most this often (and on its last round). */
    private const LOOK_EVERY_NS = 10000000;

    /** Linux's errno for the texts PHP's warnings carry (strerror). */
    private const ERRNO = [
        'Operation not permitted' => 1, 'No such file or directory' => 2, 'Input/output error' => 5,
        'Permission denied' => 13, 'Device or resource busy' => 16, 'File exists' => 17,
        'Invalid cross-device link' => 18, 'Not a directory' => 20, 'Is a directory' => 21,
        'Invalid argument' => 22, 'No space left on device' => 28, 'Read-only file system' => 30,
        'File name too long' => 36, 'Directory not empty' => 39, 'Too many levels of symbolic links' => 40,
        'Disk quota exceeded' => 122, 'Stale file handle' => 116, 'File too large' => 27,
        'Value too large for defined data type' => 75,
    ];

    /**
     * Acquires DIR: returns the token, or for a shared hold ($limit 0: a
     * reader; N: one of N slots) the lone share's name or our entry's.
     * $wait null waits without limit. Waiters line up in the turnstile
     * where there is one (Turnstile), else poll with backoff.
     *
     * @throws BusyException|TimeoutException|Exception
     */
    public static function acquire(string $dir, ?float $wait, int $leaseUs, ?int $named = null, ?int $limit = null): string
    {
        $exists = self::checkTrusted($dir, $named);
        if ($limit !== null && self::needsMarks($dir)) {
            throw new Exception('not_supported', "tokenlock: acquire $dir: shared locks and semaphores are refused on this filesystem (" . (self::dirFsType($dir) ?? 'its type cannot be told') . '), where renames need owner marks, which are not designed for group covers yet; take the lock exclusively, or put it on a local filesystem or NFS', 69);
        }
        // A hungry head is owed the next release: a newcomer lines up behind
        // it rather than renaming the freed token first. A caller that cannot
        // wait has no place in a line, and makes its one try.
        $once = $wait !== null && $wait <= 0;
        $hungry = !$once && $exists && self::lineIsHungry($dir);
        // The common case in as few steps as PHP allows: one rename takes
        // the free token. A busy lock goes on as below, its first look due.
        $tried = $limit === null && $exists && !$hungry && !self::needsMarks($dir);
        if ($tried && ($mine = self::takeFree($dir, $leaseUs)) !== null) {
            self::hold($dir, $mine);
            return $mine;
        }
        $since = hrtime(true);
        $w = [
            'dir' => $dir, 'wait' => $wait, 'lease' => $leaseUs, 'named' => $named, 'since' => $since,
            'deadline' => $wait === null ? null : $since + (int) ($wait * 1e9),
            'exists' => $exists, 'first' => !$tried, 'final' => false, 'looked' => false,
            'lastLook' => $since - self::LOOK_EVERY_NS, 'reason' => '',
            // Tokens a rename made ours that no owner mark confirmed: should one
            // show up under our name again, it is ours to confirm, not a live
            // holder's to wait for.
            'givenUp' => [],
            'limit' => $limit, 'hungry' => $hungry,
        ];
        // A reader that can join does not line up: its first round joins.
        if ($once || !$hungry || $limit !== null) {
            $got = self::attempt($w);
            if (is_string($got)) {
                return $got;
            }
            if ($w['final']) {
                return self::atDeadline($w);
            }
        }
        $w['hungry'] = false;
        return self::line($w) ?? self::poll($w);
    }

    /**
     * Renames the free token of DIR to a new token of ours: the token, or
     * null when there is no free token (the lock is busy).
     */
    private static function takeFree(string $dir, int $leaseUs, ?string $mine = null): ?string
    {
        $mine ??= self::token(self::nowUs() + $leaseUs);
        $errno = self::rename("$dir/" . self::FREE, "$dir/$mine");
        if ($errno === 0) {
            return $mine;
        }
        if ($errno !== 2) {
            throw self::systemError('acquire', $dir, 'cannot rename the free token ' . self::FREE . " to $mine", $errno, $errno === 1 ? self::stickyFix($dir) : '');
        }
        // ENOENT: an NFS client may retransmit a rename whose reply was lost.
        clearstatcache(true, "$dir/$mine");
        return @lstat("$dir/$mine") !== false ? $mine : null;
    }

    /**
     * Rounds of the protocol until one finds the lock busy (false) or takes
     * it (the token). The first lists the directory, and so do one every
     * 10 ms and the one at the deadline ($w['final'] then tells so).
     *
     * @param array<string, mixed> $w
     */
    private static function attempt(array &$w): string|false
    {
        do {
            $now = hrtime(true);
            $w['final'] = $w['deadline'] !== null && $now >= $w['deadline'];
            $w['looked'] = $w['first'] || $w['final'] || $now - $w['lastLook'] >= self::LOOK_EVERY_NS;
            if ($w['looked']) {
                $w['lastLook'] = $now;
            }
            $got = $w['limit'] === null ? self::round($w) : self::sharedRound($w);
            $w['first'] = false;
        } while ($got === true);
        return $got;
    }

    /**
     * Waiting without a line: backoff from 100 µs to 50 ms.
     *
     * @param array<string, mixed> $w
     */
    private static function poll(array &$w): string
    {
        $delay = self::BACKOFF_MIN_US;
        while (true) {
            $got = self::attempt($w);
            if (is_string($got)) {
                return $got;
            }
            if ($w['final']) {
                return self::atDeadline($w);
            }
            self::pause($w, (int) ($delay * (0.75 + 0.5 * mt_rand() / mt_getrandmax())));
            $delay = min(2 * $delay, self::BACKOFF_MAX_US);
        }
    }

    /**
     * Sleeps US microseconds, cut to the deadline, after a round that found
     * the lock busy.
     *
     * @param array<string, mixed> $w
     */
    private static function pause(array $w, int $us): void
    {
        // Leftovers of killed creators: only occasionally, as a waiter has time to spare.
        if ($w['looked'] && random_int(0, 31) === 0) {
            self::sweep($w['dir'], $w['lease']);
        }
        if ($w['deadline'] !== null) {
            $us = max(0, min($us, intdiv($w['deadline'] - hrtime(true), 1000) + 1));
        }
        usleep($us);
    }

    /**
     * The end of a wait: a writer gives its mark up (and holds, should the
     * hand-over have come meanwhile), then the verdict is thrown.
     *
     * @param array<string, mixed> $w
     */
    private static function atDeadline(array &$w): string
    {
        if (isset($w['markNonce']) && ($got = self::unmark($w)) !== null) {
            return $got;
        }
        throw self::verdict($w);
    }

    /**
     * The verdict at the deadline: busy (no wait) or timed out.
     *
     * @param array<string, mixed> $w
     */
    private static function verdict(array $w): Exception
    {
        if ($w['wait'] <= 0) {
            return new BusyException('busy', "tokenlock: acquire {$w['dir']}: the lock is busy: {$w['reason']}", 1);
        }
        return new TimeoutException('timed_out', "tokenlock: acquire {$w['dir']}: timed out after " . Command::formatSeconds($w['wait']) . " s: {$w['reason']}", 1);
    }

    /**
     * One round of the protocol: the token (acquired), true (look again at
     * once) or false (busy: $w['reason'] says why). After the first round a
     * lookup, which takes no lock, tells whether a rename, which locks the
     * directory, can succeed; the directory is listed only when
     * $w['looked']. Shared holders are marked, and their hand-over taken
     * (Writing).
     *
     * @param array<string, mixed> $w
     */
    private static function round(array &$w): string|bool
    {
        $dir = $w['dir'];
        clearstatcache(true, "$dir/" . self::FREE);
        // Only a rename needs a token: a waiter's round mostly has none to try.
        $try = $w['exists'] && ($w['first'] || @lstat("$dir/" . self::FREE) !== false);
        $mine = $try ? self::takeFree($dir, $w['lease']) : null;
        if ($mine !== null) {
            return self::finish($dir, $mine, null, $w['lease'], $w['givenUp'], $w['reason']) ? $mine : false;
        }
        if (!$w['looked']) {
            return false;
        }
        $found = self::seen($w);
        if (!is_array($found)) {
            return $found;
        }
        // One held token: take it over if stale, else wait.
        if (isset($w['givenUp'][$found[0]])) {
            return self::finish($dir, $found[0], null, $w['lease'], $w['givenUp'], $w['reason']) ? $found[0] : false;
        }
        $got = self::writerAtShare($w, $found[0], $found[1]);
        if ($got !== null) {
            return $got;
        }
        [$stale, $w['reason']] = self::judge($found[0], $found[1]);
        return $stale ? self::takeOver($w, $found[0], self::token(self::nowUs() + $w['lease'])) : false;
    }

    /**
     * A rename made TOKEN ours (taking over $takenFrom, if given). Where a
     * rename can move a token through a name it no longer has, the owner
     * mark confirms it first; false when it does not ($reason says why).
     *
     * @param array<string, bool> $givenUp
     */
    private static function finish(string $dir, string $token, ?string $takenFrom, int $leaseUs, array &$givenUp, string &$reason, ?array $taken = null): bool
    {
        // Noted at once: a request that dies from here on still releases it.
        self::hold($dir, $token);
        $marks = self::needsMarks($dir);
        if ($marks) {
            try {
                [$outcome, $holder] = self::markAndCheck($dir, $token, $takenFrom);
            } catch (\Throwable $e) {
                self::unhold($token);
                throw $e;
            }
            if ($outcome !== 'held') {
                self::unhold($token);
                $givenUp[$token] = true;
                $reason = $holder ?? 'taken by another client at the same moment';
                return false;
            }
        }
        if ($takenFrom !== null) {
            if ($taken !== null) {
                self::clearWorkspace($dir, $token, $taken, $marks);
            }
            self::sweep($dir, $leaseUs);
        }
        return true;
    }

    /** Renames TOKEN back to the free token. */
    public static function release(string $dir, string $token): void
    {
        if (self::isShare($token)) {
            self::releaseShared($dir, $token);
            return;
        }
        $marked = self::needsMarks($dir);
        $mark = $marked ? "$dir/$token/" . self::markOf($token) : '';
        // The next holder of the free token would find our mark and step back.
        error_clear_last();
        if ($marked && !@rmdir($mark) && ($errno = self::lastErrno() ?: 5) !== 2) {
            throw self::systemError('release', $dir, "cannot remove our owner mark from $token (the lock is still ours)", $errno);
        }
        // Never retried after ENOENT: on GlusterFS a rename through a stale
        // name can move the token of whoever took ours over.
        $errno = self::rename("$dir/$token", "$dir/" . self::FREE);
        if ($errno === 0 || $errno === 2) {
            self::unhold($token);
        }
        if ($errno === 2) {
            throw new LockLostException('lock_lost', "tokenlock: release $dir: the lock does not hold $token any more: it was taken over (its lease ended, its owner was judged dead, or it was broken), so another process may have held it meanwhile; nothing was changed", 3);
        }
        if ($errno !== 0) {
            // Still ours; held without its mark, another client's rename
            // through a stale name could take it.
            $fix = '';
            error_clear_last();
            if ($marked && !@mkdir($mark, 0700) && self::lastErrno() !== 17) {
                $fix = 'and our owner mark could not be put back: until the release succeeds, another GlusterFS client may take the lock too';
            }
            throw self::systemError('release', $dir, "cannot rename $token to " . self::FREE, $errno, $fix);
        }
    }

    /** Renames TOKEN to the same owner with a new expiry; returns the new name. */
    public static function refresh(string $dir, string $token, int $leaseUs): string
    {
        if (self::isShare($token)) {
            return self::refreshShared($dir, $token, $leaseUs);
        }
        $owner = substr($token, strpos($token, '.', strlen(self::PREFIX)) + 1);
        $new = self::PREFIX . (self::nowUs() + $leaseUs) . '.' . $owner;
        if ($new === $token) {
            return $token;
        }
        $errno = self::rename("$dir/$token", "$dir/$new");
        clearstatcache(true, "$dir/$new");
        // An NFS client may retransmit a rename whose reply was lost.
        if ($errno === 2 && @lstat("$dir/$new") === false) {
            self::unhold($token);
            throw new LockLostException('lock_lost', "tokenlock: refresh $dir: the lock does not hold $token any more: it was taken over (its lease ended, its owner was judged dead, or it was broken); nothing was changed", 3);
        }
        if ($errno !== 0 && $errno !== 2) {
            throw self::systemError('refresh', $dir, "cannot rename $token to $new", $errno);
        }
        self::unhold($token);
        self::hold($dir, $new);
        // The mark names the current lease: one naming the old lease would
        // look expired to a process judging it after that lease's end.
        if (self::needsMarks($dir)) {
            $errno = self::rename("$dir/$new/" . self::markOf($token), "$dir/$new/" . self::markOf($new));
            error_clear_last();
            if ($errno !== 0 && !($errno === 2 && (@mkdir("$dir/$new/" . self::markOf($new), 0700) || self::lastErrno() === 17))) {
                throw self::systemError('refresh', $dir, "the lease was renewed (the token is now $new), but our owner mark in it could not be renamed to match", $errno ?: 5,
                    'until a refresh succeeds, another GlusterFS client may judge it expired at the old lease\'s end');
            }
        }
        return $new;
    }

    // ---- Owner marks (docs/protocol.md, Owner marks) ---------------------

    /**
     * Filesystems whose renames keep the protocol's property by themselves:
     * local ones (the wait board's allowlist), and network ones whose
     * server renames by name.
     */
    private const NO_MARKS = ['ext2', 'ext3', 'ext4', 'xfs', 'btrfs', 'tmpfs', 'ramfs', 'f2fs', 'overlay', 'zfs', 'reiserfs', 'jfs',
        'bcachefs', 'nilfs2', 'fuse.sshfs', 'fuse.mfs', 'fuse.moosefs', 'nfs', 'nfs4', 'cifs', 'smb3', 'ceph', 'fuse.ceph', 'fuse.ceph-fuse'];
}
