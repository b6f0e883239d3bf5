<?php

declare(strict_types=1);

namespace Tokenlock\Native;

use Tokenlock\Exception;

/**
 * Whether a lock directory can be trusted (trust.cpp, docs/security.md):
 * nobody but this user, root and the one group chosen for sharing may
 * change it; and the mode, group and effective uid that decide it.
 *
 * @internal
 */
trait Trust
{
    /**
     * Per lock directory: the identity and group choice it was last judged
     * with, and the group chosen for it (null: none), which applies to its
     * token and workspace. A lock directory is judged again only when an
     * lstat() shows it changed, so that the fast path costs one lstat.
     *
     * @var array<string, array{0: string, 1: ?int}>
     */
    private static array $judged = [];

    /**
     * Refuses a lock directory another user could change (trust.cpp). A
     * missing one is fine (it is created); returns whether it exists.
     * $named is the group named for sharing (group()), or null.
     */
    public static function checkTrusted(string $dir, ?int $named = null, string $step = 'acquire', string $what = 'the lock directory'): bool
    {
        clearstatcache(true, $dir);
        $st = @lstat($dir);
        if ($st === false) {
            // Before anything is made: who we are decides what we trust.
            self::euid($step, $dir);
            return false;
        }
        $sharing = (self::dirMode($step) & 020) !== 0;
        $key = "{$st['dev']}:{$st['ino']}:{$st['mode']}:{$st['uid']}:{$st['gid']}:$named:$sharing";
        if ((self::$judged[$dir][0] ?? null) === $key) {
            return true;
        }
        $type = $st['mode'] & 0170000;
        // As the library, which opens it with O_DIRECTORY|O_NOFOLLOW: a link
        // is refused as untrusted, anything else that is not a directory
        // is ENOTDIR.
        if ($type !== 0040000 && $type !== 0120000) {
            throw self::systemError($step, $dir, "cannot open $what", 20, "remove it, or name a directory");
        }
        $euid = self::euid($step, $dir);
        // The group of a lock directory of our own that we made shared.
        $chosen = $named ?? (($type === 0040000 && $st['uid'] === $euid && $sharing) ? $st['gid'] : null);
        $why = $type !== 0040000 ? 'it is not a directory; remove it' : self::distrust($dir, $st, $euid, $chosen, $named !== null);
        if ($why !== '') {
            throw self::untrusted($step, $dir, $what, $st, $euid, $why);
        }
        self::$judged[$dir] = [$key, $chosen];
        return true;
    }

    /**
     * Verdicts on entries inside trusted lock directories (tokens,
     * workspaces): the judgement depends only on what lstat() shows (type
     * and mode, owner, group) and on the chosen group, so an entry that
     * shows the same as one judged trusted before is trusted without
     * judging it again; a changed mode, owner or group is judged anew.
     * Under php-fpm statics last one request, and so do these.
     *
     * @var array<string, true>
     */
    private static array $trustedInside = [];

    /**
     * Refuses an entry of lock directory DIR (its token, the workspace `w`)
     * that another user could change: trusted by the group chosen when DIR
     * was judged by checkTrusted(). $st is its lstat() made a moment ago,
     * else it is asked.
     *
     * @param array<string, int>|null $st
     */
    public static function checkInside(string $dir, string $path, string $step, string $what, ?array $st = null): void
    {
        if ($st === null) {
            clearstatcache(true, $path);
            $st = @lstat($path);
            if ($st === false) {
                throw self::systemError($step, $path, "cannot look at $what", self::lastErrno() ?: 2);
            }
        }
        $chosen = self::$judged[$dir][1] ?? null;
        $key = "{$st['mode']}:{$st['uid']}:{$st['gid']}:$chosen";
        if (isset(self::$trustedInside[$key])) {
            return;
        }
        $euid = self::euid($step, $path);
        $why = ($st['mode'] & 0170000) !== 0040000 ? 'it is not a directory; remove it'
            : self::distrust($path, $st, $euid, $chosen, true);
        if ($why !== '') {
            throw self::untrusted($step, $path, $what, $st, $euid, $why);
        }
        self::$trustedInside[$key] = true;
    }

    /** The group chosen for sharing when DIR was last judged, or null. */
    public static function chosenGroup(string $dir): ?int
    {
        return self::$judged[$dir][1] ?? null;
    }

    /** @param array{mode: int, uid: int} $st */
    private static function untrusted(string $step, string $path, string $what, array $st, int $euid, string $why): Exception
    {
        return new Exception('untrusted', sprintf('tokenlock: %s %s: refusing %s (owner uid %d, mode %04o; this process runs as uid %d): another user could plant or swap entries in it, and nothing in it was touched; %s',
            $step, $path, $what, $st['uid'], $st['mode'] & 07777, $euid, $why), 77);
    }

    /**
     * Why a directory another user could change is not trusted (trust.cpp),
     * or ''. Only the one group chosen for sharing is trusted, never every
     * group this user happens to be in (many hosts put everyone in
     * `users`): a directory of ours or root's may be writable by that group
     * only, and one of another user's must be in that group, which for a
     * lock directory itself must be a named one ($named).
     *
     * @param array{mode: int, uid: int, gid: int} $st
     */
    private static function distrust(string $dir, array $st, int $euid, ?int $chosen, bool $named): string
    {
        $mode = $st['mode'] & 07777;
        if ($mode & 002) {
            return sprintf('it is writable by every user (mode %04o); run chmod o-w %s if its contents are yours, or remove it; share it through one group instead: name the group (the group option or TOKENLOCK_GROUP=%s)',
                $mode, $dir, self::groupName($st['gid']));
        }
        if ($st['uid'] === $euid || $st['uid'] === 0) {
            if (($mode & 020) && $st['gid'] !== $chosen) {
                $name = self::groupName($st['gid']);
                return sprintf('it is writable by group %s (mode %04o), which is not the group chosen for sharing; run chmod g-w %s if the group is not meant to share it, or name the group: the group option or TOKENLOCK_GROUP=%s', $name, $mode, $dir, $name);
            }
            return '';
        }
        if ($st['gid'] === $chosen && $named) {
            return '';
        }
        return sprintf('it belongs to uid %d (mode %04o), who could change it; have that user (or root) remove it and it is created again on next use, or name the group both share (the group option or TOKENLOCK_GROUP=%s), if that user shares it on purpose',
            $st['uid'], $mode, self::groupName($st['gid']));
    }

    /** A group's name for messages, else its gid. */
    private static function groupName(int $gid): string
    {
        $entry = function_exists('posix_getgrgid') ? @posix_getgrgid($gid) : false;
        return is_array($entry) && isset($entry['name']) ? $entry['name'] : (string) $gid;
    }

    /** @var array<string, int> what TOKENLOCK_DIR_MODE said => its mode */
    private static array $dirModes = [];

    /**
     * The mode of the lock directories and workspaces this process creates:
     * TOKENLOCK_DIR_MODE, as the command reads it, else 0755. With group
     * write (0775, 0770) locks are shared with a group.
     */
    public static function dirMode(string $step = 'acquire'): int
    {
        $text = getenv('TOKENLOCK_DIR_MODE');
        if ($text === false || $text === '') {
            return self::DIR_MODE;
        }
        return self::$dirModes[$text] ??= self::parseDirMode($text, $step);
    }

    private static function parseDirMode(string $text, string $step): int
    {
        if (!preg_match('/\A[0-7]{1,5}\z/', $text) || octdec($text) > 07777) {
            throw new Exception('bad_argument', "tokenlock: $step: TOKENLOCK_DIR_MODE takes an octal mode such as 0775, not \"$text\"", 64);
        }
        $mode = (int) octdec($text);
        $problem = ($mode & 0700) !== 0700 ? 'the owner needs read, write and search permission (0700) on a lock directory'
            : (($mode & 0002) ? 'a lock directory writable by others is refused by every process that uses it (docs/security.md): share it with a group instead, with 0775 or 0770 and a common group'
            : (($mode & 01000) ? 'in a sticky lock directory only a token\'s owner may rename it, so users lock each other out' : ''));
        if ($problem !== '') {
            throw new Exception('bad_argument', "tokenlock: $step: TOKENLOCK_DIR_MODE $text: $problem", 64);
        }
        return $mode;
    }

    /** @var array<string, int> what named a group => its gid, membership checked */
    private static array $groups = [];

    /**
     * The group named for sharing: $option (a name or a decimal gid), else
     * TOKENLOCK_GROUP, else null. This user must be a member of it.
     *
     * @throws Exception `bad_argument` for an unknown group or one this
     *         user is not in
     */
    public static function group(mixed $option, string $step = 'acquire'): ?int
    {
        if ($option === null) {
            $option = getenv('TOKENLOCK_GROUP');
            if ($option === false || $option === '') {
                return null;
            }
        }
        if (!is_string($option) && !is_int($option)) {
            throw new \InvalidArgumentException('Tokenlock: the group option takes a group name or a decimal gid');
        }
        $text = (string) $option;
        return self::$groups[$text] ??= self::resolveGroup($text, $step);
    }

    private static function resolveGroup(string $text, string $step): int
    {
        $shown = addcslashes($text, "\0..\37\177..\377");
        if (preg_match('/\A[0-9]{1,10}\z/', $text)) {
            $gid = (int) $text;
        } elseif (function_exists('posix_getgrnam')) {
            $entry = @posix_getgrnam($text);
            $gid = is_array($entry) ? $entry['gid'] : null;
        } else {
            $gid = null;
            foreach (@file('/etc/group', FILE_IGNORE_NEW_LINES) ?: [] as $line) {
                $f = explode(':', $line);
                if (count($f) >= 3 && $f[0] === $text && preg_match('/\A[0-9]{1,10}\z/', $f[2])) {
                    $gid = (int) $f[2];
                }
            }
        }
        if ($gid === null) {
            throw new Exception('bad_argument', "tokenlock: $step: the group \"$shown\" named for sharing does not exist (or cannot be looked up here: name it by its decimal gid)", 64);
        }
        $member = self::inGroup($gid);
        if ($member !== true) {
            throw new Exception('bad_argument', "tokenlock: $step: the group \"$shown\" named for sharing (gid $gid) " . ($member === false
                ? 'is not one of this user\'s groups; name a group this user is in, or add the user to it'
                : 'cannot be checked: this process cannot learn its groups (posix_getgroups() is disabled and /proc/self/status cannot be read); enable the posix extension or allow /proc in open_basedir'), 64);
        }
        return $gid;
    }

    /** Whether GID is this process's effective group or one of its groups; null when it cannot tell. */
    private static function inGroup(int $gid): ?bool
    {
        if (function_exists('posix_getegid') && function_exists('posix_getgroups')) {
            return $gid === posix_getegid() || in_array($gid, posix_getgroups() ?: [], true);
        }
        // Without posix: the Gid and Groups lines of /proc/self/status.
        $status = (string) @file_get_contents('/proc/self/status');
        if (!preg_match('/^Gid:\s+\d+\s+(\d+)/m', $status, $g)) {
            return null;
        }
        $groups = preg_match('/^Groups:([ \t\d]*)$/m', $status, $m) ? preg_split('/\s+/', trim($m[1])) : [];
        return in_array((string) $gid, array_merge([$g[1]], $groups), true);
    }

    /** The effective uid found without posix, once per process. */
    private static ?int $euidSeen = null;

    /**
     * The effective uid. Without posix_geteuid(), the Uid line of
     * /proc/self/status, else the owner of a temporary file this process
     * makes (a new file belongs to its creator's effective uid). Never a
     * guess: who we are decides what is trusted.
     *
     * @throws Exception `system` when none of these can be had
     */
    public static function euid(string $step = 'acquire', string $path = ''): int
    {
        if (function_exists('posix_geteuid')) {
            return posix_geteuid();
        }
        if (self::$euidSeen !== null) {
            return self::$euidSeen;
        }
        $status = (string) @file_get_contents('/proc/self/status');
        if (preg_match('/^Uid:\s+\d+\s+(\d+)/m', $status, $m)) {
            return self::$euidSeen = (int) $m[1];
        }
        $h = @tmpfile();
        $st = $h === false ? false : fstat($h);
        if ($h !== false) {
            fclose($h);
        }
        if ($st !== false) {
            return self::$euidSeen = $st['uid'];
        }
        throw new Exception('system', "tokenlock: $step" . ($path === '' ? '' : " $path") . ': cannot tell which user this process runs as, which decides whom it trusts: posix_geteuid() is disabled or missing, /proc/self/status cannot be read and no temporary file could be made; nothing was touched: enable the posix extension, or allow /proc or sys_temp_dir in open_basedir', 71, [], null, 13);
    }
}
