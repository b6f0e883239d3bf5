<?php

declare(strict_types=1);

namespace Tokenlock\Symfony;

use Tokenlock\Exception;
use Tokenlock\Native;

/**
 * The directory of the Symfony stores (TokenlockStore,
 * TokenlockSemaphoreStore) and the names of the lock directories in it:
 * shared by both, and needing neither symfony/lock nor symfony/semaphore,
 * so that either store works with its own component alone.
 *
 * @internal
 */
final class StoreDirectory
{
    /** How many resources' directory names a process keeps (name()). */
    private const NAMES_KEPT = 1024;
    /** @var array<string, string> a resource's lock directory name */
    private static array $names = [];

    /**
     * Makes DIRECTORY if missing, for this user only unless locks are
     * shared with a group, and refuses one another user could change: they
     * could rename a resource's lock directory away, or plant one of their
     * own in its place. $invalid makes the store's exception for a
     * directory that cannot be used, from a message and its cause.
     *
     * @param callable(string, ?\Throwable): \Throwable $invalid
     */
    public static function prepare(string $directory, ?int $named, callable $invalid): void
    {
        clearstatcache(true, $directory);
        if (@lstat($directory) === false) {
            $shared = Native::dirMode('create') | ($named === null ? 0 : 0070);
            $mode = ($shared & 020) ? $shared : 0700;
            error_clear_last();
            if (@mkdir($directory, $mode, true)) {
                if ($named !== null) {
                    @chgrp($directory, $named);
                }
                // The umask may have taken the group's write.
                @chmod($directory, $mode);
            } else {
                $cause = error_get_last()['message'] ?? 'unknown error';
                clearstatcache(true, $directory);
                // Unless another process made it meanwhile.
                if (@lstat($directory) === false) {
                    throw $invalid("cannot create the lock directory $directory: $cause; create it, writable by this user", null);
                }
            }
        }
        try {
            Native::checkTrusted($directory, $named, 'open', "the lock store's directory");
        } catch (Exception $e) {
            if ($e->getError() !== 'system') {
                throw $e;
            }
            // Not a directory: as one that cannot be made.
            throw $invalid($e->getMessage(), $e);
        }
        if (!is_writable($directory)) {
            throw $invalid("the lock directory $directory is not writable by this user; fix its permissions", null);
        }
    }

    /**
     * The lock directory name of a resource: its hash names it, and a
     * readable part without dots or slashes helps whoever looks at the
     * directory.
     */
    public static function name(string $resource): string
    {
        // Named once per resource and process (a php-fpm worker serves many
        // requests): the hash and the regex were a third of an acquisition.
        $name = self::$names[$resource] ?? null;
        if ($name === null) {
            if (count(self::$names) >= self::NAMES_KEPT) {
                self::$names = [];
            }
            $readable = substr((string) preg_replace('/[^A-Za-z0-9_-]+/', '-', $resource), 0, 40);
            $name = self::$names[$resource] = 'sf.' . $readable . '.' . hash('sha256', $resource) . '.lock';
        }
        return $name;
    }
}
