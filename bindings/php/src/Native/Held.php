<?php

declare(strict_types=1);

namespace Tokenlock\Native;

/**
 * The tokens this process holds, released when the request ends however
 * it ends. A fatal error (memory_limit, max_execution_time) skips every
 * destructor, and a php-fpm worker lives on after it: without this, the
 * lock of a request that died would stay held by a live process until its
 * lease ends, and even the same worker's next request would be refused.
 * PHP runs shutdown functions after fatal errors, exit() and timeouts
 * (within its hard_timeout, 2 s by default), before destructors; one
 * registered from a shutdown function runs after all the others, so the
 * script's own shutdown functions still find their locks held.
 *
 * A forked child has a copy of this list: it releases only the tokens it
 * made itself, never its parent's.
 *
 * @internal
 */
trait Held
{
    /**
     * TOKEN => [DIR, pid]: a token names its owner and a random nonce, so
     * no two locks share one.
     *
     * @var array<string, array{0: string, 1: int}>
     */
    private static array $held = [];

    private static bool $shutdownSet = false;

    /** Notes TOKEN of DIR as held by this process until it is released. */
    private static function hold(string $dir, string $token): void
    {
        self::$held[$token] = [$dir, self::tokenPid()];
        if (!self::$shutdownSet) {
            self::atRequestEnd();
        }
    }

    /** Makes sure the request's end releases what this process holds. */
    private static function atRequestEnd(): void
    {
        if (!self::$shutdownSet) {
            self::$shutdownSet = true;
            register_shutdown_function([self::class, 'atShutdown']);
        }
    }

    private static function unhold(string $token): void
    {
        unset(self::$held[$token]);
    }

    /**
     * Whether this process still holds TOKEN: false once it was released,
     * lost, or released when the request ended.
     */
    public static function holds(string $token): bool
    {
        return isset(self::$held[$token]);
    }

    /**
     * The first shutdown function: leaves the turnstile at once, should a
     * fatal error have cut a wait short while this process was its head
     * (waiters behind it would wait for the kernel to close the handle),
     * and puts the release of held tokens after the others.
     */
    public static function atShutdown(): void
    {
        self::leaveLine();
        register_shutdown_function([self::class, 'releaseHeld']);
    }

    /**
     * Releases every token this process still holds, as the request ends.
     * A failure is an E_USER_WARNING: there is no caller left to throw to.
     */
    public static function releaseHeld(): void
    {
        $pid = self::pid();
        foreach (self::$held as $token => [$dir, $owner]) {
            unset(self::$held[$token]);
            if ($owner !== $pid) {
                continue;  // a forked child's copy of its parent's token
            }
            try {
                self::release($dir, $token);
            } catch (\Throwable $e) {
                trigger_error("Tokenlock: releasing the lock $dir as the request ends: " . $e->getMessage(), E_USER_WARNING);
            }
        }
    }
}
