<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\BusyException;
use Tokenlock\DirSyncException;
use Tokenlock\Exception;
use Tokenlock\Lock;
use Tokenlock\TimeoutException;
use Tokenlock\Tests\Support\Channel;
use Tokenlock\Tests\Support\Child;
use Tokenlock\Tests\Support\TempDirTestCase;
use Tokenlock\Tests\Support\Tool;

use function Tokenlock\increment;
use function Tokenlock\readCounter;
use function Tokenlock\setLegacyTimeout;
use function Tokenlock\writeFile;

final class FileTest extends TempDirTestCase
{
    /**
     * A child process that holds $lockDir until the test sends it anything;
     * it then releases and says 'released'. Returns once the lock is held.
     */
    private function holdInChild(string $lockDir): Child
    {
        $child = Child::start(function (Channel $ch) use ($lockDir): void {
            $lock = Lock::acquire($lockDir);
            $ch->send('held');
            $ch->receive();
            $lock->release();
            $ch->send('released');
        });
        $this->assertSame('held', $child->channel->receive());
        return $child;
    }

    public function testIncrementCountsFromAMissingFileUnderFileDotLock(): void
    {
        $file = "$this->dir/hits.count";
        $this->assertSame(1, increment($file));
        $this->assertSame(6, increment($file, ['by' => 5]));
        $this->assertSame(6, increment($file, ['by' => 0]));
        $this->assertSame("6\n", file_get_contents($file));
        $this->assertDirectoryExists("$file.lock", 'the same lock as tokenlock incr and counter.cgi');
        $this->assertSame(6, readCounter($file));
        $this->assertNull(readCounter("$this->dir/none.count"));
        $this->assertNoTemporaryFiles($this->dir);
    }

    public function testIncrementUnderAnotherLockDirectory(): void
    {
        $file = "$this->dir/hits.count";
        $this->assertSame(1, increment($file, ['lock' => "$this->dir/shared.lock", 'sync' => 'file']));
        $this->assertDirectoryExists("$this->dir/shared.lock");
        $this->assertDirectoryDoesNotExist("$file.lock");
    }

    public function testIncrementFromEightProcessesHandsOutEveryValueOnce(): void
    {
        $file = "$this->dir/hits.count";
        $children = [];
        for ($i = 0; $i < 8; ++$i) {
            // Half give a wait budget, so that the command's -w is
            // exercised under contention too.
            $options = $i % 2 === 0 ? ['sync' => 'none'] : ['sync' => 'none', 'wait' => 60];
            $children[] = Child::start(function (Channel $ch) use ($file, $options): void {
                $ch->receive();  // go
                $values = [];
                for ($n = 0; $n < 50; ++$n) {
                    $values[] = increment($file, $options);
                }
                $ch->send(implode(',', $values));
            });
        }
        foreach ($children as $child) {
            $child->channel->send('go');
        }
        $all = [];
        foreach ($children as $child) {
            $values = array_map('intval', explode(',', $child->channel->receive()));
            $this->assertCount(50, $values);
            $this->assertSame($values, array_values(array_unique($values)));
            $sorted = $values;
            sort($sorted);
            $this->assertSame($sorted, $values, 'each process sees its values grow');
            $all = array_merge($all, $values);
            $this->assertSame(0, $child->wait());
        }
        sort($all);
        $this->assertSame(range(1, 400), $all);
        $this->assertSame("400\n", file_get_contents($file));
        $this->assertNoTemporaryFiles($this->dir);
        $this->assertLockFree("$file.lock");
    }

    public function testACorruptCounterThrowsCorruptDataAndIsLeftAsItIs(): void
    {
        $file = "$this->dir/hits.count";
        file_put_contents($file, "garbage\n");
        $before = self::tree($this->dir);
        try {
            increment($file);
            $this->fail('a corrupt counter was incremented');
        } catch (Exception $e) {
            $this->assertSame('corrupt_data', $e->getError());
            $this->assertSame(65, $e->getCode());
            $this->assertStringContainsString($file, $e->getMessage());
            $this->assertStringContainsString('left as it is', $e->getMessage());
        }
        $this->assertSame("garbage\n", file_get_contents($file));
        $this->assertNoTemporaryFiles($this->dir);
        $this->assertLockFree("$file.lock");
        $this->assertSame($before, array_values(array_filter(self::tree($this->dir), fn ($n) => strpos($n, 'hits.count.lock') !== 0)));

        try {
            readCounter($file);
            $this->fail('readCounter accepted a corrupt counter');
        } catch (Exception $e) {
            $this->assertSame('corrupt_data', $e->getError());
            $this->assertStringContainsString($file, $e->getMessage());
        }
    }

    /** @return array<string, array{0: string}> */
    public function corruptCounters(): array
    {
        return [
            'empty' => [''],
            'no newline' => ['5'],
            'leading zero' => ["05\n"],
            'sign' => ["+5\n"],
            'space' => [" 5\n"],
            'two lines' => ["5\n6\n"],
            'above 2^64-1' => ["18446744073709551616\n"],
        ];
    }

    /** @dataProvider corruptCounters */
    public function testEveryNonCanonicalCounterIsRefusedByBothReadAndIncrement(string $contents): void
    {
        $file = "$this->dir/c.count";
        file_put_contents($file, $contents);
        foreach (['increment' => fn () => increment($file), 'readCounter' => fn () => readCounter($file)] as $what => $call) {
            try {
                $call();
                $this->fail("$what accepted " . json_encode($contents));
            } catch (Exception $e) {
                $this->assertSame('corrupt_data', $e->getError(), $what);
            }
        }
        $this->assertSame($contents, file_get_contents($file));
        $this->assertNoTemporaryFiles($this->dir);
    }

    public function testAFifoAtTheCounterPathIsRefusedNotWaitedOn(): void
    {
        if (!function_exists('posix_mkfifo')) {
            $this->markTestSkipped('the posix extension (posix_mkfifo) is not loaded');
        }
        $file = "$this->dir/c.count";
        $this->assertTrue(posix_mkfifo($file, 0600));
        try {
            readCounter($file);
            $this->fail('readCounter read a FIFO');
        } catch (Exception $e) {
            $this->assertSame('system', $e->getError());
            $this->assertSame(22, $e->getErrno());
            $this->assertStringContainsString($file, $e->getMessage());
        }
        $this->assertSame(0010000, lstat($file)['mode'] & 0170000, 'the FIFO was left as it was');
        unlink($file);
    }

    public function testAnOverflowIsRefusedAndValuesBeyondPhpIntMaxComeAsStrings(): void
    {
        $file = "$this->dir/c.count";
        file_put_contents($file, PHP_INT_MAX . "\n");
        $this->assertSame('9223372036854775808', increment($file));
        $this->assertSame('9223372036854775808', readCounter($file));

        file_put_contents($file, "18446744073709551615\n");
        $this->assertSame('18446744073709551615', readCounter($file));
        try {
            increment($file);
            $this->fail('the counter overflowed');
        } catch (Exception $e) {
            $this->assertSame('system', $e->getError());
            $this->assertSame(75, $e->getErrno());  // EOVERFLOW
            $this->assertSame(65, $e->getCode());
        }
        $this->assertSame("18446744073709551615\n", file_get_contents($file));
        $this->assertNoTemporaryFiles($this->dir);
    }

    public function testIncrementKeepsItsWaitBudgetWhileAnotherProcessHoldsTheLock(): void
    {
        $file = "$this->dir/c.count";
        file_put_contents($file, "7\n");
        $child = $this->holdInChild("$file.lock");

        $start = microtime(true);
        try {
            increment($file, ['wait' => 0.3]);
            $this->fail('incremented under another process\'s lock');
        } catch (TimeoutException $e) {
            $this->assertSame('timed_out', $e->getError());
            $this->assertSame(1, $e->getCode());
            $this->assertStringContainsString('timed out', $e->getMessage());
            $this->assertSame([], $e->getCommandLine(), 'the increment waited itself, starting no process');
        }
        $waited = microtime(true) - $start;
        $this->assertGreaterThanOrEqual(0.3, $waited);
        $this->assertLessThan(5.0, $waited, 'the budget, not the command\'s 10 s, bounds the wait');
        $start = microtime(true);
        try {
            increment($file, ['wait' => 0]);
            $this->fail('incremented under another process\'s lock');
        } catch (BusyException $e) {
            $this->assertSame('busy', $e->getError());
            $this->assertSame(1, $e->getCode());
        }
        $this->assertLessThan(5.0, microtime(true) - $start);
        $this->assertSame("7\n", file_get_contents($file));
        $this->assertNoTemporaryFiles($this->dir);

        $child->channel->send('release');
        $this->assertSame('released', $child->channel->receive());
        $this->assertSame(0, $child->wait());
        $this->assertSame(8, increment($file, ['wait' => 0]));
    }

    public function testIncrementWithABudgetTakesOverTheLockOfAKilledHolder(): void
    {
        $file = "$this->dir/c.count";
        $child = Child::start(function (Channel $ch) use ($file): void {
            Lock::acquire("$file.lock");
            $ch->send('held');
            $ch->receive();  // never comes: killed
        });
        $this->assertSame('held', $child->channel->receive());
        $child->kill();
        $this->assertSame(1, increment($file, ['wait' => 1]));
    }

    public function testIncrementWithoutALimitWaitsForTheHolder(): void
    {
        $file = "$this->dir/c.count";
        $holder = $this->holdInChild("$file.lock");
        $waiter = Child::start(function (Channel $ch) use ($file): void {
            $ch->send('waiting');
            $value = increment($file, ['wait' => null]);
            $ch->send(file_exists("$file.released") ? "counted $value after the release" : "counted $value under the holder's lock");
        });
        $this->assertSame('waiting', $waiter->channel->receive());
        touch("$file.released");
        $holder->channel->send('release');
        $this->assertSame('released', $holder->channel->receive());
        $this->assertSame('counted 1 after the release', $waiter->channel->receive());
        $this->assertSame(0, $waiter->wait());
        $this->assertSame(0, $holder->wait());
        $this->assertSame(2, increment($file, ['wait' => 1e12]), 'a wait beyond a year is a year');
    }

    /**
     * Each commit into a directory that cannot be flushed is made, then
     * reported as dir_sync_failed; the count is made, so the exception
     * carries it.
     */
    public function testAnUnflushableDirectoryStillCommitsAndHandsOutTheCount(): void
    {
        $drop = $this->unflushableDirectory('drop');
        $options = ['command' => $this->commandWithoutPrivileges()];
        foreach ([1, 2] as $n) {
            try {
                increment("$drop/c.count", $options);
                $this->fail('increment did not report the failed flush');
            } catch (DirSyncException $e) {
                $this->assertSame('dir_sync_failed', $e->getError());
                $this->assertSame(74, $e->getCode());
                $this->assertSame($n, $e->getValue(), 'the value it counted');
                $this->assertStringContainsString("sync $drop/c.count: the update is committed, but flushing the directory $drop failed", $e->getMessage());
                $this->assertStringContainsString("give this user read permission on $drop", $e->getMessage());
            }
        }
        try {
            writeFile("$drop/page", "new\n", $options);
            $this->fail('writeFile did not report the failed flush');
        } catch (DirSyncException $e) {
            $this->assertSame('dir_sync_failed', $e->getError());
            $this->assertNull($e->getValue());
            $this->assertStringContainsString('the new contents are in place', $e->getMessage());
        }
        chmod($drop, 0755);
        $this->assertSame("2\n", file_get_contents("$drop/c.count"));
        $this->assertSame("new\n", file_get_contents("$drop/page"));
        $this->assertNoTemporaryFiles($drop);
        $this->assertLockFree("$drop/c.count.lock");
    }

    /**
     * A token of the deployed Perl rename lock, 30 s old: held under the
     * default timeout of 60 s, stale under one of 10 s.
     */
    public function testALegacyTokenIsWaitedForUntilTheTimeoutTheModuleSets(): void
    {
        $file = "$this->dir/c.count";
        $lockDir = "$file.lock";
        mkdir($lockDir);
        $legacy = 'lockfile' . (time() - 30);
        mkdir("$lockDir/$legacy");
        try {
            increment($file, ['wait' => 0]);
            $this->fail('a legacy token 30 s old was not waited for');
        } catch (BusyException $e) {
            $this->assertStringContainsString('legacy rename lock', $e->getMessage());
        }
        $this->assertNull(Lock::tryAcquire($lockDir));
        $this->assertSame([$legacy], array_values(array_diff(scandir($lockDir), ['.', '..'])));
        $this->assertFileDoesNotExist($file);
        foreach ([0, -1, NAN] as $bad) {
            try {
                setLegacyTimeout($bad);
                $this->fail("setLegacyTimeout($bad) was accepted");
            } catch (\InvalidArgumentException $e) {
                $this->assertStringContainsString('more than 0 seconds', $e->getMessage());
            }
        }
        setLegacyTimeout(10);
        try {
            $this->assertSame(1, increment($file, ['wait' => 0]));
            $this->assertSame(['lockfile'], array_values(array_diff(scandir($lockDir), ['.', '..'])));
            // An acquire takes over such a token as well.
            rename("$lockDir/lockfile", "$lockDir/$legacy");
            $lock = Lock::tryAcquire($lockDir);
            $this->assertNotNull($lock);
            $lock->release();
        } finally {
            setLegacyTimeout(null);
        }
        $this->assertSame(['lockfile'], array_values(array_diff(scandir($lockDir), ['.', '..'])));
        $this->assertNoTemporaryFiles($this->dir);
    }

    public function testWriteFileReplacesTheContentsAndLeavesNoTemporaryFile(): void
    {
        $file = "$this->dir/config.json";
        writeFile($file, "{\"v\":1}\n");
        $this->assertSame("{\"v\":1}\n", file_get_contents($file));
        writeFile($file, "{\"v\":2}\n", ['sync' => 'none']);
        $this->assertSame("{\"v\":2}\n", file_get_contents($file));
        writeFile($file, '', ['sync' => 'file']);
        $this->assertSame('', file_get_contents($file), 'empty data makes an empty file');
        $this->assertSame(['config.json'], self::tree($this->dir));
    }

    public function testWriteFileSetsTheModeOfANewFileAndCanHoldALock(): void
    {
        $file = "$this->dir/secret";
        writeFile($file, "x\n", ['mode' => 0600, 'lock' => "$this->dir/secret.lock"]);
        $this->assertSame(0600, fileperms($file) & 0777);
        $this->assertSame("x\n", file_get_contents($file));
        $this->assertLockFree("$this->dir/secret.lock");
        $this->assertNoTemporaryFiles($this->dir);
    }

    public function testReadersNeverSeeAHalfWrittenFile(): void
    {
        $file = "$this->dir/data";
        $a = str_repeat('A', 1 << 20);
        $b = str_repeat('B', 1 << 20);
        writeFile($file, $a, ['sync' => 'none']);
        $writer = Child::start(function (Channel $ch) use ($file, $a, $b): void {
            for ($i = 0; $i < 40; ++$i) {
                writeFile($file, $i % 2 === 0 ? $b : $a, ['sync' => 'none']);
            }
            $ch->send('done');
        });
        $reads = 0;
        $seen = ['A' => 0, 'B' => 0];
        $done = false;
        while (!$done) {
            $contents = file_get_contents($file);
            $this->assertTrue($contents === $a || $contents === $b, 'read ' . strlen((string) $contents) . ' bytes that are neither version');
            ++$seen[$contents[0]];
            ++$reads;
            if ($writer->channel->ready()) {
                $this->assertSame('done', $writer->channel->receive());
                $done = true;
            }
        }
        $this->assertSame(0, $writer->wait());
        $this->assertSame($a, file_get_contents($file), 'the last version written');
        $this->assertGreaterThan(1, $reads);
        $this->assertSame(['data'], self::tree($this->dir));
    }

    public function testWriteFileIntoAMissingDirectoryFailsAndCreatesNothing(): void
    {
        $file = "$this->dir/missing/out";
        try {
            writeFile($file, "x\n");
            $this->fail('wrote into a missing directory');
        } catch (Exception $e) {
            $this->assertSame('system', $e->getError());
            $this->assertSame(2, $e->getErrno());  // ENOENT
            $this->assertSame(66, $e->getCode());
            $this->assertStringContainsString("$this->dir/missing", $e->getMessage());
        }
        $this->assertSame([], self::tree($this->dir));
    }

    public function testWriteFileOverADirectoryFailsAndLeavesIt(): void
    {
        mkdir("$this->dir/target");
        file_put_contents("$this->dir/target/inside", "kept\n");
        try {
            writeFile("$this->dir/target", "x\n");
            $this->fail('replaced a directory');
        } catch (Exception $e) {
            $this->assertSame('system', $e->getError());
            $this->assertSame(21, $e->getErrno());  // EISDIR
            $this->assertStringContainsString("$this->dir/target", $e->getMessage());
        }
        $this->assertSame("kept\n", file_get_contents("$this->dir/target/inside"));
        $this->assertSame(['target', 'target/inside'], self::tree($this->dir));
    }

    public function testWriteFileWithALockHeldElsewhereTimesOutAndLeavesTheFile(): void
    {
        $file = "$this->dir/f";
        file_put_contents($file, "old\n");
        $child = $this->holdInChild("$file.lock");
        try {
            // The command waits 10 s for a lock it is to hold while writing.
            writeFile($file, "new\n", ['lock' => "$file.lock"]);
            $this->fail('wrote under another process\'s lock');
        } catch (TimeoutException $e) {
            $this->assertSame('timed_out', $e->getError());
        }
        $this->assertSame("old\n", file_get_contents($file));
        $this->assertNoTemporaryFiles($this->dir);
        $child->channel->send('release');
        $this->assertSame(0, $child->wait());
    }

    public function testWriteFileKeepsItsWaitBudgetForALockHeldElsewhere(): void
    {
        $file = "$this->dir/f";
        file_put_contents($file, "old\n");
        $child = $this->holdInChild("$file.lock");

        $start = microtime(true);
        try {
            writeFile($file, "new\n", ['lock' => "$file.lock", 'wait' => 0.3]);
            $this->fail('wrote under another process\'s lock');
        } catch (TimeoutException $e) {
            $this->assertSame('timed_out', $e->getError());
            $this->assertSame(1, $e->getCode());
        }
        $waited = microtime(true) - $start;
        $this->assertGreaterThanOrEqual(0.3, $waited);
        $this->assertLessThan(5.0, $waited, 'the budget, not the command\'s 10 s, bounds the wait');
        try {
            writeFile($file, "new\n", ['lock' => "$file.lock", 'wait' => 0]);
            $this->fail('wrote under another process\'s lock');
        } catch (BusyException $e) {
            $this->assertSame('busy', $e->getError());
            $this->assertSame(1, $e->getCode());
        }
        $this->assertSame("old\n", file_get_contents($file));
        $this->assertNoTemporaryFiles($this->dir);

        $child->channel->send('release');
        $this->assertSame('released', $child->channel->receive());
        $this->assertSame(0, $child->wait());
        writeFile($file, "new\n", ['lock' => "$file.lock", 'wait' => 0]);
        $this->assertSame("new\n", file_get_contents($file));
        $this->assertNoTemporaryFiles($this->dir);
    }
}
