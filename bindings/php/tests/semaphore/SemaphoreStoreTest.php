<?php

declare(strict_types=1);

namespace Tokenlock\Tests\Semaphore;

use Symfony\Component\Semaphore\Exception\RuntimeException;
use Symfony\Component\Semaphore\Exception\SemaphoreExpiredException;
use Symfony\Component\Semaphore\Key;
use Symfony\Component\Semaphore\SemaphoreFactory;
use Tokenlock\Symfony\TokenlockSemaphoreStore;
use Tokenlock\Tests\Support\Channel;
use Tokenlock\Tests\Support\Child;
use Tokenlock\Tests\Support\TempDirTestCase;

/**
 * Tokenlock\Symfony\TokenlockSemaphoreStore through Symfony's own
 * SemaphoreFactory and Semaphore: the key's limit is the number of slots,
 * never exceeded across processes; a weight above 1 is refused; a slot
 * lost is reported as expired. Every test ends with the lock directory
 * free and empty.
 */
final class SemaphoreStoreTest extends TempDirTestCase
{
    private function store(): TokenlockSemaphoreStore
    {
        return new TokenlockSemaphoreStore("$this->dir/semaphores");
    }

    private function assertFree(string $resource): void
    {
        $dir = $this->store()->lockDirectory($resource);
        $this->assertSame(['lockfile'], array_values(array_filter(scandir($dir), fn ($n) => str_starts_with($n, 'lockfile'))));
        $this->assertSame(['.', '..'], scandir("$dir/lockfile"), 'no share entry left');
    }

    public function testTheLimitIsTheNumberOfHoldersAtOnce(): void
    {
        $factory = new SemaphoreFactory($this->store());
        $s = [];
        for ($i = 0; $i < 3; ++$i) {
            $s[] = $factory->createSemaphore('render', 2, 1, 30);
        }
        $this->assertTrue($s[0]->acquire());
        $this->assertTrue($s[1]->acquire());
        $this->assertFalse($s[2]->acquire(), 'the third of two');
        $this->assertTrue($s[0]->isAcquired() && $s[1]->isAcquired());
        $this->assertFalse($s[2]->isAcquired());
        $s[1]->refresh(60);
        $this->assertTrue($s[1]->isAcquired());
        $s[0]->release();
        $this->assertFalse($s[0]->isAcquired());
        $this->assertTrue($s[2]->acquire(), 'a slot given back is taken');
        $s[1]->release();
        $s[2]->release();
        $this->assertFree('render');
        $holders = \Tokenlock\holders($this->store()->lockDirectory('render'));
        $this->assertSame([], $holders);
    }

    public function testAWeightAboveOneIsRefusedAsNotSupported(): void
    {
        $semaphore = (new SemaphoreFactory($this->store()))->createSemaphore('heavy', 3, 2);
        try {
            $semaphore->acquire();
            $this->fail('a weight of 2 was taken');
        } catch (RuntimeException $e) {
            $this->assertSame('not_supported', $e->getPrevious()->getError());
            $this->assertStringContainsString('weight of 2', $e->getPrevious()->getMessage());
        }
        $this->assertFalse($semaphore->isAcquired());
        $this->assertFalse(is_dir($this->store()->lockDirectory('heavy')), 'nothing was made');
    }

    public function testASlotTakenOverIsReportedExpired(): void
    {
        $store = $this->store();
        $key = new Key('short', 1);
        $store->save($key, 0.2);
        $dir = $store->lockDirectory('short');
        // Another process takes the slot once the lease (and the skew) ended.
        $other = new Key('short', 1);
        for ($until = microtime(true) + 5; ; usleep(20000)) {
            try {
                $store->save($other, 30);
                break;
            } catch (\Symfony\Component\Semaphore\Exception\SemaphoreAcquiringException $e) {
                $this->assertLessThan($until, microtime(true), 'taken after the lease: ' . $e->getMessage());
            }
        }
        $this->assertFalse($store->exists($key));
        $this->expectException(SemaphoreExpiredException::class);
        try {
            $store->putOffExpiration($key, 30);
        } finally {
            $this->assertTrue($store->exists($other), 'the new holder kept its slot');
            $store->delete($other);
            $this->assertFree('short');
        }
    }

    public function testProcessesNeverHoldMoreThanTheLimit(): void
    {
        $inside = "$this->dir/inside";
        file_put_contents($inside, '0 0 0');
        $note = function (int $by) use ($inside): void {
            $h = fopen($inside, 'r+');
            flock($h, LOCK_EX);
            [$in, $max, $total] = array_map('intval', explode(' ', stream_get_contents($h)));
            $in += $by;
            ftruncate($h, 0);
            rewind($h);
            fwrite($h, $in . ' ' . max($max, $in) . ' ' . ($total + ($by > 0 ? 1 : 0)));
            fclose($h);
        };
        $children = [];
        for ($i = 0; $i < 5; ++$i) {
            $children[] = Child::start(function (Channel $ch) use ($note): void {
                $factory = new SemaphoreFactory($this->store());
                $until = (int) $ch->receive();
                $n = 0;
                while (hrtime(true) < $until) {
                    $semaphore = $factory->createSemaphore('pool', 2, 1, 30);
                    if (!$semaphore->acquire()) {
                        usleep(500);
                        continue;
                    }
                    $note(1);
                    usleep(random_int(0, 2000));
                    $note(-1);
                    $semaphore->release();
                    ++$n;
                }
                $ch->send((string) $n);
            });
        }
        $until = hrtime(true) + 2000000000;
        foreach ($children as $c) {
            $c->channel->send((string) $until);
        }
        $ops = 0;
        foreach ($children as $c) {
            $ops += (int) $c->channel->receive();
            $this->assertSame(0, $c->wait());
        }
        [$in, $max, $total] = array_map('intval', explode(' ', file_get_contents($inside)));
        fwrite(STDERR, sprintf("\n[semaphore] limit 2, 5 processes, 2 s: %d holds, at most %d at once\n", $total, $max));
        $this->assertSame(0, $in);
        $this->assertSame($ops, $total);
        $this->assertSame(2, $max, 'never more than 2, and 2 were reached');
        // No live holder left; an entry of a process that has ended is
        // stale, and goes with the next holder, the last one out.
        $dir = $this->store()->lockDirectory('pool');
        $this->assertSame([], array_values(array_filter(\Tokenlock\holders($dir), fn ($h) => !$h['stale'])));
        $last = (new SemaphoreFactory($this->store()))->createSemaphore('pool', 2);
        $this->assertTrue($last->acquire());
        $last->release();
        $this->assertFree('pool');
    }
}
