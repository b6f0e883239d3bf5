<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\BusyException;
use Tokenlock\Exception;
use Tokenlock\LockLostException;
use Tokenlock\RedisLock;
use Tokenlock\TimeoutException;
use Tokenlock\Tests\Support\Channel;
use Tokenlock\Tests\Support\Child;
use Tokenlock\Tests\Support\RedisServer;
use Tokenlock\Tests\Support\SlotCount;
use Tokenlock\Tests\Support\RedisTestCase;
use Tokenlock\Tests\Support\Tool;

/**
 * Tokenlock\RedisLock's shared holds and semaphores against a real
 * redis-server, in processes of their own and beside the C++ client as
 * the `tokenlock --redis` command (docs/redis.md, Shared locks and
 * semaphores).
 */
final class RedisSharedTest extends RedisTestCase
{
    private const LONG_WAIT = 30;

    /** Waits, within a bound, until $done() is true. */
    private function eventually(callable $done, string $what, float $seconds = 10): void
    {
        $deadline = microtime(true) + $seconds;
        while (!$done()) {
            $this->assertLessThan($deadline, microtime(true), "$what: not within $seconds s");
            usleep(5000);
        }
    }

    /** @return list<string> the modes of the lock's holders, as holders() lists them */
    private function modes(string $name): array
    {
        return array_column(RedisLock::holders($this->url, $name), 'mode');
    }

    /** Nothing of the lock is left but its last fence. */
    private function assertOnlyTheFenceIsLeft(string $name): void
    {
        $keys = $this->client->keys("tokenlock:$name*");
        sort($keys);
        $this->assertSame(["tokenlock:$name:fence"], array_values(array_diff($keys, ["tokenlock:$name:waiters", "tokenlock:$name:wake"])),
            'no grant, share or mark is left');
        $this->assertSame([], RedisLock::holders($this->url, $name));
    }

    public function testAShareHasNoFenceAndTheOptionsAreLocksOwn(): void
    {
        $read = RedisLock::acquireShared($this->url, 'doc', ['wait' => 0, 'lease' => 30]);
        $slot = RedisLock::acquire($this->url, 'sem', ['slots' => 4, 'wait' => 0]);
        $this->assertSame(['shared', 0, null], [$read->mode(), $read->slots(), $read->fence()]);
        $this->assertSame(['shared', 4, null], [$slot->mode(), $slot->slots(), $slot->fence()]);
        $this->assertSame($read->owner(), $read->token(), "a share's token is its owner id, as the command prints it");
        $this->assertSame('shared-00000000.0.0.0000000000000000', explode(' ', (string) $this->client->get('tokenlock:doc'))[1]);
        $this->assertSame(['shared'], $this->modes('doc'));
        $this->assertSame([['slot', 4]], array_map(fn ($h) => [$h['mode'], $h['slots']], RedisLock::holders($this->url, 'sem')));
        $writer = RedisLock::acquire($this->url, 'alone', ['wait' => 0]);
        // The command's status lists them as the scripts do.
        $seen = fn (array $o) => array_map(fn ($h) => array_diff_key($h, ['remaining' => 0]),
            array_merge(...array_map(fn ($n) => RedisLock::holders($this->url, $n, $o), ['doc', 'sem', 'alone'])));
        $this->assertSame($seen([]), $seen(['backend' => 'command']));
        $this->assertSame([$writer->fence(), 'exclusive'], [RedisLock::holders($this->url, 'alone')[0]['fence'], $this->modes('alone')[0]]);
        $writer->release();
        $h = RedisLock::holder($this->url, 'doc');
        $this->assertSame([$read->owner(), null, getmypid(), 'shared'], [$h['owner'], $h['fence'], $h['pid'], $h['mode']]);
        foreach ([['slots' => 0], ['slots' => 1000000], ['slots' => '3'], ['shared' => 'yes'], ['shared' => false, 'slots' => 2]] as $bad) {
            try {
                RedisLock::acquire($this->url, 'doc', $bad + ['wait' => 0]);
                $this->fail('accepted ' . json_encode($bad));
            } catch (Exception $e) {
                $this->assertSame(['bad_argument', 64], [$e->getError(), $e->getCode()], $e->getMessage());
            }
        }
        $read->release();
        $slot->release();
        $this->assertFalse($read->isHeld());
        $this->assertOnlyTheFenceIsLeft('doc');
        $this->assertOnlyTheFenceIsLeft('sem');
    }

    public function testReadersInProcessesOfTheirOwnHoldTogether(): void
    {
        $url = $this->url;
        $readers = [];
        for ($i = 0; $i < 6; ++$i) {
            $readers[] = Child::start(function (Channel $c) use ($url): void {
                $lock = RedisLock::acquireShared($url, 'page', ['wait' => self::LONG_WAIT]);
                $c->send('in');
                $c->receive();
                $lock->release();
                $c->send('out');
            });
        }
        foreach ($readers as $r) {
            $this->assertSame('in', $r->channel->receive());
        }
        // Every one is in before any leaves: six at once.
        $this->assertSame(array_fill(0, 6, 'shared'), $this->modes('page'));
        $this->assertSame(7, $this->client->hLen('tokenlock:page:shared'), 'six holders and the limit');
        $this->assertNull(RedisLock::tryAcquire($this->url, 'page'), 'no writer beside them');
        $this->assertSame(0, $this->client->exists('tokenlock:page:writer'), "a try_acquire leaves no mark");
        foreach ($readers as $r) {
            $r->channel->send('go');
            $this->assertSame('out', $r->channel->receive());
            $this->assertSame(0, $r->wait());
        }
        $this->assertOnlyTheFenceIsLeft('page');
    }

    public function testAWaitingWriterBarsNewReadersAndGetsInWhenTheLastLeaves(): void
    {
        $reader = RedisLock::acquireShared($this->url, 'doc', ['lease' => 60]);
        $sharedFence = (int) explode(' ', (string) $this->client->get('tokenlock:doc'))[0];
        $url = $this->url;
        $writer = Child::start(function (Channel $c) use ($url): void {
            $lock = RedisLock::acquire($url, 'doc', ['wait' => self::LONG_WAIT, 'lease' => 30]);
            $c->send($lock->owner() . ' ' . $lock->fence());
            $lock->release();
        });
        $this->eventually(fn () => $this->client->exists('tokenlock:doc:writer') === 1, "the writer's mark");
        $this->assertFalse($writer->channel->ready(), 'the writer got in beside a reader');
        $this->assertSame(['shared', 'waiting'], $this->modes('doc'));
        try {
            RedisLock::acquireShared($this->url, 'doc', ['wait' => 0]);
            $this->fail('a reader joined behind a waiting writer');
        } catch (BusyException $e) {
            $this->assertMatchesRegularExpression('/a writer \(pid [0-9]+ on host \S+\) waits for them, which bars new shared holders/', $e->getMessage());
        }
        [$status, , $err] = Tool::run(['acquire', '-s', '-n', '--redis', $this->url, '--', 'doc']);
        $this->assertSame(1, $status, "the command's reader is barred too: $err");
        $this->assertNull(RedisLock::tryAcquire($this->url, 'doc', ['shared' => true]));
        $reader->release();
        [$owner, $fence] = explode(' ', $writer->channel->receive());
        $this->assertGreaterThan($sharedFence, (int) $fence, 'the writer takes a fence past the shared grant');
        $this->assertSame(0, $writer->wait());
        $this->assertSame(0, $this->client->exists('tokenlock:doc:writer'), 'its grant removed its mark');
        $this->assertStringContainsString('.' . $writer->pid . '.', $owner);
        $this->assertOnlyTheFenceIsLeft('doc');
    }

    public function testAWriterAmongLoopingReadersGetsInWithinTwoHolds(): void
    {
        $url = $this->url;
        // Holds of 50 to 150 ms: readers that left together come back
        // apart, so that the lock is never free between them.
        $holdUs = 150000;
        $readers = [];
        for ($i = 0; $i < 4; ++$i) {
            $readers[] = Child::start(function (Channel $c) use ($url, $holdUs): void {
                $until = (int) $c->receive();
                $n = 0;
                while (hrtime(true) < $until) {
                    $lock = RedisLock::acquireShared($url, 'page', ['wait' => self::LONG_WAIT]);
                    usleep(random_int($holdUs / 3, $holdUs));  // the reader's work
                    $lock->release();
                    ++$n;
                }
                $c->send((string) $n);
            });
        }
        $until = hrtime(true) + 3_000_000_000;
        foreach ($readers as $r) {
            $r->channel->send((string) $until);
        }
        $this->eventually(fn () => count(RedisLock::holders($this->url, 'page')) >= 2, 'readers overlap');
        $took = [];
        for ($round = 0; $round < 3; ++$round) {
            $start = hrtime(true);
            // Far more than the bound, and less than the readers' 3 s.
            $w = RedisLock::acquire($this->url, 'page', ['wait' => 1.5]);
            $took[] = (hrtime(true) - $start) / 1e6;
            $this->assertSame(['exclusive'], $this->modes('page'), 'the writer holds alone');
            $w->release();
            $this->eventually(fn () => count(RedisLock::holders($this->url, 'page')) >= 2, 'readers back in');
        }
        $ops = 0;
        foreach ($readers as $r) {
            $ops += (int) $r->channel->receive();
            $this->assertSame(0, $r->wait());
        }
        // The longest hold of the readers inside at the mark, once more for
        // a round of readers that came in before it, and 50 ms for load.
        $bound = 2 * $holdUs / 1000 + 50;
        fwrite(STDERR, sprintf("\n[redis shared] writer among 4 looping readers (holds of 50-150 ms): waited %s ms; bound %d ms; %d reads\n",
            implode(', ', array_map(fn ($t) => sprintf('%.1f', $t), $took)), $bound, $ops));
        $this->assertLessThanOrEqual($bound, max($took), 'writer preference: ' . implode(', ', $took));
        $this->assertGreaterThan(20, $ops, 'the readers kept reading');
        $this->assertOnlyTheFenceIsLeft('page');
    }

    public function testAWriterWhoseWaitRunsOutTakesItsMarkBack(): void
    {
        $reader = RedisLock::acquireShared($this->url, 'doc');
        try {
            RedisLock::acquire($this->url, 'doc', ['wait' => 0.3]);
            $this->fail('a writer got in beside a reader');
        } catch (TimeoutException $e) {
            $this->assertSame('timed_out', $e->getError());
            $this->assertStringContainsString('held by shared holders', $e->getMessage());
        }
        $this->assertSame(0, $this->client->exists('tokenlock:doc:writer'), 'no mark left to bar readers');
        $second = RedisLock::acquireShared($this->url, 'doc', ['wait' => 0]);
        $this->assertSame(['shared', 'shared'], $this->modes('doc'));
        $reader->release();
        $second->release();
        $this->assertOnlyTheFenceIsLeft('doc');
    }

    public function testASemaphoreNeverAdmitsMoreThanItsSlotsUnderChurn(): void
    {
        $count = "$this->dir/inside";
        file_put_contents($count, '0 0 0');
        $url = $this->url;
        $children = [];
        // Four PHP processes and two that hold through the command, whose
        // child does the same work.
        for ($i = 0; $i < 6; ++$i) {
            $children[] = Child::start(function (Channel $c) use ($url, $count, $i): void {
                $until = (int) $c->receive();
                $n = 0;
                while (hrtime(true) < $until) {
                    if ($i >= 4) {
                        [$status, , $err] = Tool::run(['run', '--slots', '3', '-w', '30', '--lease', '30', '--redis', $url, '--', 'sem',
                            PHP_BINARY, __DIR__ . '/Support/SlotCount.php', $count]);
                        $status === 0 || throw new \RuntimeException("tokenlock run --slots 3: status $status: $err");
                        ++$n;
                        continue;
                    }
                    $lock = RedisLock::acquire($url, 'sem', ['slots' => 3, 'wait' => self::LONG_WAIT, 'lease' => 30]);
                    SlotCount::note($count, 1);
                    usleep(random_int(0, 3000));  // the holder's work
                    if ($n % 5 === 0) {
                        $lock->refresh(30);
                    }
                    SlotCount::note($count, -1);
                    $lock->release();
                    ++$n;
                }
                $c->send((string) $n);
            });
        }
        $until = hrtime(true) + 3_000_000_000;
        foreach ($children as $c) {
            $c->channel->send((string) $until);
        }
        $ops = [];
        foreach ($children as $c) {
            $ops[] = (int) $c->channel->receive();
            $this->assertSame(0, $c->wait());
        }
        [$in, $max, $total] = SlotCount::read($count);
        fwrite(STDERR, sprintf("\n[redis shared] semaphore of 3, 4 PHP and 2 command processes, 3 s: %d holds (%d by the command), at most %d at once\n",
            $total, $ops[4] + $ops[5], $max));
        $this->assertSame(0, $in);
        $this->assertSame(array_sum($ops), $total, 'every hold counted');
        $this->assertGreaterThan(0, min($ops), 'every process held');
        $this->assertLessThanOrEqual(3, $max, 'never more than 3 slot holders');
        $this->assertSame(3, $max, 'the 3 slots were used at once');
        $this->assertOnlyTheFenceIsLeft('sem');
    }

    /** @return array<string, array{0: array<string, mixed>}> */
    public function killedHolders(): array
    {
        return ['a reader' => [['shared' => true]], 'a slot holder' => [['slots' => 1]]];
    }

    /**
     * @dataProvider killedHolders
     * @param array<string, mixed> $how
     */
    public function testAHolderKilledWithSigkillFreesItsShareWhenItsLeaseEnds(array $how): void
    {
        $url = $this->url;
        $lease = 1.0;
        $holder = Child::start(function (Channel $c) use ($url, $how, $lease): void {
            $lock = RedisLock::acquire($url, 'doc', $how + ['lease' => $lease]);
            $c->send($lock->owner());
            $c->receive();
        });
        $owner = $holder->channel->receive();
        $held = microtime(true);
        $this->assertSame(128 + SIGKILL, $holder->kill());
        $this->assertSame([$owner], array_column(RedisLock::holders($this->url, 'doc'), 'owner'), 'its share outlives it');
        // A writer for a reader, another slot holder for a slot holder.
        $next = RedisLock::acquire($this->url, 'doc', ($how['slots'] ?? 0) ? $how + ['wait' => 10] : ['wait' => 10]);
        $took = microtime(true) - $held;
        $this->assertGreaterThanOrEqual($lease - 0.05, $took, 'not before its lease ended');
        $this->assertLessThan($lease + 2, $took, 'soon after its lease ended');
        $this->assertNotContains($owner, array_column(RedisLock::holders($this->url, 'doc'), 'owner'));
        $next->release();
        $this->assertOnlyTheFenceIsLeft('doc');
    }

    public function testRefreshAndReleaseOfAShareWhoseLeaseEndedAreLost(): void
    {
        $other = RedisLock::acquireShared($this->url, 'doc', ['lease' => 60]);
        $short = RedisLock::acquireShared($this->url, 'doc', ['lease' => 0.2]);
        $shorter = RedisLock::acquireShared($this->url, 'doc', ['lease' => 0.2]);
        $this->eventually(fn () => count(RedisLock::holders($this->url, 'doc')) === 1, 'the short leases end');
        foreach (['refresh' => fn () => $short->refresh(60), 'release' => fn () => $shorter->release()] as $step => $call) {
            try {
                $call();
                $this->fail("the $step of a share whose lease ended succeeded");
            } catch (LockLostException $e) {
                $this->assertSame(['lock_lost', 3], [$e->getError(), $e->getCode()]);
                $this->assertStringContainsString("$step {$this->url} doc: the shared hold of ", $e->getMessage());
                $this->assertStringContainsString('our lease ended (our share is removed)', $e->getMessage());
            }
        }
        $this->assertFalse($short->isHeld());
        $this->assertFalse($shorter->isHeld());
        $short->release();  // nothing more to do
        $this->assertSame([$other->owner(), 'limit'], $this->client->hKeys('tokenlock:doc:shared'), 'the ended shares are gone, the live one intact');
        $this->assertGreaterThan(50000, $this->client->pttl('tokenlock:doc'), "the live holder's lease still covers the grant");
        $other->refresh(30);
        $other->release();
        $this->assertOnlyTheFenceIsLeft('doc');
    }

    public function testAServerGoneMidHoldIsSaidAndItsStateLostIsALostLock(): void
    {
        $reader = RedisLock::acquireShared($this->url, 'doc', ['lease' => 60, 'command_timeout' => 1]);
        $this->server->stop();
        // The link open at the stop is reset; the next one is refused.
        foreach (['refresh' => [fn () => $reader->refresh(), 104], 'release' => [fn () => $reader->release(), 111]] as $step => [$call, $errno]) {
            try {
                $call();
                $this->fail("$step reached a stopped server");
            } catch (Exception $e) {
                $this->assertNotInstanceOf(LockLostException::class, $e);
                $this->assertSame(['system', $errno, 69], [$e->getError(), $e->getErrno(), $e->getCode()], $e->getMessage());
                $this->assertStringContainsString("$step {$this->url}", $e->getMessage());
            }
            $this->assertTrue($reader->isHeld(), "a $step that did not reach the server leaves the share to its lease");
        }
        // A server without persistence comes back on the same port: the
        // share, and every key of the lock, are gone.
        mkdir("$this->dir/again");
        $this->server = new RedisServer("$this->dir/again", $this->server->port);
        $this->client = $this->server->client();
        try {
            $reader->release();
            $this->fail('released a share the server lost');
        } catch (LockLostException $e) {
            $this->assertStringContainsString("the server lost the lock's state", $e->getMessage());
        }
        $this->assertFalse($reader->isHeld());
        $this->assertSame([], $this->client->keys('*'), 'the lost release wrote nothing');
        RedisLock::acquire($this->url, 'doc', ['wait' => 0])->release();
    }

    public function testAPhpReaderAndTheCommandsReaderHoldTogether(): void
    {
        $reader = RedisLock::acquireShared($this->url, 'doc');
        // The command's reader asks, while it holds, who holds the lock.
        [$status, $out, $err] = Tool::run(['run', '-s', '-n', '--redis', $this->url, '--', 'doc',
            Tool::path(), 'status', '--json', '--redis', $this->url, '--', 'doc']);
        $this->assertSame(0, $status, $err);
        $seen = json_decode($out, true, 512, JSON_THROW_ON_ERROR);
        $this->assertCount(2, $seen['holders'], 'the PHP reader and the command held together');
        $this->assertSame(['shared', 'shared'], array_column($seen['holders'], 'mode'));
        $this->assertContains($reader->owner(), array_column($seen['holders'], 'owner'));
        // And the other way round: the module through the command.
        $viaCommand = RedisLock::acquireShared($this->url, 'doc', ['backend' => 'command', 'wait' => 0]);
        $this->assertSame(['shared', 'shared'], array_column(RedisLock::holders($this->url, 'doc', ['backend' => 'command']), 'mode'));
        $viaCommand->refresh(60);
        $viaCommand->release();
        $reader->release();
        $this->assertOnlyTheFenceIsLeft('doc');
    }

    public function testTheCommandsWriterWaitsForAPhpReaderAndBarsPhpReaders(): void
    {
        $reader = RedisLock::acquireShared($this->url, 'doc');
        $proc = proc_open([Tool::path(), 'run', '-w', '30', '--redis', $this->url, '--', 'doc', 'echo', 'wrote'],
            [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['file', "$this->dir/writer.err", 'w']], $pipes);
        $this->eventually(fn () => $this->client->exists('tokenlock:doc:writer') === 1, "the command writer's mark");
        $this->assertTrue(proc_get_status($proc)['running'], 'the command writer ran beside a PHP reader');
        $this->assertSame(['shared', 'waiting'], $this->modes('doc'));
        $this->assertNull(RedisLock::tryAcquire($this->url, 'doc', ['shared' => true]), "its mark bars this module's readers");
        $reader->release();
        $this->assertSame("wrote\n", stream_get_contents($pipes[1]));
        fclose($pipes[1]);
        $this->assertSame(0, proc_close($proc), (string) file_get_contents("$this->dir/writer.err"));
        $this->assertOnlyTheFenceIsLeft('doc');
    }

    public function testAPhpWriterWaitsForTheCommandsReader(): void
    {
        // The command's reader holds until its standard input ends (cat).
        $proc = proc_open([Tool::path(), 'run', '-s', '-n', '--redis', $this->url, '--', 'doc', 'sh', '-c', 'echo in; cat >/dev/null'],
            [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['file', "$this->dir/reader.err", 'w']], $pipes);
        $this->assertSame("in\n", fgets($pipes[1]), (string) file_get_contents("$this->dir/reader.err"));
        $url = $this->url;
        $writer = Child::start(function (Channel $c) use ($url, $pipes): void {
            // The reader's standard input is the parent's to close.
            fclose($pipes[0]);
            $lock = RedisLock::acquire($url, 'doc', ['wait' => self::LONG_WAIT]);
            $c->send('in');
            $lock->release();
        });
        $this->eventually(fn () => $this->client->exists('tokenlock:doc:writer') === 1, "the PHP writer's mark");
        [$status] = Tool::run(['acquire', '-s', '-n', '--redis', $this->url, '--', 'doc']);
        $this->assertSame(1, $status, "the PHP writer's mark bars the command's readers");
        $this->assertFalse($writer->channel->ready());
        fclose($pipes[0]);
        $this->assertSame('in', $writer->channel->receive());
        $this->assertSame(0, $writer->wait());
        fclose($pipes[1]);
        $this->assertSame(0, proc_close($proc));
        $this->assertOnlyTheFenceIsLeft('doc');
    }

    /** A request that dies of a fatal error, which skips destructors, still gives its share back. */
    public function testAShareHeldWhenTheRequestDiesIsReleased(): void
    {
        $kept = RedisLock::acquireShared($this->url, 'dies');
        $script = "$this->dir/die.php";
        file_put_contents($script, "<?php\nrequire \$argv[1];\n"
            . '$lock = Tokenlock\RedisLock::acquire($argv[2], "dies", ["shared" => true, "lease" => 300]);' . "\n"
            . 'echo $lock->owner(), "\n";' . "\n"
            . 'ini_set("memory_limit", "16M"); $s = str_repeat("x", 64 << 20);' . "\n");
        $proc = proc_open([PHP_BINARY, '-d', 'display_errors=stderr', $script, TOKENLOCK_TEST_MODULE, $this->url],
            [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $owner = trim((string) stream_get_contents($pipes[1]));
        $err = (string) stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        $this->assertSame(255, proc_close($proc), $err);
        $this->assertStringContainsString('Allowed memory size', $err);
        $this->assertStringNotContainsString('Tokenlock', $err);
        $this->assertNotSame('', $owner, $err);
        $this->assertSame([$kept->owner()], array_column(RedisLock::holders($this->url, 'dies'), 'owner'), 'its share was released as the request ended');
        $kept->release();
        $this->assertOnlyTheFenceIsLeft('dies');
    }
}
