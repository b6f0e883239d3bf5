<?php

declare(strict_types=1);

namespace Tokenlock\Tests\Symfony;

use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\LockFactory;
use Tokenlock\Symfony\TokenlockStore;
use Tokenlock\Tests\Support\Channel;
use Tokenlock\Tests\Support\Child;
use Tokenlock\Tests\Support\TempDirTestCase;

/**
 * TokenlockStore's read locks (SharedLockStoreInterface,
 * BlockingSharedLockStoreInterface): through the store as Symfony's
 * shared-lock suite drives one (readers together, a writer refused, a
 * read lock promoted only when alone, a write lock demoted), and through
 * Symfony's Lock::acquireRead() across processes. Every test ends with
 * the lock directory free and empty.
 */
final class SharedStoreTest extends TempDirTestCase
{
    private function store(): TokenlockStore
    {
        return new TokenlockStore("$this->dir/locks");
    }

    private function assertFree(string $resource): void
    {
        $dir = $this->store()->lockDirectory($resource);
        $this->assertSame(['lockfile'], array_values(array_filter(scandir($dir), fn ($n) => str_starts_with($n, 'lockfile'))));
        $this->assertSame(['.', '..'], scandir("$dir/lockfile"), 'no share entry left');
    }

    public function testReadersShareAndAWriterIsRefusedUntilTheyLeave(): void
    {
        $store = $this->store();
        [$r1, $r2, $w] = [new Key('doc'), new Key('doc'), new Key('doc')];
        $store->saveRead($r1);
        $store->saveRead($r2);
        $this->assertTrue($store->exists($r1) && $store->exists($r2));
        try {
            $store->save($w);
            $this->fail('a writer beside readers');
        } catch (LockConflictedException $e) {
            $this->assertStringContainsString('shared', $e->getMessage());
        }
        $this->assertTrue($store->exists($r1) && $store->exists($r2), 'the refusal left the readers alone');
        $this->assertFalse($store->exists($w));
        $store->delete($r1);
        $this->assertFalse($store->exists($r1));
        $this->assertTrue($store->exists($r2));
        $store->delete($r2);
        $store->save($w);
        $this->assertTrue($store->exists($w));
        try {
            $store->saveRead($r1);
            $this->fail('a reader beside a writer');
        } catch (LockConflictedException $e) {
        }
        $store->delete($w);
        $this->assertFree('doc');
    }

    public function testAReadLockIsPromotedOnlyWhenAloneAndAWriteLockDemoted(): void
    {
        $store = $this->store();
        [$a, $b] = [new Key('doc'), new Key('doc')];
        $store->saveRead($a);
        $store->saveRead($b);
        try {
            $store->save($a);
            $this->fail('promoted beside another reader');
        } catch (LockConflictedException $e) {
        }
        $this->assertTrue($store->exists($a), 'still a reader');
        $store->delete($b);
        $store->save($a);
        $this->assertTrue($store->exists($a));
        try {
            $store->saveRead($b);
            $this->fail('a reader beside the promoted writer');
        } catch (LockConflictedException $e) {
        }
        $store->saveRead($a);
        $store->saveRead($b);
        $this->assertTrue($store->exists($a) && $store->exists($b), 'demoted: readers together');
        $store->delete($a);
        $store->delete($b);
        $this->assertFree('doc');
    }

    public function testAcquireReadAcrossProcessesAndABlockedWriterGetsInAfterThem(): void
    {
        $factory = new LockFactory($this->store());
        $read = $factory->createLock('page', 30);
        $this->assertTrue($read->acquireRead());
        $reader = Child::start(function (Channel $ch) use ($factory): void {
            $lock = $factory->createLock('page', 30);
            $ch->send($lock->acquireRead() ? 'read' : 'refused');
            $ch->receive();
            $lock->release();
            $ch->send('left');
        });
        $this->assertSame('read', $reader->channel->receive());
        $writer = Child::start(function (Channel $ch) use ($factory): void {
            $lock = $factory->createLock('page', 30);
            $ch->send($lock->acquire(false) ? 'wrote' : 'refused');
            $lock->acquire(true);
            $ch->send('wrote');
            $lock->release();
        });
        $this->assertSame('refused', $writer->channel->receive());
        $dir = $this->store()->lockDirectory('page');
        for ($until = microtime(true) + 10; !in_array('waiting', array_column(\Tokenlock\holders($dir), 'mode'), true);) {
            $this->assertLessThan($until, microtime(true), 'the blocked writer marks the readers');
            usleep(2000);
        }
        $this->assertFalse($factory->createLock('page')->acquireRead(), 'a waiting writer bars new readers');
        $read->release();
        $reader->channel->send('go');
        $this->assertSame('left', $reader->channel->receive());
        $this->assertSame('wrote', $writer->channel->receive());
        $this->assertSame(0, $reader->wait());
        $this->assertSame(0, $writer->wait());
        $this->assertFree('page');
    }
}
