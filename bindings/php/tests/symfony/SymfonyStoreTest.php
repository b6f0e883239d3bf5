<?php

declare(strict_types=1);

namespace Tokenlock\Tests\Symfony;

use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Exception\LockReleasingException;
use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\LockFactory;
use Tokenlock\LockLostException;
use Tokenlock\Symfony\TokenlockStore;
use Tokenlock\Tests\Support\Channel;
use Tokenlock\Tests\Support\Child;
use Tokenlock\Tests\Support\TempDirTestCase;

/**
 * Tokenlock\Symfony\TokenlockStore through Symfony's own LockFactory and
 * Lock, of the symfony/lock this run loads (bootstrap.php).
 */
final class SymfonyStoreTest extends TempDirTestCase
{
    private string $locks;

    protected function setUp(): void
    {
        parent::setUp();
        $this->locks = "$this->dir/locks";
    }

    private function factory(float $ttl = 300.0): LockFactory
    {
        return new LockFactory(new TokenlockStore($this->locks, $ttl));
    }

    /** The only token in a resource's lock directory. */
    private function tokenOf(string $resource): string
    {
        $dir = (new TokenlockStore($this->locks))->lockDirectory($resource);
        $tokens = array_values(array_filter(scandir($dir), fn (string $n) => str_starts_with($n, 'lockfile')));
        $this->assertCount(1, $tokens, "$dir holds one token");
        return $tokens[0];
    }

    /** Seconds left of the lease a held token names. */
    private function leaseLeft(string $token): float
    {
        $this->assertMatchesRegularExpression('/\Alockfile\.[0-9]+\./', $token);
        return (float) explode('.', $token)[1] / 1e6 - microtime(true);
    }

    public function testAcquireAndRelease(): void
    {
        $lock = $this->factory()->createLock('report', 30);
        $this->assertTrue($lock->acquire());
        $this->assertTrue($lock->isAcquired());
        $left = $this->leaseLeft($this->tokenOf('report'));
        $this->assertGreaterThan(25, $left);
        $this->assertLessThanOrEqual(30, $left);
        $lock->release();
        $this->assertFalse($lock->isAcquired());
        $this->assertSame('lockfile', $this->tokenOf('report'));
        // Free again for anyone.
        $again = $this->factory()->createLock('report');
        $this->assertTrue($again->acquire());
        $again->release();
    }

    public function testAnotherProcessIsRefusedWhileHeld(): void
    {
        $lock = $this->factory()->createLock('shared');
        $this->assertTrue($lock->acquire());
        $child = Child::start(function (Channel $c): void {
            $other = $this->factory()->createLock('shared');
            $c->send($other->acquire() ? 'acquired' : 'refused');
            $c->receive();
            $c->send($other->acquire() ? 'acquired' : 'refused');
            $other->release();
        });
        $this->assertSame('refused', $child->channel->receive());
        $this->assertTrue($lock->isAcquired(), 'the refused attempt left the holder alone');
        $lock->release();
        $child->channel->send('released');
        $this->assertSame('acquired', $child->channel->receive());
        $this->assertSame(0, $child->wait());
        $this->assertSame('lockfile', $this->tokenOf('shared'));
    }

    public function testBlockingAcquireWaitsForTheRelease(): void
    {
        $lock = $this->factory()->createLock('queue');
        $this->assertTrue($lock->acquire());
        $marker = "$this->dir/releasing";
        $child = Child::start(function (Channel $c) use ($marker): void {
            $other = $this->factory()->createLock('queue');
            $c->send('waiting');
            $other->acquire(true);
            // The holder writes the marker just before it releases: a grant
            // before the release would find none.
            $c->send(is_file($marker) ? 'acquired after the release' : 'acquired while held');
            $other->release();
        });
        $this->assertSame('waiting', $child->channel->receive());
        $this->assertFalse($child->channel->ready(), 'the waiter got no answer while the lock was held');
        touch($marker);
        $lock->release();
        $this->assertSame('acquired after the release', $child->channel->receive());
        $this->assertSame(0, $child->wait());
    }

    /**
     * A forked child's copy of its parent's Symfony lock is not the child's:
     * isAcquired() is false there, so Symfony's Lock destructor leaves it
     * alone when the child exits, and the parent still holds its token.
     */
    public function testAForkedChildLeavesItsParentsLockAlone(): void
    {
        $lock = $this->factory()->createLock('parent-held');
        $this->assertTrue($lock->acquire());
        $token = $this->tokenOf('parent-held');
        $child = Child::start(function (Channel $c) use ($lock): void {
            $c->send($lock->isAcquired() ? 'acquired in the child' : 'not acquired in the child');
            // The child's copy of $lock is destroyed at its exit().
        });
        $this->assertSame('not acquired in the child', $child->channel->receive());
        $this->assertSame(0, $child->wait(), 'the child exited cleanly, its copy of the lock destroyed');
        $this->assertSame($token, $this->tokenOf('parent-held'), "the parent's token is untouched");
        $this->assertTrue($lock->isAcquired());
        $lock->release();
        $this->assertSame('lockfile', $this->tokenOf('parent-held'));
    }

    /**
     * A request that dies of a fatal error, which skips the destructors of
     * Symfony's Lock and of the module, still gives its lock back as it
     * ends: the next request is not refused for the TTL.
     */
    public function testALockHeldWhenTheRequestDiesOfAFatalErrorIsReleased(): void
    {
        $script = "$this->dir/die.php";
        file_put_contents($script, "<?php\nrequire " . var_export(TOKENLOCK_SYMFONY_DIR . '/autoload.php', true) . ";\n"
            . 'require ' . var_export(TOKENLOCK_TEST_MODULE, true) . ";\n"
            . '$lock = (new Symfony\Component\Lock\LockFactory(new Tokenlock\Symfony\TokenlockStore(' . var_export($this->locks, true) . ")))->createLock('dies', 300);\n"
            . "echo \$lock->acquire() ? 'acquired' : 'refused';\n"
            . 'ini_set("memory_limit", "16M"); $s = str_repeat("x", 64 << 20);' . "\n");
        $proc = proc_open([PHP_BINARY, '-d', 'display_errors=stderr', $script], [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $out = (string) stream_get_contents($pipes[1]);
        $err = (string) stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        $this->assertSame(255, proc_close($proc), $err);
        $this->assertSame('acquired', $out, $err);
        $this->assertStringContainsString('Allowed memory size', $err);
        $this->assertStringNotContainsString('Tokenlock', $err);
        $this->assertSame('lockfile', $this->tokenOf('dies'), 'released as the request ended, not held for the TTL');
        $next = $this->factory()->createLock('dies');
        $this->assertTrue($next->acquire(false));
        $next->release();
    }

    /** A release in the child is refused, and changes nothing. */
    public function testAForkedChildCannotReleaseItsParentsLock(): void
    {
        $lock = $this->factory()->createLock('parent-held');
        $this->assertTrue($lock->acquire());
        $token = $this->tokenOf('parent-held');
        $child = Child::start(function (Channel $c) use ($lock): void {
            try {
                $lock->release();
                $c->send('released');
            } catch (LockReleasingException $e) {
                $c->send($e->getPrevious() instanceof \Tokenlock\Exception ? $e->getPrevious()->getError() : get_class($e->getPrevious()));
            }
        });
        $this->assertSame('not_owner', $child->channel->receive());
        $this->assertSame(0, $child->wait());
        $this->assertSame($token, $this->tokenOf('parent-held'), "the parent's token is untouched");
        $this->assertTrue($lock->isAcquired());
        $lock->release();
        $this->assertSame('lockfile', $this->tokenOf('parent-held'));
    }

    /**
     * A TTL below the least lease (0.001 s) expires before it is stored:
     * LockExpiredException, as Symfony's expiring stores give, and the
     * lock is given back.
     */
    public function testATtlUnderAMillisecondExpiresTheLock(): void
    {
        $store = new TokenlockStore($this->locks);
        $key = new Key('brief');
        $store->save($key);
        try {
            $store->putOffExpiration($key, 0.0005);
            $this->fail('a TTL of 0.0005 s was accepted');
        } catch (\Symfony\Component\Lock\Exception\LockExpiredException $e) {
            $this->assertStringContainsString('0.001', $e->getMessage());
        }
        $this->assertTrue($key->isExpired());
        $this->assertFalse($store->exists($key));
        $this->assertSame('lockfile', $this->tokenOf('brief'), 'the lock was given back');
        $again = new Key('brief');
        $store->save($again);
        $this->assertTrue($store->exists($again));
        $store->delete($again);
    }

    public function testRefreshStartsANewLease(): void
    {
        $lock = $this->factory(5)->createLock('long-job', 5);
        $this->assertTrue($lock->acquire());
        $this->assertLessThanOrEqual(5, $this->leaseLeft($this->tokenOf('long-job')));
        $lock->refresh(600);
        $left = $this->leaseLeft($this->tokenOf('long-job'));
        $this->assertGreaterThan(590, $left);
        $this->assertLessThanOrEqual(600, $left);
        $this->assertGreaterThan(590, $lock->getRemainingLifetime());
        $this->assertTrue($lock->isAcquired());
        $lock->release();
        $this->assertSame('lockfile', $this->tokenOf('long-job'));
    }

    /**
     * A lock whose lease ended is taken by the next comer; the old
     * holder's refresh and release then say that it was lost.
     *
     * @return array{0: \Symfony\Component\Lock\LockInterface, 1: \Symfony\Component\Lock\LockInterface}
     */
    private function expiredAndTakenOver(string $resource): array
    {
        $old = $this->factory(0.2)->createLock($resource, 0.2, false);
        $this->assertTrue($old->acquire());
        $new = $this->factory()->createLock($resource, 300, false);
        // Polls the condition itself (the lease's end), bounded.
        $deadline = microtime(true) + 10;
        while (!$new->acquire()) {
            $this->assertLessThan($deadline, microtime(true), 'the expired lock was not taken over within 10 s');
            usleep(20000);
        }
        $this->assertFalse($old->isAcquired(), 'the old holder knows its lease ended');
        return [$old, $new];
    }

    public function testTakenOverHolderRefreshIsRefused(): void
    {
        [$old, $new] = $this->expiredAndTakenOver('expiring');
        $newToken = $this->tokenOf('expiring');
        try {
            $old->refresh(60);
            $this->fail('the refresh of a lock taken over succeeded');
        } catch (LockConflictedException $e) {
            $this->assertStringContainsString('lost', $e->getMessage());
            $this->assertInstanceOf(LockLostException::class, $e->getPrevious());
        }
        $this->assertSame($newToken, $this->tokenOf('expiring'), "the new holder's token is untouched");
        $this->assertTrue($new->isAcquired());
        $new->release();
    }

    public function testTakenOverHolderReleaseSaysSo(): void
    {
        $store = new TokenlockStore($this->locks, 0.2);
        $key = new Key('expiring');
        $store->save($key);
        $new = $this->factory()->createLock('expiring', 300, false);
        $deadline = microtime(true) + 10;
        while (!$new->acquire()) {
            $this->assertLessThan($deadline, microtime(true), 'the expired lock was not taken over within 10 s');
            usleep(20000);
        }
        $newToken = $this->tokenOf('expiring');
        try {
            $store->delete($key);
            $this->fail('the release of a lock taken over succeeded');
        } catch (LockReleasingException $e) {
            $this->assertStringContainsString('taken over', $e->getMessage());
            $this->assertSame('lock_lost', $e->getPrevious()->getError());
        }
        $this->assertFalse($store->exists($key));
        $this->assertSame($newToken, $this->tokenOf('expiring'), "the new holder's token is untouched");
        $new->release();
    }

    public function testReleaseThroughSymfonyLockOfATakenOverLock(): void
    {
        [$old, $new] = $this->expiredAndTakenOver('expiring-too');
        $this->expectException(LockReleasingException::class);
        try {
            $old->release();
        } finally {
            $this->assertTrue($new->isAcquired());
            $new->release();
        }
    }

    public function testResourceNamesStayInsideTheStore(): void
    {
        $names = ['../../outside', '/etc/passwd', 'a/b/../c', '.', '..', '', 'lockfile', "new\nline", str_repeat('x', 300)];
        $factory = $this->factory();
        $held = [];
        foreach ($names as $name) {
            $lock = $factory->createLock($name);
            $this->assertTrue($lock->acquire(), "acquired \"$name\"");
            $held[] = $lock;
        }
        $this->assertSame(['locks'], array_values(array_diff(scandir($this->dir), ['.', '..'])), 'nothing outside the store directory');
        $dirs = array_values(array_diff(scandir($this->locks), ['.', '..']));
        $this->assertCount(count($names), $dirs, 'one lock directory per resource');
        foreach ($dirs as $d) {
            $this->assertMatchesRegularExpression('/\Asf\.[A-Za-z0-9_-]{0,40}\.[0-9a-f]{64}\.lock\z/', $d);
        }
        foreach ($held as $lock) {
            $lock->release();
        }
        foreach ($names as $name) {
            $this->assertSame('lockfile', $this->tokenOf($name));
        }
    }

    public function testAStoreDirectoryThatCannotBeMadeIsRefused(): void
    {
        file_put_contents("$this->dir/file", 'kept');
        try {
            new TokenlockStore("$this->dir/file/locks");
            $this->fail('a store under a regular file was made');
        } catch (\Symfony\Component\Lock\Exception\InvalidArgumentException $e) {
            $this->assertStringContainsString("$this->dir/file/locks", $e->getMessage());
        }
        $this->assertSame(['file'], self::tree($this->dir));
        $this->assertSame('kept', file_get_contents("$this->dir/file"));
    }

    /** Runs $fn with TOKENLOCK_DIR_MODE set to $mode (null: unset) and umask 022. */
    private static function withDirMode(?string $mode, callable $fn): void
    {
        $saved = getenv('TOKENLOCK_DIR_MODE');
        $mask = umask(022);
        putenv($mode === null ? 'TOKENLOCK_DIR_MODE' : "TOKENLOCK_DIR_MODE=$mode");
        try {
            $fn();
        } finally {
            putenv($saved === false ? 'TOKENLOCK_DIR_MODE' : "TOKENLOCK_DIR_MODE=$saved");
            umask($mask);
        }
    }

    private static function mode(string $path): int
    {
        clearstatcache();
        return fileperms($path) & 07777;
    }

    public function testTheStoreDirectoryIsMadeForThisUserOrItsGroup(): void
    {
        self::withDirMode(null, fn () => new TokenlockStore("$this->dir/own/locks"));
        $this->assertSame(0700, self::mode("$this->dir/own/locks"), 'others cannot look in, whatever the umask');
        self::withDirMode('0770', fn () => new TokenlockStore("$this->dir/shared/locks"));
        $this->assertSame(0770, self::mode("$this->dir/shared/locks"), 'group sharing chosen: the group may lock too');
        $lock = (new LockFactory(new TokenlockStore("$this->dir/own/locks")))->createLock('made');
        $this->assertTrue($lock->acquire());
        $lock->release();
    }

    /**
     * The store's directory as given is refused as untrusted, and nothing
     * in it, or behind it, was touched.
     */
    private function assertUntrusted(string $directory, string $why, string $looked): void
    {
        $before = self::tree($looked);
        $mode = self::mode($looked);
        try {
            new TokenlockStore($directory);
            $this->fail("$directory was accepted");
        } catch (\Tokenlock\Exception $e) {
            $this->assertSame(['untrusted', 77], [$e->getError(), $e->getCode()], $e->getMessage());
            $this->assertStringContainsString('tokenlock: open ' . rtrim($directory, '/') . ": refusing the lock store's directory", $e->getMessage());
            $this->assertStringContainsString($why, $e->getMessage());
        }
        $this->assertSame($before, self::tree($looked), 'nothing was made');
        $this->assertSame($mode, self::mode($looked), 'its mode is left as it was');
    }

    public function testAStoreDirectoryAnotherUserCouldChangeIsRefused(): void
    {
        mkdir($this->locks, 0700);
        chmod($this->locks, 0777);
        $this->assertUntrusted($this->locks, 'writable by every user (mode 0777); run chmod o-w', $this->locks);
        chmod($this->locks, 0770);
        $this->assertUntrusted($this->locks, 'which is not the group chosen for sharing', $this->locks);
        if (posix_geteuid() === 0) {
            chmod($this->locks, 0755);
            chown($this->locks, 65534);
            $this->assertUntrusted($this->locks, 'it belongs to uid 65534', $this->locks);
            chown($this->locks, 0);
        }
        chmod($this->locks, 0700);
        $this->assertInstanceOf(TokenlockStore::class, new TokenlockStore($this->locks), 'once fixed, it is taken');
    }

    public function testASymbolicLinkInPlaceOfTheStoreDirectoryIsRefused(): void
    {
        mkdir("$this->dir/real", 0700);
        symlink("$this->dir/real", $this->locks);
        $this->assertUntrusted($this->locks, 'it is not a directory; remove it', "$this->dir/real");
        $this->assertUntrusted("$this->locks/", 'it is not a directory; remove it', "$this->dir/real");
        // A link to nowhere is not followed to make its target either.
        unlink($this->locks);
        symlink("$this->dir/nowhere", $this->locks);
        $this->assertUntrusted($this->locks, 'it is not a directory; remove it', $this->dir);
        $this->assertFileDoesNotExist("$this->dir/nowhere");
    }

    public function testAFileInPlaceOfTheStoreDirectoryIsRefused(): void
    {
        file_put_contents($this->locks, 'kept');
        try {
            new TokenlockStore($this->locks);
            $this->fail('a store on a regular file was made');
        } catch (\Symfony\Component\Lock\Exception\InvalidArgumentException $e) {
            $this->assertStringContainsString("$this->locks: cannot open the lock store's directory", $e->getMessage());
        }
        $this->assertSame('kept', file_get_contents($this->locks));
    }

    public function testAFailedAcquireIsAStorageErrorAndLeavesNothing(): void
    {
        $lock = $this->factory()->createLock('gone');
        // The store's directory replaced by a file after the store was made.
        rmdir($this->locks);
        file_put_contents($this->locks, 'kept');
        try {
            $lock->acquire();
            $this->fail('acquired in a store directory that is a file');
        } catch (\Symfony\Component\Lock\Exception\LockAcquiringException $e) {
            $storage = $e->getPrevious();
            $this->assertInstanceOf(\Symfony\Component\Lock\Exception\LockStorageException::class, $storage);
            $this->assertSame('system', $storage->getPrevious()->getError());
        }
        $this->assertFalse($lock->isAcquired());
        $this->assertSame(['locks'], self::tree($this->dir));
        $this->assertSame('kept', file_get_contents($this->locks));
    }

    public function testTheStoreKeepsNoStateItDoesNotUse(): void
    {
        $class = new \ReflectionClass(TokenlockStore::class);
        $names = array_map(fn (\ReflectionProperty $p) => $p->getName(), $class->getProperties());
        $names = array_values(array_filter($names, fn (string $n) => !$class->getProperty($n)->isStatic()));
        sort($names);
        $this->assertSame(['directory', 'group', 'initialTtl'], $names);
        // No static: the names of resources' lock directories are kept
        // for the process, bounded, by StoreDirectory (shared with the
        // semaphore store).
        $this->assertSame([], array_keys($class->getStaticProperties()));
        $names = new \ReflectionClass(\Tokenlock\Symfony\StoreDirectory::class);
        $this->assertSame(['names'], array_keys($names->getStaticProperties()));
        $store = new TokenlockStore($this->locks);
        $first = $store->lockDirectory('r0');
        for ($i = 0; $i < 3000; ++$i) {
            $this->assertSame($this->locks . '/sf.r' . $i . '.' . hash('sha256', 'r' . $i) . '.lock', $store->lockDirectory('r' . $i));
        }
        $this->assertLessThanOrEqual(1024, count($names->getStaticPropertyValue('names')));
        $this->assertSame($first, $store->lockDirectory('r0'));
        $this->assertSame($this->locks . '/sf.a-b.' . hash('sha256', 'a/b') . '.lock', (new TokenlockStore($this->locks))->lockDirectory('a/b'));
        // The option older calls give is still accepted.
        $lock = (new LockFactory(new TokenlockStore($this->locks, 300, ['command' => '/nonexistent/tokenlock'])))->createLock('old-call');
        $this->assertTrue($lock->acquire());
        $lock->release();
        $this->assertSame('lockfile', $this->tokenOf('old-call'));
    }

    public function testTtlOutsideTheLeaseBoundsIsRefused(): void
    {
        foreach ([86401, 0.0005, 0, -1] as $ttl) {
            try {
                new TokenlockStore($this->locks, $ttl);
                $this->fail("a store with a TTL of $ttl s was made");
            } catch (\Symfony\Component\Lock\Exception\InvalidTtlException $e) {
                $this->assertStringContainsString('0.001', $e->getMessage());
            }
        }
        $this->assertFileDoesNotExist($this->locks);
    }

    public function testTheSymfonyStoreNamesItsGroup(): void
    {
        $gid = posix_getegid();
        $store = new TokenlockStore("$this->locks", 300, ['group' => $gid]);
        clearstatcache();
        $this->assertSame($gid, filegroup("$this->locks"));
        $this->assertSame('0775', sprintf('%04o', fileperms("$this->locks") & 07777));
        $lock = (new LockFactory($store))->createLock('r');
        $this->assertTrue($lock->acquire());
        $lock->release();
        try {
            new TokenlockStore("$this->locks");
            $this->fail('a group-writable store directory was trusted without its group named');
        } catch (\Tokenlock\Exception $e) {
            $this->assertSame('untrusted', $e->getError());
        }
        if (posix_geteuid() === 0) {
            chown("$this->locks", 65534);
            $this->assertInstanceOf(TokenlockStore::class, new TokenlockStore("$this->locks", 300, ['group' => $gid]), 'another member\'s');
            $this->expectException(\Tokenlock\Exception::class);
            new TokenlockStore("$this->locks", 300);
        }
    }
}
