<?php
/**
 * A store for Symfony's Lock component (symfony/lock 5.4, 6.4 and 7.x) that
 * keeps each resource's lock as a tokenlock lock directory, so that
 * Symfony code gets a lock that works on NFS and other network
 * filesystems, where FlockStore's flock() does not.
 *
 *     $store = new Tokenlock\Symfony\TokenlockStore('/srv/app/var/locks');
 *     $factory = new Symfony\Component\Lock\LockFactory($store);
 *     $lock = $factory->createLock('invoice-42', 30);
 *     if ($lock->acquire()) { ...; $lock->refresh(); ...; $lock->release(); }
 *
 * Each resource is the lock directory DIRECTORY/sf.<readable part>.<sha256
 * of the resource>: the hash makes the name, so no resource name (with
 * slashes, dots, `..`) can reach outside DIRECTORY or meet another's.
 * Symfony's TTL is the lock's lease: refresh() ends the old lease and
 * starts one of the new length (the token changes). The Tokenlock\Lock
 * holding the token is kept in the Key's state, with the pid of the process
 * that took it; the Key cannot be serialised, since the lock belongs to
 * that process. A forked child's copy of the Key does not hold the lock:
 * exists() is false there, so Symfony's Lock destructor in the child
 * leaves the parent's lock alone.
 *
 * The return types (`: void`, `: bool`) are those of symfony/lock 6 and 7;
 * 5.4's interfaces declare none, and a class may add them.
 */

declare(strict_types=1);

namespace Tokenlock\Symfony;

use Symfony\Component\Lock\BlockingStoreInterface;
use Symfony\Component\Lock\Exception\InvalidArgumentException;
use Symfony\Component\Lock\Exception\InvalidTtlException;
use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Exception\LockExpiredException;
use Symfony\Component\Lock\Exception\LockReleasingException;
use Symfony\Component\Lock\Exception\LockStorageException;
use Symfony\Component\Lock\Key;
use Tokenlock\Exception;
use Tokenlock\Lock;
use Tokenlock\LockLostException;
use Tokenlock\Native;
use Tokenlock\NotAcquiredException;

final class TokenlockStore implements BlockingStoreInterface
{
    /** The longest lease every tokenlock process accepts (docs/protocol.md). */
    public const MAX_TTL = 86400.0;
    /** The shortest lease (docs/protocol.md): a TTL below it has expired before it is stored. */
    public const MIN_TTL = 0.001;

    /** How many resources' directory names a process keeps (lockDirectory). */
    private const NAMES_KEPT = 1024;
    /** @var array<string, string> a resource's lock directory name */
    private static array $names = [];

    private string $directory;
    private float $initialTtl;
    /** The `group` option, given to every lock (null: TOKENLOCK_GROUP, if set). */
    private string|int|null $group;

    /**
     * @param string $directory  where the lock directories are made; created
     *                           (with its parents) when missing, mode 0700,
     *                           or TOKENLOCK_DIR_MODE's when that shares
     *                           locks with a group (0775, 0770)
     * @param float  $initialTtl the lease, in seconds, that save() and
     *                           waitAndSave() give a lock before any
     *                           refresh() (Symfony's ttl)
     * @param array{command?: string, group?: string|int} $options
     *                           `group`: the group (a name or a decimal gid)
     *                           the locks are shared with, else
     *                           TOKENLOCK_GROUP; the directory is then made
     *                           in that group, group-writable, and another
     *                           member's directories are trusted
     *                           (docs/security.md); `command` is still
     *                           accepted, so that older calls keep working:
     *                           a lock runs no command
     * @throws InvalidArgumentException when the directory cannot be made or written
     * @throws InvalidTtlException for a TTL under 0.001 s, or beyond 86400 s
     * @throws Exception `untrusted` when the directory is a symbolic link or
     *         another user could change it, judged as the module judges a
     *         lock directory; `bad_argument` for a bad TOKENLOCK_DIR_MODE,
     *         or a group that does not exist or this user is not in
     */
    public function __construct(string $directory, float $initialTtl = 300.0, array $options = [])
    {
        // Under the shortest lease, every lock would expire before it is stored.
        self::checkTtl($initialTtl, __METHOD__, self::MIN_TTL);
        if ($directory === '' || str_contains($directory, "\0")) {
            throw new InvalidArgumentException('TokenlockStore: the directory must be a non-empty path without NUL bytes');
        }
        // Without its trailing '/', a path to a link names the link.
        $directory = strlen($directory) > 1 ? rtrim($directory, '/') : $directory;
        $unknown = array_diff(array_keys($options), ['command', 'group']);
        if ($unknown) {
            throw new InvalidArgumentException('TokenlockStore: unknown option ' . implode(', ', $unknown) . '; it takes command and group');
        }
        $this->group = $options['group'] ?? null;
        self::prepare($directory, Native::group($this->group, 'open'));
        $this->directory = $directory;
        $this->initialTtl = $initialTtl;
    }

    /**
     * Makes DIRECTORY if missing, for this user only unless locks are
     * shared with a group, and refuses one another user could change: they
     * could rename a resource's lock directory away, or plant one of their
     * own in its place.
     */
    private static function prepare(string $directory, ?int $named): void
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
                    throw new InvalidArgumentException("TokenlockStore: cannot create the lock directory $directory: $cause; create it, writable by this user");
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
            throw new InvalidArgumentException("TokenlockStore: {$e->getMessage()}", 0, $e);
        }
        if (!is_writable($directory)) {
            throw new InvalidArgumentException("TokenlockStore: the lock directory $directory is not writable by this user; fix its permissions");
        }
    }

    /**
     * The lock directory of a resource: its hash names it, and a readable
     * part without dots or slashes helps whoever looks at the directory.
     */
    public function lockDirectory(string $resource): string
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
        return $this->directory . '/' . $name;
    }

    public function save(Key $key): void
    {
        $this->take($key, 0.0);
    }

    public function waitAndSave(Key $key): void
    {
        $this->take($key, null);
    }

    /**
     * Starts a lease of $ttl from now. A TTL under 0.001 s, the shortest
     * lease, has expired before it could be stored: the lock is released
     * and LockExpiredException thrown, as Symfony's expiring stores do.
     */
    public function putOffExpiration(Key $key, float $ttl): void
    {
        self::checkTtl($ttl, __METHOD__);
        $lock = $this->held($key);
        if ($lock === null) {
            throw new LockConflictedException(sprintf('TokenlockStore: the lock "%s" is not held by this key in this process: nothing to put off', $key));
        }
        if ($ttl < self::MIN_TTL) {
            $key->reduceLifetime(0);
            $this->checkNotExpired($key, sprintf('its TTL, %s s, is under the shortest lease, 0.001 s', $ttl));
        }
        try {
            $lock->refresh($ttl);
        } catch (LockLostException $e) {
            $key->removeState(__CLASS__);
            throw new LockConflictedException(sprintf('TokenlockStore: the lock "%s" was lost before its refresh: %s', $key, $e->getMessage()), 0, $e);
        } catch (Exception $e) {
            throw new LockStorageException(sprintf('TokenlockStore: refresh of the lock "%s" failed: %s', $key, $e->getMessage()), 0, $e);
        }
        $key->reduceLifetime($ttl);
        $this->checkNotExpired($key);
    }

    /**
     * Releases the lock. A lock taken over meanwhile (its lease ended and
     * another process took it) throws LockReleasingException: the work done
     * under it may have overlapped that process's. In a forked child of
     * the process that took it, LockReleasingException too: the lock stays
     * that process's, untouched.
     */
    public function delete(Key $key): void
    {
        $lock = $this->state($key);
        if ($lock === null) {
            $key->removeState(__CLASS__);
            return;
        }
        try {
            $lock->release();
        } catch (LockLostException $e) {
            $key->removeState(__CLASS__);
            throw new LockReleasingException(sprintf('TokenlockStore: the lock "%s" had been taken over before its release: %s', $key, $e->getMessage()), 0, $e);
        } catch (Exception $e) {
            $again = $e->getError() === 'not_owner' ? '' : ' (it stays held; release again)';
            throw new LockReleasingException(sprintf('TokenlockStore: release of the lock "%s" failed%s: %s', $key, $again, $e->getMessage()), 0, $e);
        }
        $key->removeState(__CLASS__);
    }

    /**
     * Whether this key holds the lock now, in this process: its token is
     * still in the lock directory and its lease has not ended
     * (docs/protocol.md: the token name carries the lease's end, in
     * microseconds). False in a forked child of the process that took it.
     */
    public function exists(Key $key): bool
    {
        $lock = $this->held($key);
        if ($lock === null) {
            return false;
        }
        $token = $lock->token();
        clearstatcache(true, $lock->dir() . '/' . $token);
        if (!is_dir($lock->dir() . '/' . $token)) {
            return false;
        }
        $parts = explode('.', $token);
        return count($parts) > 2 && preg_match('/\A[0-9]{1,19}\z/', $parts[1]) === 1 && (float) $parts[1] > microtime(true) * 1e6;
    }

    /** Acquires for $key: without waiting ($wait 0) or as long as it takes (null). */
    private function take(Key $key, ?float $wait): void
    {
        if ($this->held($key) !== null) {
            // Already ours: a repeated save() starts a new lease, as the
            // other expiring stores do.
            $this->putOffExpiration($key, $this->initialTtl);
            return;
        }
        try {
            $lock = Lock::acquire($this->lockDirectory((string) $key), ['wait' => $wait, 'lease' => $this->initialTtl, 'group' => $this->group]);
        } catch (NotAcquiredException $e) {
            throw new LockConflictedException(sprintf('TokenlockStore: the lock "%s" is held by another process: %s', $key, $e->getMessage()), 0, $e);
        } catch (Exception $e) {
            throw new LockStorageException(sprintf('TokenlockStore: cannot acquire the lock "%s": %s', $key, $e->getMessage()), 0, $e);
        }
        $key->setState(__CLASS__, [$lock, Native::pid()]);
        $key->markUnserializable();
        $key->reduceLifetime($this->initialTtl);
        $this->checkNotExpired($key);
    }

    /** The lock $key took, if still held, whichever process this is. */
    private function state(Key $key): ?Lock
    {
        if (!$key->hasState(__CLASS__)) {
            return null;
        }
        [$lock] = $key->getState(__CLASS__);
        return $lock->isHeld() ? $lock : null;
    }

    /** The lock $key took, if still held and taken by this process. */
    private function held(Key $key): ?Lock
    {
        $lock = $this->state($key);
        // A forked child has a copy of the Key, but the token names its parent.
        return $lock !== null && $key->getState(__CLASS__)[1] === Native::pid() ? $lock : null;
    }

    /** As Symfony's ExpiringStoreTrait: an expired key gives its lock back. */
    private function checkNotExpired(Key $key, string $why = 'its lifetime ended'): void
    {
        if (!$key->isExpired()) {
            return;
        }
        try {
            $this->delete($key);
        } catch (\Exception $e) {
            // The expiry is what the caller has to hear of.
        }
        throw new LockExpiredException(sprintf('TokenlockStore: the lock "%s" expired before it was stored (%s); it was released', $key, $why));
    }

    /** $least 0: any TTL above 0 (one under 0.001 s then expires the lock). */
    private static function checkTtl(float $ttl, string $method, float $least = 0.0): void
    {
        if (!($ttl > 0) || $ttl < $least || $ttl > self::MAX_TTL) {
            $from = $least > 0 ? 'from 0.001 s (the shortest lease)' : 'above 0';
            throw new InvalidTtlException(sprintf('"%s()" expects a TTL %s and at most 86400 s (the longest lease every tokenlock process accepts); got %s', $method, $from, $ttl));
        }
    }
}
