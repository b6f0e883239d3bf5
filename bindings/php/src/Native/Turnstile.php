<?php

declare(strict_types=1);

namespace Tokenlock\Native;

/**
 * The line of waiters of docs/waiting-turnstile.md: waiters take turns at
 * a flock on D/turnstile without blocking, and the one holding it, the
 * head, alone polls the lock. The turnstile is a hint: it decides only
 * when a waiter looks at the lock, every acquisition is still a rename,
 * and whatever is wrong with it costs latency only.
 *
 * PHP has no O_NOFOLLOW: the name is judged by lstat before it is opened
 * and the handle by fstat, and both must be the same file. Only trusted
 * users can add entries to D, so nobody else can plant anything there.
 *
 * @internal
 */
trait Turnstile
{
    /** Where the board's allowlist says flock is local and cheap. */
    private const LINE_TYPES = ['ext2', 'ext3', 'ext4', 'xfs', 'btrfs', 'tmpfs', 'ramfs', 'f2fs', 'overlay', 'zfs', 'reiserfs', 'jfs', 'bcachefs', 'nilfs2'];
    private const TURNSTILE = 'turnstile';
    private const HEAD_POLL_US = 1000;
    private const HUNGRY_AFTER_NS = 1000000;
    private const HUNGRY_POLL_US = 100;
    private const SLEEP_FIRST_US = 16000;
    private const SLEEP_AGE_NS = 25000000;
    private const SLEEP_FLOOR_US = 2000;
    /** A sleeper looks at the lock itself this often: the bound on what a stuck head costs. */
    private const OWN_LOOK_NS = 100000000;
    /** Turnstiles kept open at once: each is a descriptor. */
    private const KEPT_TURNSTILES = 32;

    /**
     * Per lock directory: whether its waiters line up (a local
     * filesystem), asked once per process. Tests set an entry to force it.
     *
     * @var array<string, bool>
     */
    public static array $lineHere = [];

    /**
     * DIR => [handle, pid]: kept open between waits, so that a process
     * that waits again pays no open. Never flocked outside a wait: the
     * head unlocks before its wait returns or throws, and leaveLine() when
     * the request ends in the middle of one. Opened close-on-exec ('e'): a
     * program started later must not keep the open file description, and
     * with it a flock, alive after this process dies as head.
     *
     * @var array<string, array{0: resource, 1: int}>
     */
    private static array $turnstiles = [];

    /** @var resource|null the turnstile this process is head of, while it is */
    private static $heading = null;

    /** Whether waiters of DIR line up: only on a local filesystem it can tell. */
    private static function lineHere(string $dir): bool
    {
        if (!isset(self::$lineHere[$dir])) {
            if (count(self::$lineHere) >= 1024) {
                self::$lineHere = [];
            }
            self::$lineHere[$dir] = in_array(self::dirFsType($dir), self::LINE_TYPES, true);
        }
        return self::$lineHere[$dir];
    }

    /**
     * Whether a head has marked DIR's turnstile hungry: one lstat, the only
     * call the turnstile adds to the fast path.
     */
    private static function lineIsHungry(string $dir): bool
    {
        if (!self::lineHere($dir)) {
            return false;
        }
        $path = "$dir/" . self::TURNSTILE;
        clearstatcache(true, $path);
        $st = @lstat($path);
        return $st !== false && $st['size'] > 0 && ($st['mode'] & 0170000) === 0100000;
    }

    /**
     * Waits in DIR's line until the lock is ours (the token) or the
     * deadline (throws, as polling does); null when this lock has no line
     * (another filesystem, or nothing usable at D/turnstile): poll then.
     *
     * @param array<string, mixed> $w the wait's state (Native::acquire)
     */
    private static function line(array &$w): ?string
    {
        $fp = $w['exists'] && self::lineHere($w['dir']) ? self::turnstile($w['dir']) : null;
        if ($fp === null) {
            return null;
        }
        self::atRequestEnd();
        while (true) {
            if (self::enterTurnstile($fp, $w)) {
                return self::head($fp, $w);
            }
            // A sleeper's own look: at the lock, every 100 ms and at its deadline.
            $got = self::attempt($w);
            if (is_string($got)) {
                return $got;
            }
            if ($w['final']) {
                return self::atDeadline($w);
            }
        }
    }

    /**
     * A sleeper tries the turnstile until it is head (true), or until its
     * own look or its deadline is due (false). It sleeps 16 ms, halved for
     * every 25 ms it has waited, down to 2 ms: of the sleepers, the one
     * that waited longest tries most often, so it most likely takes the
     * turnstile when it frees (nearly first come, first served).
     *
     * @param resource $fp
     * @param array<string, mixed> $w
     */
    private static function enterTurnstile($fp, array $w): bool
    {
        // A writer that marked shared holders is owed the hand-over: it
        // looks as often as the head does not, every 10 ms.
        $until = hrtime(true) + (isset($w['markNonce']) ? self::LOOK_EVERY_NS : self::OWN_LOOK_NS);
        if ($w['deadline'] !== null) {
            $until = min($until, $w['deadline']);
        }
        while (true) {
            if (@flock($fp, LOCK_EX | LOCK_NB)) {
                self::$heading = $fp;
                return true;
            }
            $now = hrtime(true);
            if ($now >= $until) {
                return false;
            }
            $pause = max(self::SLEEP_FLOOR_US, self::SLEEP_FIRST_US >> min(30, intdiv($now - $w['since'], self::SLEEP_AGE_NS)));
            usleep(max(1, min($pause, intdiv($until - $now, 1000) + 1)));
        }
    }

    /**
     * The head alone polls the lock: every 1 ms, and after 1 ms as head it
     * marks the turnstile hungry (size 1), so that newcomers leave the next
     * release to it, and polls every 100 µs. A mark found set (left by a
     * head that died) is its own. It leaves as soon as it holds the lock,
     * gives up or fails, so that the next head is polling meanwhile.
     *
     * @param resource $fp
     * @param array<string, mixed> $w
     */
    private static function head($fp, array &$w): string
    {
        $became = hrtime(true);
        $hungry = (fstat($fp)['size'] ?? 0) > 0;
        try {
            while (true) {
                $got = self::attempt($w);
                if (is_string($got)) {
                    return $got;
                }
                if ($w['final']) {
                    return self::atDeadline($w);
                }
                if (!$hungry && hrtime(true) - $became >= self::HUNGRY_AFTER_NS) {
                    $hungry = @ftruncate($fp, 1);
                }
                self::pause($w, $hungry ? self::HUNGRY_POLL_US : self::HEAD_POLL_US);
            }
        } finally {
            self::leaveLine();
        }
    }

    /**
     * Leaves the head's place, if this process holds it: clears the mark
     * (a head that holds the turnstile owns it) and unlocks. Also called
     * as the request ends, when a fatal error cut a wait short.
     */
    public static function leaveLine(): void
    {
        $fp = self::$heading;
        self::$heading = null;
        if (is_resource($fp)) {
            if ((@fstat($fp)['size'] ?? 0) > 0) {
                @ftruncate($fp, 0);
            }
            @flock($fp, LOCK_UN);
        }
    }

    /**
     * DIR's turnstile, opened (or, by a waiter that saw the lock held,
     * created), or null when what is at that name is not one to use: it is
     * then left exactly as it is.
     *
     * @return resource|null
     */
    private static function turnstile(string $dir)
    {
        $pid = self::pid();
        [$kept, $owner] = self::$turnstiles[$dir] ?? [null, 0];
        // Removed (no link left), or a parent's: a child must not share the
        // open file description that carries the flock.
        if ($kept !== null && ($owner !== $pid || (@fstat($kept)['nlink'] ?? 0) !== 1)) {
            if ($owner === $pid) {
                fclose($kept);
            }
            unset(self::$turnstiles[$dir]);
            $kept = null;
        }
        if ($kept !== null) {
            return $kept;
        }
        $fp = self::openTurnstile($dir);
        if ($fp !== null) {
            if (count(self::$turnstiles) >= self::KEPT_TURNSTILES) {
                $oldest = array_key_first(self::$turnstiles);
                if (self::$turnstiles[$oldest][1] === $pid) {
                    fclose(self::$turnstiles[$oldest][0]);
                }
                unset(self::$turnstiles[$oldest]);
            }
            self::$turnstiles[$dir] = [$fp, $pid];
        }
        return $fp;
    }

    /** @return resource|null */
    private static function openTurnstile(string $dir, bool $again = true)
    {
        $path = "$dir/" . self::TURNSTILE;
        clearstatcache(true, $dir);
        clearstatcache(true, $path);
        $dirOwner = @lstat($dir)['uid'] ?? -1;
        $group = self::chosenGroup($dir);
        $seen = @lstat($path);
        // Judged before it is opened, so that a link or a device is never opened.
        if ($seen !== false && self::judgeTurnstile($seen, $dirOwner, $group) !== '') {
            return null;
        }
        $fp = $seen === false ? self::createTurnstile($path, $group) : @fopen($path, 'r+e');
        if ($fp === false && $seen === false && $again && self::lastErrno() === 17) {
            return self::openTurnstile($dir, false);  // another waiter made it first
        }
        if ($fp === false) {
            return null;
        }
        $st = fstat($fp);
        if ($st === false || self::judgeTurnstile($st, $dirOwner, $group) !== ''
            || ($seen !== false && ($seen['dev'] !== $st['dev'] || $seen['ino'] !== $st['ino']))) {
            fclose($fp);
            return null;
        }
        return $fp;
    }

    /**
     * Creates the turnstile at PATH: O_CREAT|O_EXCL, which never follows a
     * link, then its mode set exactly: 0600, or 0660 for a lock shared
     * with GROUP. Whoever can open it can hold its flock, so nobody
     * untrusted may even read it; the umask closes the moment before chmod
     * where it can (not in a threaded PHP, where the umask is every
     * thread's).
     *
     * @return resource|false
     */
    private static function createTurnstile(string $path, ?int $group)
    {
        $old = PHP_ZTS ? null : umask(077);
        error_clear_last();
        $fp = @fopen($path, 'x+e');
        if ($old !== null) {
            umask($old);
        }
        if ($fp === false) {
            return false;
        }
        if ($group !== null && (fstat($fp)['gid'] ?? $group) !== $group) {
            @chgrp($path, $group);
        }
        @chmod($path, $group !== null ? 0660 : 0600);
        clearstatcache(true, $path);
        return $fp;
    }

    /**
     * Why the file with status ST is no turnstile to use ('' when it is):
     * a regular file of one link (a hard link to a victim's file has two),
     * ours or the lock directory owner's, writable by no other user, and by
     * its group only when the lock is shared with that group.
     *
     * @param array{mode: int, nlink: int, uid: int, gid: int} $st
     */
    private static function judgeTurnstile(array $st, int $dirOwner, ?int $group): string
    {
        if (($st['mode'] & 0170000) !== 0100000) {
            return 'not a regular file';
        }
        if ($st['nlink'] !== 1) {
            return 'more than one link';
        }
        if ($st['uid'] !== self::euid() && $st['uid'] !== $dirOwner) {
            return 'owned by another user';
        }
        if ($st['mode'] & 002) {
            return 'writable by every user';
        }
        return ($st['mode'] & 020) && $st['gid'] !== $group ? 'writable by a group not chosen for sharing' : '';
    }
}
