<?php

declare(strict_types=1);

namespace Tokenlock\Tests\Symfony;

use Symfony\Component\Lock\PersistingStoreInterface;
use Symfony\Component\Lock\Tests\Store\AbstractStoreTestCase;
use Symfony\Component\Lock\Tests\Store\BlockingStoreTestTrait;
use Symfony\Component\Lock\Tests\Store\ExpiringStoreTestTrait;
use Symfony\Component\Lock\Tests\Store\UnserializableTestTrait;
use Tokenlock\Symfony\TokenlockStore;

/**
 * Symfony's own store suite, as symfony/lock runs it on its stores, on
 * TokenlockStore: a blocking, expiring store whose keys cannot be
 * serialised (its shared-lock suite: SharedStoreSuiteTest). The test
 * case and the traits are those of the
 * symfony/lock this run loads (bootstrap.php, README.md).
 */
final class StoreSuiteTest extends AbstractStoreTestCase
{
    use BlockingStoreTestTrait;
    use ExpiringStoreTestTrait;
    use UnserializableTestTrait;

    private string $dir;
    private int $madeBy;

    protected function setUp(): void
    {
        $this->dir = sys_get_temp_dir() . '/tokenlock-symfony-suite.' . getmypid() . '.' . bin2hex(random_bytes(4));
        if (!mkdir($this->dir, 0700)) {
            throw new \RuntimeException("cannot create $this->dir");
        }
        $this->madeBy = getmypid();
    }

    protected function tearDown(): void
    {
        // testBlockingLocks forks: its child ends with exit(), never here,
        // but only the process that made the directory removes it.
        if (getmypid() === $this->madeBy) {
            exec('rm -rf ' . escapeshellarg($this->dir), $out, $status);
            $this->assertSame(0, $status, "removing $this->dir");
        }
    }

    protected function getStore(): PersistingStoreInterface
    {
        return new TokenlockStore("$this->dir/locks");
    }

    /**
     * The expiry tests give a lease of twice this and look after three
     * times it: 1 s of lease leaves room on a loaded machine, and is far
     * above the least lease (0.001 s).
     */
    protected function getClockDelay(): int
    {
        return 500000;
    }
}
