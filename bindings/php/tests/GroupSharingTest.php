<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\Exception;
use Tokenlock\Lock;
use Tokenlock\Tests\Support\TempDirTestCase;
use Tokenlock\Tests\Support\Tool;

use function Tokenlock\holder;
use function Tokenlock\increment;

/**
 * Group sharing names one group (docs/security.md, Who is trusted): the
 * `group` option or TOKENLOCK_GROUP, else the group of a lock directory of
 * our own made group-writable with TOKENLOCK_DIR_MODE; never every group
 * this user is in. Each branch of the rule, and what a named group makes.
 */
final class GroupSharingTest extends TempDirTestCase
{
    protected function tearDown(): void
    {
        putenv('TOKENLOCK_DIR_MODE');
        putenv('TOKENLOCK_GROUP');
        parent::tearDown();
    }

    private function needRoot(): void
    {
        if (posix_geteuid() !== 0) {
            $this->markTestSkipped('another user\'s directory is made as root');
        }
    }

    /** A free lock directory, mode MODE, owner UID and group GID (as root). */
    private function lockDir(string $name, int $mode, ?int $uid = null, ?int $gid = null): string
    {
        $d = "$this->dir/$name";
        mkdir($d);
        mkdir("$d/lockfile");
        if ($gid !== null) {
            chgrp($d, $gid);
        }
        if ($uid !== null) {
            chown($d, $uid);
        }
        chmod($d, $mode);
        return $d;
    }

    /** The error of acquiring D with OPTIONS, or 'ok' (released at once). */
    private static function verdict(string $d, array $options = []): string
    {
        try {
            Lock::acquire($d, ['wait' => 0] + $options)->release();
            return 'ok';
        } catch (Exception $e) {
            return $e->getError() . ': ' . $e->getMessage();
        }
    }

    /** A gid this process is not in, or null. */
    private static function foreignGid(): ?int
    {
        foreach ([65534, 65533, 12345] as $gid) {
            if ($gid !== posix_getegid() && !in_array($gid, posix_getgroups() ?: [], true)) {
                return $gid;
            }
        }
        return null;
    }

    public function testOurOwnGroupWritableDirectoryIsSharedOnlyWhenWeChoseGroupWrite(): void
    {
        $d = $this->lockDir('own.lock', 0775);
        $this->assertStringContainsString('which is not the group chosen for sharing', self::verdict($d), 'no choice: refused');
        $this->assertStringStartsWith('untrusted: ', self::verdict($d));
        putenv('TOKENLOCK_DIR_MODE=0775');
        $this->assertSame('ok', self::verdict($d), 'group write chosen: its own group is the chosen one');
        putenv('TOKENLOCK_DIR_MODE');
        $this->assertStringStartsWith('untrusted: ', self::verdict($d), 'judged again once the choice is gone');
        $this->assertSame(['lockfile'], self::tree($d), 'nothing in it was touched');
    }

    public function testOurOwnDirectoryWritableByAGroupOtherThanTheNamedOneIsRefused(): void
    {
        $this->needRoot();
        $other = self::foreignGid() ?? $this->markTestSkipped('no group outside this process\'s');
        $d = $this->lockDir('own.lock', 0775, null, $other);
        putenv('TOKENLOCK_DIR_MODE=0775');
        $this->assertSame('ok', self::verdict($d), 'our own, in its own group');
        $v = self::verdict($d, ['group' => posix_getegid()]);
        $this->assertStringStartsWith('untrusted: ', $v, 'its group is not the named one');
        $this->assertStringContainsString("which is not the group chosen for sharing; run chmod g-w $d", $v);
        $this->assertStringContainsString('TOKENLOCK_GROUP=', $v);
    }

    public function testAnotherUsersDirectoryInOurGroupIsTrustedOnlyWhenTheGroupIsNamed(): void
    {
        $this->needRoot();
        $mine = posix_getegid();
        $d = $this->lockDir('other.lock', 0775, 65534, $mine);
        putenv('TOKENLOCK_DIR_MODE=0775');
        $v = self::verdict($d);
        $this->assertStringStartsWith('untrusted: ', $v, 'being in its group is no choice');
        $this->assertStringContainsString('it belongs to uid 65534', $v);
        $this->assertSame('ok', self::verdict($d, ['group' => $mine]), 'the group named by gid');
        $name = posix_getgrgid($mine)['name'];
        $this->assertSame('ok', self::verdict($d, ['group' => $name]), 'and by name');
        putenv("TOKENLOCK_GROUP=$name");
        $this->assertSame('ok', self::verdict($d), 'and by TOKENLOCK_GROUP');
        $this->assertNull(holder($d), 'holder() judges it by the same group');
        putenv('TOKENLOCK_GROUP');
        try {
            holder($d);
            $this->fail('holder() trusted another user\'s directory without a named group');
        } catch (Exception $e) {
            $this->assertSame('untrusted', $e->getError());
        }
        $this->assertSame(['lockfile'], self::tree($d));
    }

    public function testAnotherUsersDirectoryInAnotherGroupThanTheNamedOneIsRefused(): void
    {
        $this->needRoot();
        $other = self::foreignGid() ?? $this->markTestSkipped('no group outside this process\'s');
        $d = $this->lockDir('other.lock', 0775, 65534, $other);
        $v = self::verdict($d, ['group' => posix_getegid()]);
        $this->assertStringStartsWith('untrusted: ', $v);
        $this->assertStringContainsString('it belongs to uid 65534', $v);
        $this->assertSame(['lockfile'], self::tree($d));
    }

    public function testAGroupWeAreNotInOrThatDoesNotExistIsABadArgumentAndNothingIsMade(): void
    {
        $other = self::foreignGid() ?? $this->markTestSkipped('no group outside this process\'s');
        foreach ([(string) $other => 'is not one of this user\'s groups', 'no-such-group-tl' => 'does not exist'] as $group => $why) {
            foreach (['option' => ['group' => $group], 'TOKENLOCK_GROUP' => []] as $how => $options) {
                if ($how === 'TOKENLOCK_GROUP') {
                    putenv("TOKENLOCK_GROUP=$group");
                }
                try {
                    Lock::acquire("$this->dir/n.lock", ['wait' => 0] + $options);
                    $this->fail("$how $group was accepted");
                } catch (Exception $e) {
                    $this->assertSame(['bad_argument', 64], [$e->getError(), $e->getCode()], "$how $group");
                    $this->assertStringContainsString($why, $e->getMessage());
                }
                try {
                    increment("$this->dir/n.count", ['wait' => 0] + $options);
                    $this->fail("increment: $how $group was accepted");
                } catch (Exception $e) {
                    $this->assertSame('bad_argument', $e->getError());
                }
                putenv('TOKENLOCK_GROUP');
            }
        }
        $this->assertSame([], self::tree($this->dir), 'nothing was made');
    }

    public function testANamedGroupMakesTheLockDirectoryTheTokenAndTheWorkspaceInThatGroupGroupWritable(): void
    {
        $gid = posix_getegid();
        $groups = array_values(array_diff(posix_getgroups() ?: [], [$gid]));
        $named = $groups[0] ?? $gid;
        $this->assertSame(1, increment("$this->dir/c.count", ['group' => $named]));
        clearstatcache();
        foreach (['c.count.lock', 'c.count.lock/lockfile', 'c.count.lock/lockfile/w'] as $made) {
            $this->assertSame($named, filegroup("$this->dir/$made"), "$made is in the named group");
            $this->assertSame('0775', sprintf('%04o', fileperms("$this->dir/$made") & 07777), "$made: 0755 | 0070");
        }
        $this->assertSame(2, increment("$this->dir/c.count", ['group' => $named]), 'and trusted next time');
        $this->assertNull(holder("$this->dir/c.count.lock", ['group' => $named]), 'and free');
    }

    public function testAnotherMembersTokenAndWorkspaceAreTrustedInTheNamedGroup(): void
    {
        $this->needRoot();
        $gid = posix_getegid();
        $this->assertSame(1, increment("$this->dir/c.count", ['group' => $gid]));
        // As if the other member had made them all.
        foreach (['c.count.lock/lockfile/w', 'c.count.lock/lockfile', 'c.count.lock'] as $made) {
            chown("$this->dir/$made", 65534);
        }
        $this->assertSame(2, increment("$this->dir/c.count", ['group' => $gid]), 'the other member\'s lock, token and workspace');
        try {
            increment("$this->dir/c.count", ['wait' => 0]);
            $this->fail('another user\'s lock directory was trusted without a named group');
        } catch (Exception $e) {
            $this->assertSame('untrusted', $e->getError());
        }
        // Our own lock directory shared by group write: another user's
        // workspace in its group is trusted too.
        chown("$this->dir/c.count.lock", 0);
        putenv('TOKENLOCK_DIR_MODE=0775');
        $this->assertSame(3, increment("$this->dir/c.count"));
        chgrp("$this->dir/c.count.lock/lockfile/w", self::foreignGid() ?? $this->markTestSkipped('no foreign group'));
        try {
            increment("$this->dir/c.count");
            $this->fail('another user\'s workspace in another group was trusted');
        } catch (Exception $e) {
            $this->assertSame('untrusted', $e->getError());
            $this->assertStringContainsString('refusing the lock\'s workspace', $e->getMessage());
        }
        $this->assertSame("3\n", file_get_contents("$this->dir/c.count"), 'nothing was written');
        $this->assertSame('free', Tool::status("$this->dir/c.count.lock")['state'], 'the lock was released');
    }

    public function testTheOptionWinsOverTokenlockGroup(): void
    {
        $other = self::foreignGid() ?? $this->markTestSkipped('no group outside this process\'s');
        putenv("TOKENLOCK_GROUP=$other");
        $d = "$this->dir/o.lock";
        $this->assertSame('ok', self::verdict($d, ['group' => posix_getegid()]));
        $this->assertStringStartsWith('bad_argument: ', self::verdict($d));
    }
}
