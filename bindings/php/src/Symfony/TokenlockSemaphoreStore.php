<?php
/**
 * A store for Symfony's Semaphore component (symfony/semaphore 5.4 and
 * later) that keeps each resource's semaphore as a tokenlock lock
 * directory held in slots (docs/protocol.md, Shared locks and semaphores): at most the key's limit
 * of holders at once, each with its own lease, a holder that died taken
 * over at once on its host, on local disks and NFS alike.
 *
 *     $store = new Tokenlock\Symfony\TokenlockSemaphoreStore('/srv/app/var/semaphores');
 *     $factory = new Symfony\Component\Semaphore\SemaphoreFactory($store);
 *     $semaphore = $factory->createSemaphore('pdf-render', 3);
 *     if ($semaphore->acquire()) { ...; $semaphore->release(); }
 *
 * Resources are named as TokenlockStore names them (DIRECTORY/sf.<readable
 * part>.<sha256>.lock), of `sem.` and the resource, so that one directory
 * can serve both stores; symfony/lock is not needed. Symfony's TTL is each holder's
 * lease. A key's weight above 1 (one holder taking several slots) is not
 * supported: a holder is one entry.
 */

declare(strict_types=1);

namespace Tokenlock\Symfony;

use Symfony\Component\Semaphore\Exception\InvalidArgumentException as InvalidSemaphoreArgument;
use Symfony\Component\Semaphore\Exception\SemaphoreAcquiringException;
use Symfony\Component\Semaphore\Exception\SemaphoreExpiredException;
use Symfony\Component\Semaphore\Exception\SemaphoreReleasingException;
use Symfony\Component\Semaphore\Key as SemaphoreKey;
use Symfony\Component\Semaphore\PersistingStoreInterface;
use Tokenlock\Exception;
use Tokenlock\Lock;
use Tokenlock\LockLostException;
use Tokenlock\Native;
use Tokenlock\NotAcquiredException;

final class TokenlockSemaphoreStore implements PersistingStoreInterface
{
    /** The longest and shortest TTL, as TokenlockStore's. */
    private const MAX_TTL = 86400.0;
    private const MIN_TTL = 0.001;

    private string $directory;
    private string|int|null $group;

    /**
     * @param string $directory where the lock directories are made, as
     *        for TokenlockStore (created when missing, judged the same way)
     * @param array{group?: string|int} $options `group`: as TokenlockStore's
     * @throws InvalidSemaphoreArgument when the directory cannot be made or written
     * @throws Exception `untrusted` when another user could change the
     *         directory; `bad_argument` for a group that does not exist or
     *         this user is not in
     */
    public function __construct(string $directory, array $options = [])
    {
        $unknown = array_diff(array_keys($options), ['group']);
        if ($unknown) {
            throw new InvalidSemaphoreArgument('TokenlockSemaphoreStore: unknown option ' . implode(', ', $unknown) . '; it takes group');
        }
        if ($directory === '' || str_contains($directory, "\0")) {
            throw new InvalidSemaphoreArgument('TokenlockSemaphoreStore: the directory must be a non-empty path without NUL bytes');
        }
        $directory = strlen($directory) > 1 ? rtrim($directory, '/') : $directory;
        $this->group = $options['group'] ?? null;
        StoreDirectory::prepare($directory, Native::group($this->group, 'open'), fn (string $m, ?\Throwable $e) => new InvalidSemaphoreArgument("TokenlockSemaphoreStore: $m", 0, $e));
        $this->directory = $directory;
    }

    /** The lock directory of a semaphore's resource. */
    public function lockDirectory(string $resource): string
    {
        return $this->directory . '/' . StoreDirectory::name("sem.$resource");
    }

    /**
     * Takes one of the key's limit of slots for $ttlInSecond, without
     * waiting: SemaphoreAcquiringException when all are taken (or held
     * with another limit). A key that holds already starts a new lease.
     */
    public function save(SemaphoreKey $key, float $ttlInSecond): void
    {
        self::checkTtl($ttlInSecond);
        if ($key->getWeight() !== 1) {
            throw new Exception('not_supported', sprintf('TokenlockSemaphoreStore: the semaphore "%s" asks a weight of %d: a holder takes one slot here (weight 1); ask for several semaphores instead', $key, $key->getWeight()), 69);
        }
        if ($this->held($key) !== null) {
            $this->putOffExpiration($key, $ttlInSecond);
            return;
        }
        try {
            $lock = Lock::acquire($this->lockDirectory((string) $key), ['slots' => $key->getLimit(), 'wait' => 0, 'lease' => $ttlInSecond, 'group' => $this->group]);
        } catch (NotAcquiredException $e) {
            throw new SemaphoreAcquiringException($key, $e->getMessage());
        }
        $key->setState(__CLASS__, [$lock, Native::pid()]);
    }

    /** Gives the key's slot back; SemaphoreReleasingException when it was taken over meanwhile. */
    public function delete(SemaphoreKey $key): void
    {
        $lock = $this->held($key);
        $key->removeState(__CLASS__);
        if ($lock === null) {
            return;
        }
        try {
            $lock->release();
        } catch (LockLostException $e) {
            throw new SemaphoreReleasingException($key, $e->getMessage());
        }
    }

    /** Whether the key holds its slot now, in this process, with its lease not ended. */
    public function exists(SemaphoreKey $key): bool
    {
        $lock = $this->held($key);
        return $lock !== null && $lock->holdsNow();
    }

    /** A new lease of $ttlInSecond; SemaphoreExpiredException when the slot was lost. */
    public function putOffExpiration(SemaphoreKey $key, float $ttlInSecond): void
    {
        self::checkTtl($ttlInSecond);
        $lock = $this->held($key);
        if ($lock === null) {
            throw new SemaphoreExpiredException($key, 'it holds no slot in this process');
        }
        try {
            $lock->refresh($ttlInSecond);
        } catch (LockLostException $e) {
            $key->removeState(__CLASS__);
            throw new SemaphoreExpiredException($key, $e->getMessage());
        }
    }

    /** The lock the key took, if still held and taken by this process. */
    private function held(SemaphoreKey $key): ?Lock
    {
        if (!$key->hasState(__CLASS__)) {
            return null;
        }
        [$lock, $pid] = $key->getState(__CLASS__);
        return $lock->isHeld() && $pid === Native::pid() ? $lock : null;
    }

    private static function checkTtl(float $ttl): void
    {
        if (!($ttl >= self::MIN_TTL) || $ttl > self::MAX_TTL) {
            throw new InvalidSemaphoreArgument(sprintf('TokenlockSemaphoreStore: the TTL must be from 0.001 s to 86400 s (the leases every tokenlock process accepts); got %s', $ttl));
        }
    }
}
