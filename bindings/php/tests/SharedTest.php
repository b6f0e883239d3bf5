<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\BusyException;
use Tokenlock\Exception;
use Tokenlock\Lock;
use Tokenlock\LockLostException;
use Tokenlock\Native;
use Tokenlock\NotAcquiredException;
use Tokenlock\Tests\Support\Channel;
use Tokenlock\Tests\Support\Child;
use Tokenlock\Tests\Support\TempDirTestCase;
use Tokenlock\Tests\Support\Tool;

use function Tokenlock\holders;

/**
 * Shared locks and semaphores (docs/protocol.md, Shared locks and semaphores) across processes:
 * readers hold together, a writer holds alone and is not starved, a
 * semaphore never admits more than its slots, dead readers are taken
 * over at once, and the lock directory is left as the protocol says
 * (free: `lockfile` and nothing in it) after every test.
 */
final class SharedTest extends TempDirTestCase
{
    /** A wait that must end long before it: a failure, not a slow pass. */
    private const LONG_WAIT = 20;

    private function lockDir(): string
    {
        return "$this->dir/a.lock";
    }

    /** The lock is free, and its token holds no share entry. */
    private function assertFreeAndEmpty(string $lockDir): void
    {
        $names = array_values(array_diff(scandir($lockDir), ['.', '..', 'turnstile']));
        $this->assertSame([Native::FREE], $names, 'the lock is free');
        $this->assertSame([], array_values(array_diff(scandir("$lockDir/lockfile"), ['.', '..'])), 'the free token holds no entry');
    }

    /**
     * After processes that came and went: no live holder is left, and the
     * next holder's release frees the lock for good (an entry left by a
     * process that has ended is stale, and goes with the last one out).
     *
     * @param array<string, mixed> $options
     */
    private function assertNothingHeld(string $lockDir, array $options): void
    {
        $this->assertSame([], array_values(array_filter(holders($lockDir), fn ($h) => !$h['stale'])), 'no live holder left');
        Lock::acquire($lockDir, $options + ['wait' => 0])->release();
        $this->assertFreeAndEmpty($lockDir);
    }

    /** @return list<string> the holders' modes, sorted */
    private static function modes(string $lockDir): array
    {
        $m = array_map(fn (array $h) => $h['mode'] === 'slot' ? "slot/{$h['slots']}" : $h['mode'], holders($lockDir));
        sort($m);
        return $m;
    }

    /** Waits (bounded) until $check() is true; fails naming $what. */
    private function eventually(callable $check, string $what, float $within = 10.0): void
    {
        $until = microtime(true) + $within;
        while (!$check()) {
            if (microtime(true) > $until) {
                $this->fail("not within $within s: $what");
            }
            usleep(2000);
        }
    }

    public function testEightReadersHoldAtOnceAndAllLeave(): void
    {
        $lockDir = $this->lockDir();
        $children = [];
        for ($i = 0; $i < 8; ++$i) {
            $children[] = Child::start(function (Channel $ch) use ($lockDir): void {
                $lock = Lock::acquireShared($lockDir, ['wait' => self::LONG_WAIT]);
                $ch->send('in ' . $lock->mode());
                $ch->receive();
                $lock->release();
                $ch->send('out');
            });
        }
        foreach ($children as $c) {
            $this->assertSame('in shared', $c->channel->receive());
        }
        // All eight hold now: none has been told to leave.
        $this->assertSame(array_fill(0, 8, 'shared'), self::modes($lockDir));
        $this->assertNull(Lock::tryAcquire($lockDir), 'no writer beside readers');
        foreach ($children as $c) {
            $c->channel->send('go');
            $this->assertSame('out', $c->channel->receive());
            $this->assertSame(0, $c->wait());
        }
        $this->assertFreeAndEmpty($lockDir);
    }

    public function testAWriterWaitsForTheReadersThenHoldsAlone(): void
    {
        $lockDir = $this->lockDir();
        $a = Lock::acquireShared($lockDir);
        $b = Lock::acquireShared($lockDir);
        $writer = Child::start(function (Channel $ch) use ($lockDir): void {
            $lock = Lock::acquire($lockDir, ['wait' => self::LONG_WAIT]);
            $ch->send('held ' . $lock->mode());
            $ch->receive();
            $lock->release();
        });
        $this->eventually(fn () => in_array('waiting', self::modes($lockDir), true), 'the writer marks the readers');
        $this->assertSame(['shared', 'shared', 'waiting'], self::modes($lockDir));
        // Writer preference: a new reader waits behind the mark.
        $this->assertNull(Lock::tryAcquire($lockDir, ['shared' => true]));
        $a->release();
        $this->assertFalse($writer->channel->ready(), 'the writer holds only once every reader left');
        $b->release();
        $this->assertSame('held exclusive', $writer->channel->receive());
        $this->assertSame(['exclusive'], self::modes($lockDir));
        $this->assertNull(Lock::tryAcquire($lockDir, ['shared' => true]), 'no reader beside the writer');
        $writer->channel->send('go');
        $this->assertSame(0, $writer->wait());
        $this->assertFreeAndEmpty($lockDir);
    }

    public function testALoneReaderMarkedByAWriterHandsTheLockOverAsItLeaves(): void
    {
        $lockDir = $this->lockDir();
        $reader = Lock::acquireShared($lockDir);
        $this->assertStringStartsWith('lockfile.', $reader->token(), 'a lone share');
        $writer = Child::start(function (Channel $ch) use ($lockDir): void {
            $lock = Lock::acquire($lockDir, ['wait' => self::LONG_WAIT]);
            $ch->send('held');
            $ch->receive();
            $lock->release();
        });
        $this->eventually(fn () => self::modes($lockDir) === ['shared', 'waiting'], 'the writer marks the lone share');
        $reader->release();
        $this->assertSame('held', $writer->channel->receive());
        $this->assertSame(['exclusive'], self::modes($lockDir));
        $writer->channel->send('go');
        $this->assertSame(0, $writer->wait());
        $this->assertFreeAndEmpty($lockDir);
    }

    public function testAReaderWhoseRequestEndsLeavesItsGroup(): void
    {
        $lockDir = $this->lockDir();
        $kept = Lock::acquireShared($lockDir);
        foreach (['exit' => fn () => exit(0), 'exception' => fn () => throw new \RuntimeException('uncaught')] as $how => $end) {
            $child = Child::start(function (Channel $ch) use ($lockDir, $end): void {
                $lock = Lock::acquireShared($lockDir);
                $ch->send($lock->token());
                $end();
            });
            $entry = $child->channel->receive();
            $child->wait();
            $this->assertStringStartsWith('s.', $entry);
            $this->assertSame(['shared'], self::modes($lockDir), "the request's end ($how) released its share");
        }
        $kept->release();
        $this->assertFreeAndEmpty($lockDir);
    }

    public function testAWriterAmongLoopingReadersGetsInWithinTwoHoldsAndAPoll(): void
    {
        $lockDir = $this->lockDir();
        $holdUs = 100000;
        $readers = [];
        for ($i = 0; $i < 4; ++$i) {
            $readers[] = Child::start(function (Channel $ch) use ($lockDir, $holdUs): void {
                $until = (int) $ch->receive();
                $n = 0;
                while (hrtime(true) < $until) {
                    $lock = Lock::acquireShared($lockDir, ['wait' => self::LONG_WAIT]);
                    usleep($holdUs);  // the reader's work
                    $lock->release();
                    ++$n;
                }
                $ch->send((string) $n);
            });
        }
        $until = hrtime(true) + 3000000000;
        foreach ($readers as $r) {
            $r->channel->send((string) $until);
        }
        $this->eventually(fn () => count(array_filter(self::modes($lockDir), fn ($m) => $m === 'shared')) >= 2, 'readers overlap');
        $took = [];
        for ($round = 0; $round < 3; ++$round) {
            $start = hrtime(true);
            $w = Lock::acquire($lockDir, ['wait' => self::LONG_WAIT]);
            $took[] = (hrtime(true) - $start) / 1e6;
            $this->assertSame(['exclusive'], self::modes($lockDir), 'the writer holds alone');
            $w->release();
            usleep(200000);  // readers take the lock back before the next round
        }
        $ops = 0;
        foreach ($readers as $r) {
            $ops += (int) $r->channel->receive();
            $this->assertSame(0, $r->wait());
        }
        // Two holds and one poll (10 ms), and 40 ms for a machine under load.
        $bound = 2 * $holdUs / 1000 + 10 + 40;
        fwrite(STDERR, sprintf("\n[shared] writer among 4 looping readers (hold 100 ms): waited %s ms; bound %d ms; %d reads\n", implode(', ', array_map(fn ($t) => sprintf('%.1f', $t), $took)), $bound, $ops));
        $this->assertLessThanOrEqual($bound, max($took), 'writer preference: ' . implode(', ', $took));
        $this->assertGreaterThan(20, $ops, 'the readers kept reading');
        $this->assertNothingHeld($lockDir, ['shared' => true]);
    }

    public function testASemaphoreNeverAdmitsMoreThanItsSlots(): void
    {
        $lockDir = $this->lockDir();
        $count = "$this->dir/inside";
        file_put_contents($count, '0 0 0');
        // The test's own bookkeeping: holders inside, the most seen, the total.
        $note = function (int $by) use ($count): void {
            $h = fopen($count, 'r+');
            flock($h, LOCK_EX);
            [$in, $max, $total] = array_map('intval', explode(' ', stream_get_contents($h)));
            $in += $by;
            $max = max($max, $in);
            $total += $by > 0 ? 1 : 0;
            ftruncate($h, 0);
            rewind($h);
            fwrite($h, "$in $max $total");
            flock($h, LOCK_UN);
            fclose($h);
        };
        $children = [];
        for ($i = 0; $i < 6; ++$i) {
            $children[] = Child::start(function (Channel $ch) use ($lockDir, $note): void {
                $until = (int) $ch->receive();
                $n = 0;
                while (hrtime(true) < $until) {
                    $lock = Lock::acquire($lockDir, ['slots' => 3, 'wait' => self::LONG_WAIT, 'lease' => 30]);
                    $note(1);
                    usleep(random_int(0, 3000));
                    if ($n % 5 === 0) {
                        $lock->refresh(30);
                    }
                    $note(-1);
                    $lock->release();
                    ++$n;
                }
                $ch->send((string) $n);
            });
        }
        $until = hrtime(true) + 3000000000;
        foreach ($children as $c) {
            $c->channel->send((string) $until);
        }
        $ops = 0;
        foreach ($children as $c) {
            $ops += (int) $c->channel->receive();
            $this->assertSame(0, $c->wait());
        }
        [$in, $max, $total] = array_map('intval', explode(' ', file_get_contents($count)));
        fwrite(STDERR, sprintf("\n[shared] semaphore of 3, 6 processes, 3 s: %d holds, at most %d at once\n", $total, $max));
        $this->assertSame(0, $in);
        $this->assertSame($ops, $total, 'every hold counted');
        $this->assertLessThanOrEqual(3, $max, 'never more than 3 slot holders');
        $this->assertSame(3, $max, 'the 3 slots were used at once');
        $this->assertNothingHeld($lockDir, ['slots' => 3]);
    }

    /**
     * Processes that keep converting each other's lone shares and leaving
     * leave nothing behind while they still live: a converter that lost
     * removes its own copy of the lone holder's share, so no copy made
     * late (after the holder left) stays as a share of nobody, which
     * would keep writers out and fill a slot for the rest of its lease.
     */
    public function testConvertingAndLeavingLeavesNoShareOfNobody(): void
    {
        $lockDir = $this->lockDir();
        $children = [];
        for ($i = 0; $i < 5; ++$i) {
            $children[] = Child::start(function (Channel $ch) use ($lockDir): void {
                $until = (int) $ch->receive();
                $n = $grouped = 0;
                while (hrtime(true) < $until) {
                    $lock = Lock::acquire($lockDir, ['slots' => 2, 'wait' => self::LONG_WAIT, 'lease' => 600]);
                    $grouped += str_starts_with($lock->token(), 's.') ? 1 : 0;
                    usleep(random_int(0, 500));
                    $lock->release();
                    ++$n;
                }
                $ch->send("$n $grouped");
                $ch->receive();  // alive until the lock was looked at: its shares would be live
            });
        }
        $until = hrtime(true) + 3000000000;
        foreach ($children as $c) {
            $c->channel->send((string) $until);
        }
        $ops = $grouped = 0;
        foreach ($children as $c) {
            [$n, $g] = array_map('intval', explode(' ', $c->channel->receive()));
            $ops += $n;
            $grouped += $g;
        }
        fwrite(STDERR, sprintf("\n[shared] semaphore of 2, 5 processes converting and leaving, 3 s: %d holds, %d in a group\n", $ops, $grouped));
        try {
            $this->assertGreaterThan(100, $grouped, 'lone shares were converted and groups joined');
            $this->assertSame([], holders($lockDir), 'no holder left, live or stale');
            $this->assertFreeAndEmpty($lockDir);
            $writer = Lock::acquire($lockDir, ['wait' => 0]);
            $this->assertSame(['exclusive'], self::modes($lockDir), 'a writer gets in at once');
            $writer->release();
        } finally {
            foreach ($children as $c) {
                $c->channel->send('go');
                $this->assertSame(0, $c->wait());
            }
        }
        $this->assertFreeAndEmpty($lockDir);
    }

    public function testReadersKilledWithSigkillAreTakenOverAtOnce(): void
    {
        $lockDir = $this->lockDir();
        foreach ([1, 3] as $readers) {
            $children = [];
            for ($i = 0; $i < $readers; ++$i) {
                $children[] = Child::start(function (Channel $ch) use ($lockDir): void {
                    Lock::acquireShared($lockDir, ['wait' => self::LONG_WAIT, 'lease' => 600]);
                    $ch->send('in');
                    $ch->receive();
                });
            }
            foreach ($children as $c) {
                $this->assertSame('in', $c->channel->receive());
            }
            foreach ($children as $c) {
                $c->kill();
            }
            $start = microtime(true);
            $w = Lock::acquire($lockDir, ['wait' => 5]);
            $this->assertLessThan(1.0, microtime(true) - $start, "$readers dead reader(s) with a lease of 600 s are taken over at once");
            $this->assertSame([], array_values(array_filter(scandir("$lockDir/{$w->token()}"), fn ($n) => str_starts_with($n, 's.'))), 'their entries are gone');
            $w->release();
            $this->assertFreeAndEmpty($lockDir);
        }
    }

    public function testARefreshKeepsTheShareAndAConvertedLoneShareLeavesAsAMember(): void
    {
        $lockDir = $this->lockDir();
        $a = Lock::acquireShared($lockDir, ['lease' => 30]);
        $lone = $a->token();
        $this->assertStringStartsWith('lockfile.', $lone);
        $renewed = $a->refresh(60);
        $this->assertNotSame($lone, $renewed);
        $this->assertTrue(is_dir("$lockDir/$renewed"), 'a lone share refreshes by one rename');
        $b = Lock::acquireShared($lockDir);
        $this->assertStringStartsWith('s.', $b->token());
        // $a was converted by $b: its refresh and release go through its entry.
        $member = $a->refresh(90);
        $this->assertStringStartsWith('s.', $member);
        $this->assertSame(['shared', 'shared'], self::modes($lockDir));
        $a->release();
        $this->assertSame(['shared'], self::modes($lockDir));
        $b->release();
        $this->assertFreeAndEmpty($lockDir);
    }

    public function testAWriterThatGivesUpUnmarksAndReadersJoinAgain(): void
    {
        $lockDir = $this->lockDir();
        $a = Lock::acquireShared($lockDir);
        $start = microtime(true);
        try {
            Lock::acquire($lockDir, ['wait' => 0.2]);
            $this->fail('the writer got in beside a reader');
        } catch (NotAcquiredException $e) {
            $this->assertStringContainsString('shared', $e->getMessage());
        }
        $this->assertLessThan(2.0, microtime(true) - $start);
        $this->assertSame(['shared'], self::modes($lockDir), 'the mark is gone, the reader kept');
        $b = Lock::acquireShared($lockDir, ['wait' => 0]);
        $this->assertSame(['shared', 'shared'], self::modes($lockDir));
        $b->release();
        $a->release();
        $this->assertFreeAndEmpty($lockDir);
    }

    public function testHoldersOfAnotherLimitWaitForEachOther(): void
    {
        $lockDir = $this->lockDir();
        $s = Lock::acquire($lockDir, ['slots' => 2]);
        foreach ([['shared' => true], ['slots' => 3]] as $asked) {
            try {
                Lock::acquire($lockDir, $asked + ['wait' => 0]);
                $this->fail('joined a holder of another limit');
            } catch (BusyException $e) {
                $this->assertStringContainsString('a semaphore of 2 slots', $e->getMessage());
            }
        }
        $one = Lock::acquire($lockDir, ['slots' => 2, 'wait' => 0]);
        $this->assertNull(Lock::tryAcquire($lockDir, ['slots' => 2]), 'the third of two slots waits');
        $one->release();
        $s->release();
        $this->assertFreeAndEmpty($lockDir);
        $this->expectException(Exception::class);
        Lock::acquire($lockDir, ['slots' => 1000000]);
    }

    public function testTheCommandsWriterWaitsWhileAShareIsLiveAndTakesItOnlyAfterItsLease(): void
    {
        $lockDir = $this->lockDir();
        foreach ([1, 2] as $readers) {
            $locks = [];
            for ($i = 0; $i < $readers; ++$i) {
                $locks[] = Lock::acquireShared($lockDir, ['lease' => 1]);
            }
            [$status, , $err] = Tool::run(['acquire', '-w', '0.3', $lockDir]);
            $this->assertSame(1, $status, "the command waits for $readers reader(s): $err");
            $start = microtime(true);
            [$status, $token, $err] = Tool::run(['acquire', '-w', '10', '--pid', (string) getmypid(), $lockDir]);
            $this->assertSame(0, $status, $err);
            $this->assertGreaterThan(0.5, microtime(true) - $start, 'taken only after the lease (1 s) and the skew allowance');
            foreach ($locks as $l) {
                try {
                    $l->release();
                    $this->fail('a share taken over after its lease still released');
                } catch (LockLostException $e) {
                    $this->assertFalse($l->isHeld());
                }
            }
            $this->assertSame(0, Tool::run(['release', $lockDir, trim($token)])[0]);
            $this->assertFreeAndEmpty($lockDir);
        }
    }

    /** The command under test, when it takes shared holds (`acquire -s`); else the test is skipped. */
    private function sharedCommand(): void
    {
        [, $out, $err] = Tool::run(['acquire', '--help']);
        if (!str_contains($out . $err, '--shared')) {
            $this->markTestSkipped(Tool::path() . ' takes no shared holds (acquire --shared): a command of this version is needed');
        }
    }

    public function testTheCommandsReadersAndThisModulesShareOneGroupAndHandOverToAWriter(): void
    {
        $this->sharedCommand();
        $lockDir = $this->lockDir();
        // The command's lone share, converted by this module.
        [$status, $lone, $err] = Tool::run(['acquire', '-s', '--pid', (string) getmypid(), $lockDir]);
        $this->assertSame(0, $status, $err);
        $this->assertMatchesRegularExpression('/\Alockfile\.[0-9]+\.[^.]+\.[0-9]+\.10000000[0-9]{12}\.[0-9a-f]{16}\z/', trim($lone));
        $mine = Lock::acquireShared($lockDir, ['wait' => 0]);
        $this->assertStringStartsWith('s.', $mine->token());
        $this->assertSame(['shared', 'shared'], self::modes($lockDir));
        // The command's writer marks the group and takes its mark back.
        [$status, , $err] = Tool::run(['acquire', '-w', '0.3', $lockDir]);
        $this->assertSame(1, $status, $err);
        $this->assertSame(['shared', 'shared'], self::modes($lockDir));
        // This module's writer marks it, and the last one out (the command) hands it over.
        $writer = Child::start(function (Channel $ch) use ($lockDir): void {
            $lock = Lock::acquire($lockDir, ['wait' => self::LONG_WAIT]);
            $ch->send('held');
            $ch->receive();
            $lock->release();
        });
        $this->eventually(fn () => self::modes($lockDir) === ['shared', 'shared', 'waiting'], 'the writer marks the group');
        $mine->release();
        $this->assertFalse($writer->channel->ready());
        [$status, , $err] = Tool::run(['release', $lockDir, trim($lone)]);
        $this->assertSame(0, $status, $err);
        $this->assertSame('held', $writer->channel->receive());
        $this->assertSame(['exclusive'], self::modes($lockDir));
        $writer->channel->send('go');
        $this->assertSame(0, $writer->wait());
        $this->assertFreeAndEmpty($lockDir);
        // This module's lone share, converted by the command.
        $lone = Lock::acquireShared($lockDir);
        [$status, $entry, $err] = Tool::run(['acquire', '-s', '--pid', (string) getmypid(), $lockDir]);
        $this->assertSame(0, $status, $err);
        $this->assertStringStartsWith('s.', trim($entry));
        $lone->release();
        $this->assertSame(['shared'], self::modes($lockDir));
        $this->assertSame(0, Tool::run(['release', $lockDir, trim($entry)])[0]);
        $this->assertFreeAndEmpty($lockDir);
    }

    /**
     * This module before shared locks (the one-file module of the commit
     * before them, from git): a shared name is a held token of a foreign
     * host to it, which it waits for until its lease ends.
     */
    public function testTheModuleBeforeSharedLocksWaitsWhileAShareIsLive(): void
    {
        $src = dirname(__DIR__, 3);
        $old = "$this->dir/old-Tokenlock.php";
        exec('git -C ' . escapeshellarg($src) . ' show 4c0e837:bindings/php/Tokenlock.php > ' . escapeshellarg($old) . ' 2>/dev/null', $out, $status);
        if ($status !== 0 || filesize($old) < 1000) {
            $this->markTestSkipped("the module before shared locks (commit 4c0e837) cannot be read from git in $src");
        }
        $lockDir = $this->lockDir();
        $script = '$l = Tokenlock\\Lock::acquire($argv[1], ["wait" => (float) $argv[2]]); echo $l->token(); $l->release();';
        $run = fn (float $wait) => Tool::runPhp($old, $script, [$lockDir, (string) $wait]);
        foreach ([1, 2] as $readers) {
            $locks = [];
            for ($i = 0; $i < $readers; ++$i) {
                $locks[] = Lock::acquireShared($lockDir, ['lease' => 1]);
            }
            [$status, , $err] = $run(0.3);
            $this->assertNotSame(0, $status, "the old module waits for $readers reader(s)");
            $this->assertStringContainsString('timed out', $err);
            $this->assertSame(array_fill(0, $readers, 'shared'), self::modes($lockDir), 'and changes nothing');
            $start = microtime(true);
            [$status, $token, $err] = $run(10);
            $this->assertSame(0, $status, $err);
            $this->assertGreaterThan(0.5, microtime(true) - $start, 'it takes the lock only after the lease (1 s) and the skew allowance');
            $this->assertMatchesRegularExpression('/\Alockfile\.[0-9]+\./', $token);
            foreach ($locks as $l) {
                try {
                    $l->release();
                    $this->fail('a share taken over after its lease still released');
                } catch (LockLostException $e) {
                    $this->assertFalse($l->isHeld());
                }
            }
            $this->assertFreeAndEmpty($lockDir);
        }
    }
}
