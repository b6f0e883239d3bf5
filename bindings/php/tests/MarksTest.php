<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\BusyException;
use Tokenlock\Lock;
use Tokenlock\Native;
use Tokenlock\Tests\Support\Channel;
use Tokenlock\Tests\Support\Child;
use Tokenlock\Tests\Support\TempDirTestCase;
use Tokenlock\Tests\Support\Tool;

/**
 * Owner marks, as made on filesystems where a rename can move a name that
 * is gone (GlusterFS). They are forced here on a local disk, where the
 * module would not make them, and the double rename is played by planting
 * the mark another holder would have made.
 */
final class MarksTest extends TempDirTestCase
{
    private int $n = 0;

    protected function tearDown(): void
    {
        Native::$ownerMarks = [];
        parent::tearDown();
    }

    private function fresh(): string
    {
        $lockDir = "$this->dir/l" . ++$this->n . '.lock';
        Native::$ownerMarks[$lockDir] = true;
        return $lockDir;
    }

    private static function markOf(string $token): string
    {
        return 'h.' . substr($token, 9);
    }

    /** @return list<string> */
    private static function names(string $dir): array
    {
        $names = array_values(array_diff(scandir($dir), ['.', '..']));
        sort($names);
        return $names;
    }

    private static function nowUs(): int
    {
        return (int) (microtime(true) * 1e6);
    }

    /** A token naming this live process, its lease running for ten minutes. */
    private function liveToken(): string
    {
        $probe = Lock::acquire("$this->dir/probe.lock");
        $tag = explode('.', $probe->token())[2];
        $probe->release();
        $stat = file_get_contents('/proc/self/stat');
        $start = preg_split('/ +/', trim(substr($stat, strrpos($stat, ')') + 1)))[19];
        return 'lockfile.' . (self::nowUs() + 600000000) . ".$tag." . getmypid() . ".$start.0123456789abcdef";
    }

    public function testALockOnThisLocalFilesystemGetsNoMarks(): void
    {
        $this->assertFalse(Native::needsMarks("$this->dir/local.lock"));
        $lock = Lock::acquire("$this->dir/local.lock");
        $this->assertSame([], self::names("$this->dir/local.lock/" . $lock->token()));
        $lock->release();
    }

    public function testTheFilesystemTypeIsFoundByDeviceNumberElseByTheLongestMountPoint(): void
    {
        mkdir("$this->dir/mnt");
        mkdir("$this->dir/mnt/in dir");
        $escaped = str_replace(' ', '\\040', $this->dir);
        file_put_contents("$this->dir/mountinfo", "1 0 999:1 / / rw - ext4 /dev/x rw\n"
            . "2 1 999:2 / $escaped/mnt rw shared:1 - fuse.glusterfs srv:/vol rw\n"
            . "3 1 999:3 / $escaped/mn rw - nfs4 srv:/x rw\n");
        $this->assertSame('fuse.glusterfs', Native::fsType("$this->dir/mnt/in dir", "$this->dir/mountinfo"), 'the longest mount point holding the path');
        $this->assertSame('ext4', Native::fsType($this->dir, "$this->dir/mountinfo"), 'a path under no other mount point: the root\'s');
        $this->assertNull(Native::fsType("$this->dir/nothing-here", "$this->dir/mountinfo"), 'a missing path: unknown');
        $this->assertNull(Native::fsType($this->dir, "$this->dir/no-table"), 'no mount table: unknown');
        $dev = stat($this->dir)['dev'];
        $id = ((($dev >> 8) & 0xfff) | (($dev >> 32) & ~0xfff)) . ':' . (($dev & 0xff) | (($dev >> 12) & ~0xff));
        file_put_contents("$this->dir/mountinfo2", "1 0 999:1 / / rw - ext4 /dev/x rw\n2 1 $id / /elsewhere rw - xfs /dev/y rw\n");
        $this->assertSame('xfs', Native::fsType("$this->dir/mnt", "$this->dir/mountinfo2"), 'the device number first');
    }

    public function testAHolderMarksItsTokenRenamesTheMarkOnRefreshAndRemovesItOnRelease(): void
    {
        $lockDir = $this->fresh();
        $lock = Lock::acquire($lockDir, ['wait' => 0]);
        $t = $lock->token();
        $this->assertSame([self::markOf($t)], self::names("$lockDir/$t"), 'the holder\'s mark is in its token');
        $t2 = $lock->refresh(100);
        $this->assertSame([self::markOf($t2)], self::names("$lockDir/$t2"), 'a refresh renames it to the new lease');
        [$status, , $err] = Tool::run(['acquire', '-n', $lockDir]);
        $this->assertSame(1, $status, 'the command is excluded as before: ' . $err);
        $lock->release();
        $this->assertSame(['lockfile'], self::names($lockDir), 'released');
        $this->assertSame([], self::names("$lockDir/lockfile"), 'without its mark');
    }

    public function testAnotherLiveHoldersMarkInTheTokenMakesItStepBackAndHandTheTokenBack(): void
    {
        $lockDir = $this->fresh();
        Lock::acquire($lockDir, ['wait' => 0])->release();
        // As if another client renamed the same directory first and marked
        // it: its owner is this process (alive), its lease runs.
        $theirs = $this->liveToken();
        mkdir("$lockDir/lockfile/" . self::markOf($theirs));
        try {
            Lock::acquire($lockDir, ['wait' => 0]);
            $this->fail('a live mark of another holder must make the lock busy');
        } catch (BusyException $e) {
            $this->assertSame('busy', $e->getError());
            $this->assertStringContainsString('held by pid ' . getmypid() . ' on this host', $e->getMessage(), 'naming that holder');
        }
        $this->assertSame([$theirs], self::names($lockDir), 'the token went back to the name its holder knows');
        $this->assertSame([self::markOf($theirs)], self::names("$lockDir/$theirs"), 'with only that holder\'s mark in it');
    }

    public function testADeadHoldersMarkIsRemovedAndAnEntryThatIsNoMarkStays(): void
    {
        $lockDir = $this->fresh();
        Lock::acquire($lockDir, ['wait' => 0])->release();
        $dead = 'lockfile.' . (self::nowUs() - 10000000) . '.elsewhere-0badc0de.7.0.0123456789abcdef';
        mkdir("$lockDir/lockfile/" . self::markOf($dead));
        mkdir("$lockDir/lockfile/not-a-mark");
        $lock = Lock::acquire($lockDir, ['wait' => 0]);
        $expected = [self::markOf($lock->token()), 'not-a-mark'];
        sort($expected);
        $this->assertSame($expected, self::names("$lockDir/" . $lock->token()));
        $lock->release();
        $this->assertLockFree($lockDir);
    }

    public function testATakeoverClearsTheOldOwnersMarkAndWorkspaceAndKeepsOurs(): void
    {
        $lockDir = $this->fresh();
        mkdir($lockDir);
        $stale = 'lockfile.' . (self::nowUs() - 10000000) . '.elsewhere-0badc0de.7.0.0123456789abcdef';
        mkdir("$lockDir/$stale");
        mkdir("$lockDir/$stale/" . self::markOf($stale));
        mkdir("$lockDir/$stale/w");
        file_put_contents("$lockDir/$stale/w/.f.tmp.1", 'x');
        $lock = Lock::acquire($lockDir, ['wait' => 0]);
        $this->assertSame([$lock->token()], self::names($lockDir), 'the stale token was taken over by its exact name');
        $this->assertSame([self::markOf($lock->token())], self::names("$lockDir/" . $lock->token()));
        $lock->release();
        $this->assertLockFree($lockDir);
    }

    /**
     * Permissions must be able to fail: as root, the acquisition runs in a
     * child that is user nobody, in a directory of its own.
     */
    public function testAMarkThatCannotBeMadeFailsAndFreesTheLockAgain(): void
    {
        $base = "$this->dir/nobody";
        mkdir($base);
        if (posix_geteuid() === 0) {
            chmod($this->dir, 0755);
            chown($base, 65534);
            chgrp($base, 65534);
        }
        $lockDir = "$base/m.lock";
        $child = Child::start(function (Channel $ch) use ($lockDir): void {
            if (posix_geteuid() === 0 && (!posix_setgid(65534) || !posix_setuid(65534))) {
                throw new \RuntimeException('cannot become user nobody');
            }
            Native::$ownerMarks[$lockDir] = true;
            Lock::acquire($lockDir, ['wait' => 0])->release();
            chmod("$lockDir/lockfile", 0555);
            try {
                Lock::acquire($lockDir, ['wait' => 0]);
                $ch->send('acquired');
            } catch (\Tokenlock\Exception $e) {
                $ch->send(json_encode([$e->getError(), $e->getErrno(), $e->getMessage()]));
            }
            chmod("$lockDir/lockfile", 0755);
        });
        [$error, $errno, $message] = json_decode($child->channel->receive(), true);
        $this->assertSame(['system', 13], [$error, $errno]);
        $this->assertStringContainsString('cannot make the owner mark in', $message);
        $this->assertStringContainsString('the lock was freed again', $message);
        $this->assertSame(0, $child->wait());
        $this->assertSame(['lockfile'], self::names($lockDir));
        $this->assertSame([], self::names("$lockDir/lockfile"));
    }

    public function testAFileTokenCannotHoldAMarkSoTheAcquisitionFailsAndSaysWhatIsLeft(): void
    {
        $lockDir = $this->fresh();
        mkdir($lockDir);
        file_put_contents("$lockDir/lockfile", '');
        try {
            Lock::acquire($lockDir, ['wait' => 0]);
            $this->fail('a file token was held without its owner mark');
        } catch (\Tokenlock\Exception $e) {
            $this->assertSame('system', $e->getError());
            $this->assertSame(20, $e->getErrno(), 'ENOTDIR');
            $this->assertStringContainsString("acquire $lockDir: cannot make the owner mark in lockfile.", $e->getMessage());
            $this->assertStringContainsString('the token stays until its lease ends', $e->getMessage());
        }
        $names = self::names($lockDir);
        $this->assertCount(1, $names, 'still one token');
        $this->assertStringStartsWith('lockfile.', $names[0]);
        $this->assertSame('', file_get_contents("$lockDir/{$names[0]}"), 'the file token, renamed, not changed');
    }

    public function testUpdatesCommitThroughAMarkedTokenAndLeaveNoMarkBehind(): void
    {
        $c = "$this->dir/c.count";
        Native::$ownerMarks["$c.lock"] = true;
        $this->assertSame(1, \Tokenlock\increment($c));
        $this->assertSame(2, \Tokenlock\increment($c));
        $this->assertSame("2\n", file_get_contents($c));
        $this->assertSame(['lockfile'], self::names("$c.lock"));
        $this->assertSame(['w'], self::names("$c.lock/lockfile"), 'the workspace, and no owner mark');
        $this->assertNoTemporaryFiles($this->dir);
    }
}
