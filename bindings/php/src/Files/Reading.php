<?php

declare(strict_types=1);

namespace Tokenlock\Files;

use Tokenlock\Exception;
use Tokenlock\Native;

/**
 * The target read for an update, bounded, and its version marks, which
 * tell a stale copy served by a network filesystem from the committed
 * one.
 *
 * @internal
 */
trait Reading
{
    /**
     * Reads the target under the lock: a regular file only, at most the
     * read limit, never through a symbolic link (the commit replaces a
     * link, so what it points to is not the target's contents).
     *
     * $known is the target's lstat() made under this lock a moment ago
     * (false: nothing there), which the first read takes instead of
     * asking again; null asks.
     *
     * @param array{path: string, dir: string} $t
     * @param array<string, int>|false|null $known
     * @return array{0: ?string, 1: int} the contents (null: missing) and their mtime in microseconds
     */
    public static function readTarget(array $t, int $limit = self::READ_LIMIT, array|false|null $known = null): array
    {
        // A network client may answer the lstat from its cache and the open
        // from the server (GlusterFS): two files for one name until the
        // cache lets go. Under the lock nothing else replaces the file, so
        // it is read again, for as long as a stale read is.
        $start = hrtime(true);
        for ($pause = 5000; ; $pause = min(2 * $pause, 200000)) {
            try {
                return self::readTargetOnce($t, $limit, $known);
            } catch (Exception $e) {
                $known = null;
                if ($e->getError() !== 'system' || $e->getErrno() !== self::EREPLACED
                    || (hrtime(true) - $start) / 1000 > self::$staleReadBudgetUs) {
                    throw $e;
                }
            }
            usleep($pause);
        }
    }

    /**
     * @param array{path: string, dir: string} $t
     * @param array<string, int>|false|null $st
     * @return array{0: ?string, 1: int}
     */
    private static function readTargetOnce(array $t, int $limit, array|false|null $st): array
    {
        $path = $t['path'];
        clearstatcache(true, $path);
        $st ??= @lstat($path);
        if ($st === false) {
            return [null, 0];
        }
        $type = $st['mode'] & 0170000;
        if ($type === 0120000) {
            throw Native::systemError('read', $path, 'it is a symbolic link, and links are not followed here (the write replaces the link), so what it points to, maybe another user\'s file, was not read; nothing was written: name the file it points to, ask to follow links, or remove the link', 40, 'pass follow_symlinks to update the file it points to');
        }
        if ($type === 0040000) {
            throw Native::systemError('read', $path, 'it is a directory; nothing was written', 21, 'remove it or name a file');
        }
        if ($type !== 0100000) {
            throw Native::systemError('read', $path, 'it is not a regular file (a FIFO, device or socket), and was not read; nothing was written', 22, 'put a regular file there');
        }
        if ($st['size'] > $limit) {
            throw self::tooLarge($path, $st['size'], $limit);
        }
        error_clear_last();
        // 'n': O_NONBLOCK, so that a FIFO swapped in since the lstat is
        // refused by the check below rather than waited on.
        $h = @fopen($path, 'rbn');
        if ($h === false) {
            $errno = Native::lastErrno() ?: 5;
            if ($errno === 2) {
                return [null, 0];
            }
            throw self::fileError('read', $t, 'cannot open the target', $errno);
        }
        try {
            $fst = fstat($h);
            // Swapped since the lstat (for a link, say): not what was judged.
            if ($fst === false || $fst['ino'] !== $st['ino'] || $fst['dev'] !== $st['dev']) {
                throw Native::systemError('read', $path, 'it was replaced while being opened, again and again; nothing was written', self::EREPLACED, 'retry; on a network filesystem, turn its client caches off (tokenlock doctor DIR --peer DIR2 checks a mount)');
            }
            // In pieces: a length given to stream_get_contents() is allocated whole.
            for ($text = ''; !feof($h);) {
                error_clear_last();
                $chunk = @fread($h, min(65536, $limit + 1));
                if ($chunk === false) {
                    throw self::fileError('read', $t, 'cannot read the target', Native::lastErrno() ?: 5);
                }
                $text .= $chunk;
                if (strlen($text) > $limit) {
                    throw self::tooLarge($path, strlen($text), $limit);
                }
            }
            return [$text, $fst['mtime'] * 1000000];
        } finally {
            fclose($h);
        }
    }

    /** A target past the read limit: for a counter, corrupt data. */
    private static function tooLarge(string $path, int $size, int $limit): Exception
    {
        if ($limit === self::COUNTER_LIMIT) {
            return new Exception('corrupt_data', "tokenlock: read counter $path: it holds at least $size bytes, more than the " . self::COUNTER_LIMIT . ' a counter may (one unsigned decimal and a newline); it was not read and was left as it is: repair or remove it by hand', 65);
        }
        return Native::systemError('read', $path, "it is too large (at least $size bytes, the limit is $limit); nothing was written", 27, 'keep such files out of updates');
    }

    // ---- version marks, on network filesystems ----------------------------
    // `D/<token>/w/v.<FNV-1a of the contents>.<mtime of the new file, µs>`:
    // what the last commit wrote, so that the next holder can tell a stale
    // read from its client's cache (docs/atomic-writes.md).

    public static function fnvHex(string $data): string
    {
        [$hi, $lo] = Native::fnv1a($data);
        return sprintf('%08x%08x', $hi, $lo);
    }

    /** @return array{name: string, hash: string, mtime: int}|null */
    private static function readVersionMark(string $w): ?array
    {
        $best = null;
        foreach (@scandir($w) ?: [] as $n) {
            if (preg_match('/\Av\.([0-9a-f]{16})\.(-?[0-9]{1,19})\z/', $n, $m) && ($best === null || (int) $m[2] > $best['mtime'])) {
                $best = ['name' => $n, 'hash' => $m[1], 'mtime' => (int) $m[2]];
            }
        }
        return $best;
    }

    /** @param array{name: string}|null $old */
    private static function writeVersionMark(string $w, ?array $old, string $hash, int $mtimeUs): void
    {
        $name = "v.$hash.$mtimeUs";
        if ($old !== null && ($old['name'] === $name || Native::rename("$w/{$old['name']}", "$w/$name") === 0)) {
            return;
        }
        $h = @fopen("$w/$name", 'x');
        if ($h !== false) {
            fclose($h);
        }
    }

    /**
     * Reads again, for a while, a version older than the one the version
     * mark says the last commit wrote: a network client's stale cache.
     *
     * @param array{hash: string, mtime: int} $mark
     * @return array{0: ?string, 1: int}
     */
    private static function readPastStale(array $t, array $mark, int $leaseUs, ?string $current, int $mtime, int $limit): array
    {
        $start = hrtime(true);
        $budget = min(self::$staleReadBudgetUs, intdiv($leaseUs, 4)) * 1000;
        $pause = 5000;
        // One version, read for the whole wait and newer than the mark
        // though within the skew: written outside the lock just after the
        // last commit (a stale cache serves an older one).
        $first = $current === null ? null : self::fnvHex($current);
        for ($reads = 1; ; ++$reads) {
            if ($current !== null && (self::fnvHex($current) === $mark['hash'] || $mtime > $mark['mtime'] + Native::SKEW_US)) {
                return [$current, $mtime];
            }
            if ($first === null || $current === null || self::fnvHex($current) !== $first) {
                $first = null;
            }
            $left = $start + $budget - hrtime(true);
            if ($left <= 0 && $first !== null && $mtime > $mark['mtime']) {
                return [$current, $mtime];
            }
            if ($left <= 0) {
                $fs = Native::fsType($t['dir']) ?? 'a network filesystem';
                throw new Exception('stale_data', "tokenlock: read {$t['path']}: this client keeps reading a version older than the one the last update committed ($reads reads in " . intdiv(hrtime(true) - $start, 1000000) . " ms); nothing was written; the filesystem ($fs) serves stale cached data: turn its client caches off (tokenlock doctor DIR --peer DIR2 checks a mount)", 75);
            }
            usleep(min($pause, intdiv($left, 1000) + 1));
            $pause = min(2 * $pause, 200000);
            [$current, $mtime] = self::readTarget($t, $limit);
        }
    }
}
