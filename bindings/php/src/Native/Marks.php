<?php

declare(strict_types=1);

namespace Tokenlock\Native;

/**
 * Owner marks, on filesystems where a rename can move a token through a
 * name it no longer has (docs/protocol.md): which filesystems need them
 * (from /proc/self/mountinfo, PHP having no statfs), and the mark that
 * confirms a rename made a token ours.
 *
 * @internal
 */
trait Marks
{
    /**
     * Per lock directory: whether owner marks are made, asked once per
     * process. Tests set an entry to force them.
     *
     * @var array<string, bool>
     */
    public static array $ownerMarks = [];

    /** @var array<string, ?string> lock directory => its filesystem type */
    private static array $fsTypes = [];

    /**
     * The type of the filesystem holding PATH, from the mount table by
     * device number, else by the mount point that is the longest prefix of
     * its real path (a btrfs subvolume's device is in no mount); null when
     * it cannot be told (a missing path, a mount table out of reach).
     */
    public static function fsType(string $path, string $table = '/proc/self/mountinfo'): ?string
    {
        clearstatcache(true, $path);
        $st = @stat($path);
        $text = $st === false ? false : @file_get_contents($table);
        if ($text === false) {
            return null;
        }
        $dev = $st['dev'];
        $id = ((($dev >> 8) & 0xfff) | (($dev >> 32) & ~0xfff)) . ':' . (($dev & 0xff) | (($dev >> 12) & ~0xff));
        $mounts = [];
        foreach (explode("\n", $text) as $line) {
            $f = explode(' ', $line);
            $sep = array_search('-', array_slice($f, 6, null, true), true);
            if (count($f) <= 4 || $sep === false || !isset($f[$sep + 1])) {
                continue;
            }
            if ($f[2] === $id) {
                return $f[$sep + 1];
            }
            $point = (string) preg_replace_callback('/\\\\([0-7]{3})/', fn ($m) => chr(octdec($m[1])), $f[4]);
            $mounts[] = [$point, $f[$sep + 1]];
        }
        $real = realpath($path);
        if ($real === false) {
            return null;
        }
        $best = '';
        $type = null;
        foreach ($mounts as [$point, $fs]) {
            if (($real === $point || $point === '/' || str_starts_with($real, "$point/")) && strlen($point) >= strlen($best)) {
                [$best, $type] = [$point, $fs];
            }
        }
        return $type;
    }

    /** Whether acquisitions of DIR make owner marks: unless its filesystem is known not to need them. */
    public static function needsMarks(string $dir): bool
    {
        if (isset(self::$ownerMarks[$dir])) {
            return self::$ownerMarks[$dir];
        }
        $type = self::dirFsType($dir);
        return self::$ownerMarks[$dir] = $type === null || !in_array($type, self::NO_MARKS, true);
    }

    /**
     * The filesystem type of lock directory DIR (null: cannot be told),
     * read once per directory: owner marks, the turnstile and the updater
     * all ask (each read of the mount table is a dozen system calls, and
     * under php-fpm it is made again in every request).
     */
    public static function dirFsType(string $dir): ?string
    {
        if (array_key_exists($dir, self::$fsTypes)) {
            return self::$fsTypes[$dir];
        }
        // The lock directory may not exist yet; its parent is then asked.
        $slash = strrpos($dir, '/');
        $type = self::fsType($dir) ?? self::fsType($slash === false ? '.' : ($slash === 0 ? '/' : substr($dir, 0, $slash)));
        if (count(self::$fsTypes) >= 1024) {
            self::$fsTypes = [];
        }
        return self::$fsTypes[$dir] = $type;
    }

    private static function markOf(string $token): string
    {
        return 'h.' . substr($token, strlen(self::PREFIX));
    }

    /**
     * The held token a mark names, or null when NAME is no mark.
     *
     * @return array{0: string, 1: array{expiry: int, tag: string, pid: int, start: string, legacy: bool}}|null
     */
    private static function tokenOfMark(string $name): ?array
    {
        if (!str_starts_with($name, 'h.')) {
            return null;
        }
        $token = self::PREFIX . substr($name, 2);
        $c = self::classify($token);
        return $c[0] === 'held' ? [$token, $c[1]] : null;
    }

    private static function ownerPart(string $token): string
    {
        return (string) preg_replace('/\Alockfile\.[0-9]+\./', '', $token);
    }

    /**
     * The live marks in a token other than ours, after removing those of
     * the owner taken over from and those of dead or expired owners:
     * ['seen', [token, reason] of the first live one, or null], or ['gone',
     * errno] when the token cannot be listed (errno 0: it is gone).
     *
     * @return array{0: string, 1: array{0: string, 1: string}|int|null}
     */
    private static function judgeMarks(string $path, string $ours, ?string $takenFrom): array
    {
        error_clear_last();
        $names = @scandir($path);
        if ($names === false) {
            $errno = self::lastErrno() ?: 5;
            return ['gone', $errno === 2 || $errno === 116 ? 0 : $errno];
        }
        $takenOwner = $takenFrom === null ? null : self::ownerPart($takenFrom);
        $live = null;
        foreach ($names as $n) {
            $t = $n === $ours ? null : self::tokenOfMark($n);
            if ($t === null) {
                continue;
            }
            [$stale, $reason] = $takenOwner !== null && self::ownerPart($t[0]) === $takenOwner ? [true, ''] : self::judge($t[0], $t[1]);
            if ($stale) {
                @rmdir("$path/$n");
            } elseif ($live === null) {
                $live = [$t[0], $reason];
            }
        }
        return ['seen', $live];
    }

    /**
     * Confirms with an owner mark a token that a rename made ours: 'held';
     * 'yielded' (with the reason) after handing the token back to the live
     * holder whose mark is in it; 'abandoned' when it is gone from under us.
     *
     * @return array{0: string, 1: ?string}
     */
    private static function markAndCheck(string $dir, string $token, ?string $takenFrom): array
    {
        $path = "$dir/$token";
        $mark = self::markOf($token);
        for ($try = 0; $try < 3; ++$try) {
            error_clear_last();
            $ok = @mkdir("$path/$mark", 0700);
            $errno = $ok ? 0 : (self::lastErrno() ?: 5);
            if ($ok || $errno === 17 || $errno !== 116) {
                break;
            }
        }
        if ($errno !== 0 && $errno !== 17) {
            // Gone already: a second rename of the name we took moved it.
            if ($errno === 2 || $errno === 116) {
                return ['abandoned', null];
            }
            self::giveUp($dir, $token, $takenFrom, 'cannot make the owner mark in', $errno);
        }
        [$what, $live] = self::judgeMarks($path, $mark, $takenFrom);
        if ($what === 'gone') {
            if ($live !== 0) {
                self::giveUp($dir, $token, $takenFrom, 'cannot list the owner marks in', $live);
            }
            @rmdir("$path/$mark");
            return ['abandoned', null];
        }
        if ($live === null) {
            return ['held', null];
        }
        // The mark stays inside during the rename: whoever holds the
        // directory through a stale name of its own meanwhile finds it and
        // steps back too.
        $back = "$dir/{$live[0]}";
        if (self::rename($path, $back) === 0) {
            @rmdir("$back/$mark");
        } else {
            @rmdir("$path/$mark");
        }
        return ['yielded', $live[1]];
    }

    /** Fails an acquisition whose mark could not be made or listed. */
    private static function giveUp(string $dir, string $token, ?string $takenFrom, string $what, int $errno): void
    {
        $path = "$dir/$token";
        @rmdir("$path/" . self::markOf($token));
        [$seen, $live] = self::judgeMarks($path, self::markOf($token), $takenFrom);
        $outcome = 'the token stays until its lease ends';
        if ($seen === 'seen' && $live === null && self::rename($path, "$dir/" . self::FREE) === 0) {
            $outcome = 'the lock was freed again';
        }
        throw self::systemError('acquire', $dir, "$what $token", $errno, $outcome);
    }
}
