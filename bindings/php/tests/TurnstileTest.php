<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\Lock;
use Tokenlock\Native;
use Tokenlock\TimeoutException;
use Tokenlock\Tests\Support\Channel;
use Tokenlock\Tests\Support\Child;
use Tokenlock\Tests\Support\TempDirTestCase;

/**
 * The turnstile of docs/waiting-turnstile.md: waiters line up in
 * D/turnstile and the lock passes fairly; whatever is planted at that name
 * costs latency only, within a bound, and is left exactly as it was.
 */
final class TurnstileTest extends TempDirTestCase
{
    /** A freed lock is taken within this, whatever is at D/turnstile (own look every 100 ms, a loaded machine). */
    private const TAKEN_WITHIN_S = 0.6;
    private const BUDGET_S = 0.3;

    protected function setUp(): void
    {
        parent::setUp();
        if (!in_array(Native::fsType($this->dir), ['ext2', 'ext3', 'ext4', 'xfs', 'btrfs', 'tmpfs', 'overlay', 'zfs', 'f2fs'], true)) {
            $this->markTestSkipped("$this->dir is not on a local filesystem: waiters poll there");
        }
    }

    public function testEightProcessesLineUpAndTakeTheLockInFairTurnsWithAnExactCounter(): void
    {
        $lockDir = "$this->dir/a.lock";
        $counter = "$this->dir/counter";
        file_put_contents($counter, '0');
        $children = [];
        for ($i = 0; $i < 8; ++$i) {
            $children[] = Child::start(function (Channel $ch) use ($lockDir, $counter): void {
                $until = (int) $ch->receive();
                $n = 0;
                while (hrtime(true) < $until) {
                    $lock = Lock::acquire($lockDir, ['wait' => 60]);
                    $value = (int) file_get_contents($counter);
                    file_put_contents("$counter.tmp", (string) ($value + 1));
                    rename("$counter.tmp", $counter);
                    $lock->release();
                    ++$n;
                }
                $ch->send((string) $n);
            });
        }
        $until = hrtime(true) + 4000000000;
        foreach ($children as $child) {
            $child->channel->send((string) $until);
        }
        $ops = [];
        foreach ($children as $child) {
            $ops[] = (int) $child->channel->receive();
            $this->assertSame(0, $child->wait());
        }
        $total = array_sum($ops);
        $this->assertSame($total, (int) file_get_contents($counter), 'every increment under the lock counted once');
        $this->assertGreaterThanOrEqual(400, $total, 'enough operations to judge fairness: ' . implode(' ', $ops));
        $jain = $total ** 2 / (count($ops) * array_sum(array_map(fn (int $x) => $x * $x, $ops)));
        $this->assertGreaterThanOrEqual(0.8, $jain, 'Jain\'s index of operations per process: ' . implode(' ', $ops));
        fwrite(STDERR, sprintf("\n[turnstile] 8 processes, 4 s: %d operations, Jain %.3f (%s)\n", $total, $jain, implode(' ', $ops)));
        $this->assertTurnstileAtRest($lockDir);
        $this->assertLockFree($lockDir);
    }

    public function testAWaiterWhoseRequestEndsWhileHeadLeavesTheTurnstileUnlockedAndUnmarked(): void
    {
        $lockDir = "$this->dir/a.lock";
        $lock = Lock::acquire($lockDir);
        $child = Child::start(function (Channel $ch) use ($lockDir): void {
            pcntl_async_signals(true);
            pcntl_signal(SIGUSR1, function (): void {
                exit(3);
            });
            // Runs after every other shutdown function, the module's too.
            register_shutdown_function(function () use ($ch, $lockDir): void {
                register_shutdown_function(function () use ($ch, $lockDir): void {
                    $fp = fopen("$lockDir/turnstile", 'r');
                    clearstatcache();
                    $ch->send((flock($fp, LOCK_EX | LOCK_NB) ? 'unlocked' : 'locked') . ' ' . filesize("$lockDir/turnstile"));
                });
            });
            Lock::acquire($lockDir, ['wait' => 60]);
            $ch->send('acquired');  // never: the parent holds the lock
        });
        // Head and hungry: the mark is set, and the turnstile's flock is taken.
        $this->waitFor(function () use ($lockDir): bool {
            clearstatcache();
            return @filesize("$lockDir/turnstile") === 1;
        }, 'the waiter to become the hungry head');
        posix_kill($child->pid, SIGUSR1);
        $this->assertSame('unlocked 0', $child->channel->receive());
        $this->assertSame(3, $child->wait());
        $fp = fopen("$lockDir/turnstile", 'r');
        $this->assertTrue(flock($fp, LOCK_EX | LOCK_NB), 'no flock outlives the request');
        $lock->release();
        $this->assertLockFree($lockDir);
    }

    public function testTheTurnstileOfAGroupSharedLockIsForItsOwnerAndThatGroupAlone(): void
    {
        $gid = posix_getegid();
        $groups = array_values(array_diff(posix_getgroups() ?: [], [$gid]));
        $named = $groups[0] ?? $gid;
        $lockDir = "$this->dir/a.lock";
        $lock = Lock::acquire($lockDir, ['group' => $named]);
        $child = Child::start(function (Channel $ch) use ($lockDir, $named): void {
            Lock::acquire($lockDir, ['wait' => 30, 'group' => $named])->release();
            $ch->send('done');
        });
        $this->waitFor(fn (): bool => file_exists("$lockDir/turnstile"), 'the waiter to make the turnstile');
        $lock->release();
        $this->assertSame('done', $child->channel->receive());
        $this->assertSame(0, $child->wait());
        clearstatcache();
        $st = lstat("$lockDir/turnstile");
        $this->assertSame(0100660, $st['mode'], 'group-shared: 0660 exactly, whatever the umask');
        $this->assertSame($named, $st['gid'], 'in the group chosen for sharing');
        $this->assertSame(0, $st['size']);
        $this->assertNull(\Tokenlock\holder($lockDir, ['group' => $named]), 'the lock is free');
    }

    /** @return iterable<string, array{0: string}> */
    public static function hostileCases(): iterable
    {
        foreach (['symlink', 'dangling symlink', 'fifo', 'directory', 'hard link', 'file of another user', 'held for ever', 'hungry mark of a dead head'] as $case) {
            yield $case => [$case];
        }
    }

    /** @dataProvider hostileCases */
    public function testWhateverIsAtTheTurnstileTheFreedLockIsTakenInTimeAndTheBudgetKept(string $case): void
    {
        $lockDir = "$this->dir/a.lock";
        Lock::acquire($lockDir)->release();
        $victim = "$this->dir/victim";
        file_put_contents($victim, 'victim');
        touch($victim, 1000000000);
        // Held first: a newcomer would take a hungry head's place and clear its mark.
        $owner = $this->holdInChild($lockDir);
        $holder = $this->plant($case, $lockDir, $victim);
        clearstatcache();
        $planted = lstat("$lockDir/turnstile");

        // A lock never released within the budget: the waiter gives up in time.
        $start = hrtime(true);
        $took = 0.0;
        try {
            Lock::acquire($lockDir, ['wait' => self::BUDGET_S]);
            $this->fail('acquired a held lock');
        } catch (TimeoutException $e) {
            $this->assertStringContainsString('timed out', $e->getMessage());
            $took = (hrtime(true) - $start) / 1e9;
            $this->assertGreaterThanOrEqual(self::BUDGET_S, $took);
            $this->assertLessThan(self::BUDGET_S + self::TAKEN_WITHIN_S, $took, 'the budget was kept');
        }
        if ($case === 'hungry mark of a dead head') {
            $this->assertSame(0, filesize("$lockDir/turnstile"), 'the head that gave up cleared the mark');
            file_put_contents("$lockDir/turnstile", 'x');
        }
        // A lock released while this process waits: taken within the bound.
        $owner->channel->send('release');
        $lock = Lock::acquire($lockDir, ['wait' => 30]);
        $taken = hrtime(true);
        $released = (int) $owner->channel->receive();
        $this->assertSame(0, $owner->wait());
        $this->assertLessThan(self::TAKEN_WITHIN_S, ($taken - $released) / 1e9, "$case: the freed lock was taken in time");
        fwrite(STDERR, sprintf("\n[turnstile] %s: budget kept in %.0f ms of %.0f; freed lock taken after %.1f ms\n", $case, $took * 1000, self::BUDGET_S * 1000, ($taken - $released) / 1e6));
        $lock->release();
        $this->assertLockFree($lockDir);

        clearstatcache();
        $after = lstat("$lockDir/turnstile");
        $this->assertSame([$planted['ino'], $planted['mode'], $planted['nlink'], $planted['uid']], [$after['ino'], $after['mode'], $after['nlink'], $after['uid']], "$case: left as it was");
        $this->assertSame($case === 'hungry mark of a dead head' ? 0 : $planted['size'], $after['size']);
        $this->assertSame('victim', file_get_contents($victim));
        $this->assertSame(1000000000, filemtime($victim), 'the victim was not written');
        $this->assertFileDoesNotExist("$this->dir/nothing-here", 'nothing was created through a link');
        $this->assertSame(['lockfile', 'turnstile'], array_values(array_diff(scandir($lockDir), ['.', '..'])));
        if ($holder !== null) {
            $holder->kill();
        }
    }

    /** Puts CASE at LOCKDIR/turnstile; a process holding it flocked, if that is the case. */
    private function plant(string $case, string $lockDir, string $victim): ?Child
    {
        $path = "$lockDir/turnstile";
        switch ($case) {
            case 'symlink':
                symlink($victim, $path);
                return null;
            case 'dangling symlink':
                symlink("$this->dir/nothing-here", $path);
                return null;
            case 'fifo':
                posix_mkfifo($path, 0600);
                return null;
            case 'directory':
                mkdir($path, 0700);
                return null;
            case 'hard link':
                link($victim, $path);
                return null;
            case 'file of another user':
                if (posix_geteuid() !== 0) {
                    $this->markTestSkipped('planting a file of another user needs root');
                }
                touch($path);
                chmod($path, 0600);
                chown($path, 65534);
                return null;
            case 'hungry mark of a dead head':
                file_put_contents($path, 'x');
                chmod($path, 0600);
                return null;
        }
        touch($path);
        chmod($path, 0600);
        $holder = Child::start(function (Channel $ch) use ($path): void {
            $fp = fopen($path, 'r');
            flock($fp, LOCK_EX);
            $ch->send('locked');
            $ch->receive();
        });
        $this->assertSame('locked', $holder->channel->receive());
        return $holder;
    }

    /** A process holding LOCKDIR until told 'release'; it releases 250 ms later and answers the hrtime of its release. */
    private function holdInChild(string $lockDir): Child
    {
        $child = Child::start(function (Channel $ch) use ($lockDir): void {
            $lock = Lock::acquire($lockDir, ['wait' => 30]);
            $ch->send('held');
            $ch->receive();
            // Released while the other process is well into its wait, not
            // before its first look (the release time is what is measured).
            usleep(250000);
            $lock->release();
            $ch->send((string) hrtime(true));
        });
        $this->assertSame('held', $child->channel->receive());
        return $child;
    }

    private function assertTurnstileAtRest(string $lockDir): void
    {
        clearstatcache();
        $st = lstat("$lockDir/turnstile");
        $this->assertSame(0100600, $st['mode'], 'a regular file for its owner alone');
        $this->assertSame(0, $st['size'], 'no hungry mark is left');
        $fp = fopen("$lockDir/turnstile", 'r');
        $this->assertTrue(flock($fp, LOCK_EX | LOCK_NB), 'nobody is left holding it');
    }

    /** Waits, at most 10 s, until CONDITION holds. */
    private function waitFor(callable $condition, string $what): void
    {
        $until = hrtime(true) + 10000000000;
        while (!$condition()) {
            $this->assertLessThan($until, hrtime(true), "timed out waiting for $what");
            usleep(1000);
        }
    }
}
