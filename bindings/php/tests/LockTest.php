<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\BusyException;
use Tokenlock\Exception;
use Tokenlock\Lock;
use Tokenlock\LockLostException;
use Tokenlock\TimeoutException;
use Tokenlock\Tests\Support\Channel;
use Tokenlock\Tests\Support\Child;
use Tokenlock\Tests\Support\TempDirTestCase;
use Tokenlock\Tests\Support\Tool;

use function Tokenlock\withLock;

final class LockTest extends TempDirTestCase
{
    /** docs/protocol.md, Token grammar. */
    private const TOKEN = '/\Alockfile\.([1-9][0-9]{0,18})\.[A-Za-z0-9_-]{1,32}-[0-9a-f]{8}\.([1-9][0-9]*)\.[0-9]{1,20}\.[0-9a-f]{16}\z/';

    public function testAcquireGivesATokenOwnedByThisProcessAndReleaseFreesTheLock(): void
    {
        $lockDir = "$this->dir/a.lock";
        $lock = Lock::acquire($lockDir);

        $this->assertMatchesRegularExpression(self::TOKEN, $lock->token());
        preg_match(self::TOKEN, $lock->token(), $m);
        $this->assertSame((string) getmypid(), $m[2], 'the PHP process owns the token, not the command');
        $this->assertTrue($lock->isHeld());
        $this->assertSame($lockDir, $lock->dir());
        $status = Tool::status($lockDir);
        $this->assertSame('held', $status['state']);
        $this->assertSame($lock->token(), $status['token']);
        $this->assertSame(getmypid(), $status['pid']);

        $lock->release();
        $this->assertFalse($lock->isHeld());
        $this->assertLockFree($lockDir);
        $lock->release();  // a second release changes nothing
        $this->assertLockFree($lockDir);
    }

    public function testASecondProcessFindsTheLockBusyOrTimesOutWhileHeldAndGetsItAfterRelease(): void
    {
        $lockDir = "$this->dir/a.lock";
        $lock = Lock::acquire($lockDir);
        $child = Child::start(function (Channel $ch) use ($lockDir): void {
            $ch->send(Lock::tryAcquire($lockDir) === null ? 'tryAcquire: null' : 'tryAcquire: acquired');
            try {
                Lock::acquire($lockDir, ['wait' => 0]);
                $ch->send('wait 0: acquired');
            } catch (Exception $e) {
                $ch->send('wait 0: ' . get_class($e) . ' ' . $e->getError() . ' ' . $e->getCode());
            }
            $start = microtime(true);
            try {
                Lock::acquire($lockDir, ['wait' => 0.3]);
                $ch->send('wait 0.3: acquired');
            } catch (Exception $e) {
                $ch->send('wait 0.3: ' . get_class($e) . ' ' . $e->getError() . ' ' . $e->getCode());
                $ch->send(sprintf('waited %.3f', microtime(true) - $start));
                $ch->send($e->getMessage());
            }
            $ch->receive();  // released
            $mine = Lock::acquire($lockDir, ['wait' => 10]);
            $ch->send('acquired ' . $mine->token());
            $ch->receive();  // seen
            $mine->release();
            $ch->send('released');
        });

        $this->assertSame('tryAcquire: null', $child->channel->receive());
        $this->assertSame('wait 0: ' . BusyException::class . ' busy 1', $child->channel->receive());
        $this->assertSame('wait 0.3: ' . TimeoutException::class . ' timed_out 1', $child->channel->receive());
        $waited = (float) substr($child->channel->receive(), 7);
        $this->assertGreaterThanOrEqual(0.25, $waited);
        $this->assertLessThan(5.0, $waited);
        $this->assertStringContainsString($lockDir, $child->channel->receive(), 'the message names the lock');
        $this->assertSame($lock->token(), Tool::status($lockDir)['token'], 'the holder kept the lock');

        $lock->release();
        $child->channel->send('released');
        $line = $child->channel->receive();
        $this->assertStringStartsWith('acquired lockfile.', $line);
        $status = Tool::status($lockDir);
        $this->assertSame('held', $status['state']);
        $this->assertSame($child->pid, $status['pid']);
        $child->channel->send('seen');
        $this->assertSame('released', $child->channel->receive());
        $this->assertSame(0, $child->wait());
        $this->assertLockFree($lockDir);
    }

    public function testWithLockHoldsTheLockDuringTheCallableAndReleasesItAfterReturn(): void
    {
        $lockDir = "$this->dir/a.lock";
        $seen = null;
        $kept = null;
        $result = withLock($lockDir, function (Lock $lock) use ($lockDir, &$seen, &$kept) {
            $kept = $lock;
            $seen = Tool::status($lockDir);
            $this->assertSame($lock->token(), $seen['token']);
            return ['answer' => 42];
        });
        $this->assertSame(['answer' => 42], $result);
        $this->assertSame('held', $seen['state']);
        $this->assertSame(getmypid(), $seen['pid']);
        $this->assertFalse($kept->isHeld());
        $this->assertLockFree($lockDir);
    }

    public function testWithLockReleasesAfterAnExceptionWhichReachesTheCaller(): void
    {
        $lockDir = "$this->dir/a.lock";
        $thrown = new \DomainException('from the critical section');
        $kept = null;
        try {
            // Keeping the Lock alive shows that withLock released it, not
            // the destructor.
            withLock($lockDir, function (Lock $lock) use ($thrown, &$kept): void {
                $kept = $lock;
                throw $thrown;
            });
            $this->fail('withLock swallowed the exception');
        } catch (\DomainException $e) {
            $this->assertSame($thrown, $e);
        }
        $this->assertFalse($kept->isHeld());
        $this->assertLockFree($lockDir);
    }

    public function testWithLockThrowsBusyWithoutCallingTheCallableWhenTheLockIsHeld(): void
    {
        $lockDir = "$this->dir/a.lock";
        $child = Child::start(function (Channel $ch) use ($lockDir): void {
            $lock = Lock::acquire($lockDir);
            $ch->send('held');
            $ch->receive();
            $lock->release();
        });
        $this->assertSame('held', $child->channel->receive());
        $called = false;
        try {
            withLock($lockDir, function () use (&$called): void {
                $called = true;
            }, ['wait' => 0]);
            $this->fail('withLock ran while another process held the lock');
        } catch (BusyException $e) {
            $this->assertSame('busy', $e->getError());
        }
        $this->assertFalse($called);
        $child->channel->send('done');
        $this->assertSame(0, $child->wait());
        $this->assertLockFree($lockDir);
    }

    public function testTheDestructorReleasesALockStillHeld(): void
    {
        $lockDir = "$this->dir/a.lock";
        $lock = Lock::acquire($lockDir);
        $this->assertSame('held', Tool::status($lockDir)['state']);
        unset($lock);
        $this->assertLockFree($lockDir);

        (function () use ($lockDir): void {
            Lock::acquire($lockDir);  // dropped at once
        })();
        $this->assertLockFree($lockDir);
    }

    public function testALockStillHeldWhenTheScriptEndsIsReleasedNotLeftToADeadOwner(): void
    {
        $lockDir = "$this->dir/a.lock";
        $script = "$this->dir/hold.php";
        file_put_contents($script, '<?php require ' . var_export(TOKENLOCK_TEST_MODULE, true) . ";\n"
            . '$GLOBALS["lock"] = Tokenlock\Lock::acquire(' . var_export($lockDir, true) . ");\n"
            . 'echo $GLOBALS["lock"]->token();' . "\n");
        $proc = proc_open([PHP_BINARY, $script], [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $token = stream_get_contents($pipes[1]);
        $err = stream_get_contents($pipes[2]);
        $this->assertSame(0, proc_close($proc), $err);
        $this->assertMatchesRegularExpression(self::TOKEN, $token);
        // Had it not been released, status would call the token stale
        // (owner gone) instead.
        $this->assertLockFree($lockDir);
    }

    public function testAForkedChildEndingDoesNotReleaseItsParentsLock(): void
    {
        $lockDir = "$this->dir/a.lock";
        $lock = Lock::acquire($lockDir);
        $child = Child::start(function (Channel $ch) use ($lock): void {
            // The child's copy of $lock is destroyed when it exits.
            $ch->send($lock->isHeld() ? 'copy held' : 'copy not held');
        });
        $this->assertSame('copy held', $child->channel->receive());
        $this->assertSame(0, $child->wait());

        $status = Tool::status($lockDir);
        $this->assertSame('held', $status['state']);
        $this->assertSame($lock->token(), $status['token']);
        $lock->release();  // would throw LockLostException had the child released it
        $this->assertLockFree($lockDir);
    }

    public function testALockTakenInAForkedChildIsTheChilds(): void
    {
        // The parent's identity is known before the fork; the child's lock
        // must still name the child.
        Lock::acquire("$this->dir/parent.lock")->release();
        $lockDir = "$this->dir/a.lock";
        $child = Child::start(function (Channel $ch) use ($lockDir): void {
            $lock = Lock::acquire($lockDir);
            $ch->send($lock->token());
            $ch->receive();
            $lock->refresh();
            $lock->release();
            $ch->send('released');
        });
        $token = $child->channel->receive();
        preg_match(self::TOKEN, $token, $m);
        $this->assertSame((string) $child->pid, $m[2]);
        $this->assertSame($token, Tool::status($lockDir)['token']);
        $child->channel->send('go');
        $this->assertSame('released', $child->channel->receive());
        $this->assertSame(0, $child->wait());
        $this->assertLockFree($lockDir);
    }

    public function testALockKeepsNoStateItDoesNotUse(): void
    {
        $names = array_map(fn (\ReflectionProperty $p) => $p->getName(), (new \ReflectionClass(Lock::class))->getProperties());
        sort($names);
        $this->assertSame(['dir', 'held', 'lease', 'ownerPid', 'path', 'slots', 'token'], $names);
    }

    public function testTheLockOfAKilledHolderIsTakenOverAtOnce(): void
    {
        $lockDir = "$this->dir/a.lock";
        $child = Child::start(function (Channel $ch) use ($lockDir): void {
            $lock = Lock::acquire($lockDir);
            $ch->send($lock->token());
            $ch->receive();  // never comes: killed
        });
        $token = $child->channel->receive();
        $this->assertSame($token, Tool::status($lockDir)['token']);
        $this->assertSame(128 + SIGKILL, $child->kill());

        $lock = Lock::tryAcquire($lockDir);
        $this->assertNotNull($lock, 'a dead owner\'s lock should be free to take at once');
        $this->assertNotSame($token, $lock->token());
        $lock->release();
    }

    public function testEightProcessesMakingFiftyWithLockIncrementsEachOfAPlainFileLoseNone(): void
    {
        $lockDir = "$this->dir/count.lock";
        $file = "$this->dir/count";
        $inside = "$this->dir/inside";
        file_put_contents($file, "0\n");
        $children = [];
        for ($i = 0; $i < 8; ++$i) {
            $children[] = Child::start(function (Channel $ch) use ($lockDir, $file, $inside): void {
                $ch->receive();  // go
                for ($n = 0; $n < 50; ++$n) {
                    withLock($lockDir, function () use ($file, $inside): void {
                        // Created exclusively: a second process inside fails here.
                        $mark = @fopen($inside, 'x');
                        if ($mark === false) {
                            throw new \RuntimeException('two processes were inside the critical section at once');
                        }
                        fclose($mark);
                        $value = (int) file_get_contents($file);
                        file_put_contents($file, ($value + 1) . "\n");
                        unlink($inside);
                    }, ['wait' => 60]);
                }
                $ch->send('done');
            });
        }
        foreach ($children as $child) {
            $child->channel->send('go');
        }
        foreach ($children as $child) {
            $this->assertSame('done', $child->channel->receive());
            $this->assertSame(0, $child->wait());
        }
        $this->assertSame("400\n", file_get_contents($file));
        $this->assertFileDoesNotExist($inside);
        $this->assertLockFree($lockDir);
    }

    public function testRefreshGivesANewTokenWithALaterExpiryThatReleases(): void
    {
        $lockDir = "$this->dir/a.lock";
        $lock = Lock::acquire($lockDir, ['lease' => 60]);
        $old = $lock->token();
        $new = $lock->refresh(600);
        $this->assertSame($new, $lock->token());
        $this->assertNotSame($old, $new);
        preg_match(self::TOKEN, $old, $a);
        preg_match(self::TOKEN, $new, $b);
        $this->assertGreaterThan((int) $a[1] + 500 * 1000000, (int) $b[1], 'the lease was extended by about 540 s');
        $this->assertSame($new, Tool::status($lockDir)['token']);
        $lock->release();
        $this->assertLockFree($lockDir);
    }

    public function testRefreshAfterATakeoverThrowsLockLostAndTheLockIsNoLongerHeld(): void
    {
        $lockDir = "$this->dir/a.lock";
        $lock = Lock::acquire($lockDir);
        Tool::breakToken($lockDir, $lock->token());
        try {
            $lock->refresh();
            $this->fail('refresh of a token that was taken over succeeded');
        } catch (LockLostException $e) {
            $this->assertSame('lock_lost', $e->getError());
            $this->assertSame(3, $e->getCode());
            $this->assertStringContainsString($lockDir, $e->getMessage());
        }
        $this->assertFalse($lock->isHeld());
        $this->assertLockFree($lockDir);
        $this->assertSame([], array_values(array_filter(self::tree($lockDir), fn ($n) => $n !== 'lockfile' && strpos($n, 'lockfile/') !== 0)), 'nothing but the free token is left');
        unset($lock);  // nothing left to release
        $this->assertLockFree($lockDir);
    }

    public function testReleaseAfterATakeoverThrowsLockLostAndLeavesTheNewHolderAlone(): void
    {
        $lockDir = "$this->dir/a.lock";
        $lock = Lock::acquire($lockDir);
        Tool::breakToken($lockDir, $lock->token());
        $next = Lock::acquire($lockDir, ['wait' => 0]);
        try {
            $lock->release();
            $this->fail('release of a token that was taken over succeeded');
        } catch (LockLostException $e) {
            $this->assertSame('lock_lost', $e->getError());
            $this->assertSame(3, $e->getCode());
            $this->assertStringContainsString($lock->token(), $e->getMessage());
        }
        $this->assertFalse($lock->isHeld());
        $this->assertSame($next->token(), Tool::status($lockDir)['token'], 'the new holder keeps the lock');
        $next->release();
        $this->assertLockFree($lockDir);
    }

    public function testWithLockReportsALockLostDuringTheCallable(): void
    {
        $lockDir = "$this->dir/a.lock";
        $this->expectException(LockLostException::class);
        try {
            withLock($lockDir, function (Lock $lock) use ($lockDir): string {
                Tool::breakToken($lockDir, $lock->token());
                return 'done';
            });
        } finally {
            $this->assertLockFree($lockDir);
        }
    }

    public function testAMissingParentDirectoryIsNotFoundAndCreatesNothing(): void
    {
        $lockDir = "$this->dir/missing/a.lock";
        try {
            Lock::acquire($lockDir);
            $this->fail('acquired a lock in a missing directory');
        } catch (Exception $e) {
            $this->assertSame('system', $e->getError());
            $this->assertSame(2, $e->getErrno());  // ENOENT
            $this->assertSame(66, $e->getCode());
            $this->assertStringContainsString("$this->dir/missing", $e->getMessage());
        }
        $this->assertSame([], self::tree($this->dir));
    }

    public function testAnUnknownOptionIsRefusedBeforeAnythingRuns(): void
    {
        $this->expectException(\InvalidArgumentException::class);
        $this->expectExceptionMessage("unknown option 'wiat'");
        try {
            Lock::acquire("$this->dir/a.lock", ['wiat' => 1]);
        } finally {
            $this->assertSame([], self::tree($this->dir));
        }
    }
}
