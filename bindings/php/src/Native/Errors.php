<?php

declare(strict_types=1);

namespace Tokenlock\Native;

use Tokenlock\Command;
use Tokenlock\Exception;

/**
 * System calls' failures as the library names them: the errno read
 * from PHP's warning, and a `system` Exception that names the path, the
 * step and the cause.
 *
 * @internal
 */
trait Errors
{
    /** The errno in the last PHP warning (0 when it names none). */
    public static function lastErrno(): int
    {
        $msg = error_get_last()['message'] ?? '';
        foreach (self::ERRNO as $text => $errno) {
            if (str_ends_with($msg, $text)) {
                return $errno;
            }
        }
        return 0;
    }

    public static function cause(int $errno): string
    {
        $text = array_search($errno, self::ERRNO, true);
        return $text === false ? (error_get_last()['message'] ?? 'unknown error') : $text;
    }

    /**
     * rename(2): 0 or the errno. PHP warns of every failed rename, so the
     * last error is this one's without clearing it first.
     */
    public static function rename(string $from, string $to): int
    {
        if (@rename($from, $to)) {
            return 0;
        }
        return self::lastErrno() ?: 5;
    }

    /** A `system` failure with the command's status for that errno. */
    public static function systemError(string $step, string $path, string $what, int $errno, string $fix = ''): Exception
    {
        $status = match ($errno) {
            2 => 66,
            1, 13 => 77,
            20, 21, 27, 28, 30, 36, 122 => 73,
            22, 40, 75 => 65,
            5 => 74,
            default => 71,
        };
        if ($fix === '') {
            $fix = match ($errno) {
                1, 13 => 'this user needs write and search permission on ' . $path,
                28, 122 => 'free some space or raise the quota',
                30 => 'put the lock on a writable filesystem',
                default => '',
            };
        }
        return new Exception('system', "tokenlock: $step $path: $what: " . self::cause($errno) . ($fix === '' ? '' : "; $fix"), $status, [], null, $errno);
    }

    /** The lock directory path, checked as make_lock_paths does. */
    public static function lockPath(string $dir): string
    {
        $s = Command::path($dir, 'lock directory');
        $s = strlen($s) > 1 ? rtrim($s, '/') : $s;
        if ($s === '' || $s === '/' || $s === '.' || $s === '..') {
            throw new Exception('bad_argument', "tokenlock: \"$dir\" cannot be a lock directory: the lock directory is created and replaced by rename; name a directory of its own, such as data.lock", 64);
        }
        return $s;
    }
}
