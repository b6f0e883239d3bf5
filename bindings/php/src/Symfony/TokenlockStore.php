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
 * Read locks (Lock::acquireRead(), SharedLockStoreInterface) are the
 * shared locks of docs/protocol.md, Shared locks and semaphores,: any number of readers at once,
 * never beside a writer, and a writer that waits is not starved by them.
 * A key's read lock becomes its write lock when no other reader holds
 * (save() without waiting; waitAndSave() lets go and waits when others
 * do), and its write lock a read lock, each in one rename.
 *
 * The return types (`: void`, `: bool`) are those of symfony/lock 6 and 7;
 * 5.4's interfaces declare none, and a class may add them.
 */

declare(strict_types=1);

namespace Tokenlock\Symfony;

use Symfony\Component\Lock\BlockingSharedLockStoreInterface;
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

final class TokenlockStore implements BlockingStoreInterface, BlockingSharedLockStoreInterface
{
    /** The longest lease every tokenlock process accepts (docs/protocol.md). */
    public const MAX_TTL = 86400.0;
    /** The shortest lease (docs/protocol.md): a TTL below it has expired before it is stored. */
    public const MIN_TTL = 0.001;

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
        StoreDirectory::prepare($directory, Native::group($this->group, 'open'), fn (string $m, ?\Throwable $e) => new InvalidArgumentException("TokenlockStore: $m", 0, $e));
        $this->directory = $directory;
        $this->initialTtl = $initialTtl;
    }

    /**
     * The lock directory of a resource: its hash names it, and a readable
     * part without dots or slashes helps whoever looks at the directory.
     */
    public function lockDirectory(string $resource): string
    {
        return $this->directory . '/' . StoreDirectory::name($resource);
    }

    public function save(Key $key): void
    {
        $this->take($key, 0.0, false);
    }

    public function waitAndSave(Key $key): void
    {
        $this->take($key, null, false);
    }

    /** Stores the resource for reading: beside other readers, never beside a writer. */
    public function saveRead(Key $key): void
    {
        $this->take($key, 0.0, true);
    }

    /** Waits until the resource can be read (behind a writer that waits), then stores it. */
    public function waitAndSaveRead(Key $key): void
    {
        $this->take($key, null, true);
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
        return $lock !== null && $lock->holdsNow();
    }

    /**
     * Acquires for $key, shared or not: without waiting ($wait 0) or as
     * long as it takes (null). A key that holds already changes its mode
     * if asked to, and starts a new lease.
     */
    private function take(Key $key, ?float $wait, bool $shared): void
    {
        $lock = $this->held($key);
        if ($lock !== null && $this->changeMode($key, $lock, $shared, $wait)) {
            // Already ours: a repeated save() starts a new lease, as the
            // other expiring stores do.
            $this->putOffExpiration($key, $this->initialTtl);
            return;
        }
        try {
            $lock = Lock::acquire($this->lockDirectory((string) $key), ['wait' => $wait, 'lease' => $this->initialTtl, 'group' => $this->group, 'shared' => $shared]);
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

    /**
     * Gives the key's lock the mode asked for: true when it holds so now;
     * false when it let go to wait for it (a blocking promotion while
     * other readers hold). A promotion that cannot wait is a conflict,
     * and the read lock stays.
     */
    private function changeMode(Key $key, Lock $lock, bool $shared, ?float $wait): bool
    {
        try {
            if ($shared) {
                $lock->toShared();
                return true;
            }
            if ($lock->toExclusive()) {
                return true;
            }
        } catch (LockLostException $e) {
            $key->removeState(__CLASS__);
            throw new LockConflictedException(sprintf('TokenlockStore: the lock "%s" was lost: %s', $key, $e->getMessage()), 0, $e);
        } catch (Exception $e) {
            throw new LockStorageException(sprintf('TokenlockStore: cannot change the mode of the lock "%s": %s', $key, $e->getMessage()), 0, $e);
        }
        if ($wait !== null) {
            throw new LockConflictedException(sprintf('TokenlockStore: the lock "%s" is read by other holders too: it stays a read lock', $key));
        }
        $this->delete($key);
        return false;
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
