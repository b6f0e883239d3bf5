<?php

declare(strict_types=1);

namespace Tokenlock\Tests\Symfony;

use PHPUnit\Framework\TestCase;
use Symfony\Component\Lock\PersistingStoreInterface;
use Symfony\Component\Lock\Tests\Store\AbstractStoreTestCase;
use Symfony\Component\Lock\Tests\Store\SharedLockStoreTestTrait;
use Tokenlock\Symfony\TokenlockStore;

/*
 * Symfony's own suite of shared-lock stores, SharedLockStoreTestTrait, on
 * TokenlockStore, from the symfony/lock this run loads: its
 * Tests/Store/SharedLockStoreTestTrait.php in this version's directory
 * (README.md), or TOKENLOCK_SYMFONY_SHARED_TRAIT naming a copy of it.
 * Without it the test says so and is skipped; SharedStoreTest checks the
 * same behaviours in any case.
 */
(static function (): void {
    $trait = getenv('TOKENLOCK_SYMFONY_SHARED_TRAIT') ?: TOKENLOCK_SYMFONY_DIR . '/Tests/Store/SharedLockStoreTestTrait.php';
    if (!trait_exists(SharedLockStoreTestTrait::class, false) && is_file($trait)) {
        require $trait;
    }
})();

if (trait_exists(SharedLockStoreTestTrait::class, false)) {
    final class SharedStoreSuiteTest extends AbstractStoreTestCase
    {
        use SharedLockStoreTestTrait;

        private string $dir;

        protected function setUp(): void
        {
            $this->dir = sys_get_temp_dir() . '/tokenlock-symfony-shared.' . getmypid() . '.' . bin2hex(random_bytes(4));
            if (!mkdir($this->dir, 0700)) {
                throw new \RuntimeException("cannot create $this->dir");
            }
        }

        protected function tearDown(): void
        {
            exec('rm -rf ' . escapeshellarg($this->dir), $out, $status);
            $this->assertSame(0, $status, "removing $this->dir");
        }

        protected function getStore(): PersistingStoreInterface
        {
            return new TokenlockStore("$this->dir/locks");
        }
    }
} else {
    final class SharedStoreSuiteTest extends TestCase
    {
        public function testSymfonysSharedLockSuite(): void
        {
            $this->markTestSkipped('symfony/lock ' . TOKENLOCK_SYMFONY_VERSION . "'s Tests/Store/SharedLockStoreTestTrait.php is not in " . TOKENLOCK_SYMFONY_DIR . ' (copy it there from the tag, README.md, or name a copy in TOKENLOCK_SYMFONY_SHARED_TRAIT); SharedStoreTest checks the same behaviours');
        }
    }
}
