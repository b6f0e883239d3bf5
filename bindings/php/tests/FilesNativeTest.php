<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\DirSyncException;
use Tokenlock\Exception;
use Tokenlock\Files;
use Tokenlock\LockLostException;
use Tokenlock\Tests\Support\Channel;
use Tokenlock\Tests\Support\Child;
use Tokenlock\Tests\Support\TempDirTestCase;
use Tokenlock\Tests\Support\Tool;

use function Tokenlock\increment;
use function Tokenlock\readCounter;
use function Tokenlock\writeFile;

/**
 * writeFile() and increment() without the command: the atomic write beside
 * the target, and the update committed through the lock's token (the fence
 * of docs/protocol.md). Every failure leaves the target as it was and no
 * temporary file behind.
 */
final class FilesNativeTest extends TempDirTestCase
{
    protected function tearDown(): void
    {
        Files::$localFor = [];
        Files::$staleReadBudgetUs = 3000000;
        parent::tearDown();
    }

    /** The error's name and errno ('ok' when it succeeds). */
    private static function errorOf(callable $call, ?Exception &$caught = null): string
    {
        try {
            $call();
            return 'ok';
        } catch (Exception $e) {
            $caught = $e;
            return $e->getError() . ($e->getErrno() !== 0 ? ' ' . $e->getErrno() : '');
        }
    }

    /** @return list<string> */
    private static function names(string $dir): array
    {
        $names = array_values(array_diff(scandir($dir), ['.', '..']));
        sort($names);
        return $names;
    }

    private static function mode(string $path): string
    {
        clearstatcache();
        return sprintf('%04o', fileperms($path) & 07777);
    }

    public function testTheFencedCommitGoesThroughTheTokensWorkspaceAndTheCommandCountsOn(): void
    {
        $c = "$this->dir/n.count";
        $this->assertSame(1, increment($c));
        $this->assertSame(42, increment($c, ['by' => 41]));
        $this->assertSame("42\n", file_get_contents($c));
        $this->assertDirectoryExists("$c.lock/lockfile/w", 'the workspace moved with the token back to lockfile');
        $this->assertNoTemporaryFiles($this->dir);
        [$status, $out, $err] = Tool::run(['incr', $c]);
        $this->assertSame(0, $status, $err);
        $this->assertSame("43\n", $out, 'the command counts on, through the same lock');
        $this->assertSame(44, increment($c));
    }

    public function testTheModuleAndTheCommandIncrementOneCounterTogetherExactly(): void
    {
        $c = "$this->dir/shared.count";
        $workers = [];
        for ($i = 0; $i < 3; ++$i) {
            $workers[] = Child::start(function (Channel $ch) use ($c): void {
                for ($n = 0; $n < 40; ++$n) {
                    increment($c, ['wait' => 30]);
                }
            });
            $workers[] = Child::start(function (Channel $ch) use ($c): void {
                for ($n = 0; $n < 10; ++$n) {
                    [$status, , $err] = Tool::run(['incr', '-w', '30', $c]);
                    if ($status !== 0) {
                        throw new \RuntimeException("tokenlock incr: $err");
                    }
                }
            });
        }
        foreach ($workers as $w) {
            $this->assertSame(0, $w->wait(), 'a worker ended well');
        }
        $this->assertSame(3 * 40 + 3 * 10, readCounter($c));
        $this->assertNoTemporaryFiles($this->dir);
    }

    public function testALockLostBeforeTheCommitWritesNothingAndLeavesTheNewOwnerAlone(): void
    {
        $f = "$this->dir/page";
        file_put_contents($f, "old\n");
        $theirs = '';
        $e = null;
        $compute = function (?string $current) use ($f, &$theirs): array {
            // Taken over while we compute: broken by force, then taken.
            $ours = self::names("$f.lock")[0];
            Tool::breakToken("$f.lock", $ours);
            [, $theirs] = Tool::run(['acquire', '-n', "$f.lock"]);
            $theirs = trim($theirs);
            return ["new\n", null];
        };
        $what = self::errorOf(fn () => Files::update($f, "$f.lock", $compute, ['sync' => 'file_and_dir']), $e);
        $this->assertSame('lock_lost', $what);
        $this->assertInstanceOf(LockLostException::class, $e);
        $this->assertStringStartsWith("tokenlock: commit $f: the lock was taken over before the commit", $e->getMessage());
        $this->assertSame("old\n", file_get_contents($f), 'the target is intact');
        $this->assertSame([$theirs], self::names("$f.lock"), 'the new holder\'s token is intact');
        $this->assertNoTemporaryFiles($this->dir);
        Tool::run(['release', "$f.lock", $theirs]);
    }

    public function testModesOfNewAndReplacedFiles(): void
    {
        $old = umask(022);
        try {
            writeFile("$this->dir/new", 'x');
            $this->assertSame('0644', self::mode("$this->dir/new"), 'a new file: 0644 minus the umask');
            writeFile("$this->dir/exact", 'x', ['mode' => 0600]);
            $this->assertSame('0600', self::mode("$this->dir/exact"), 'mode is applied exactly');
            $this->assertSame(022, umask(), 'the umask is as it was');
            writeFile("$this->dir/script", 'x', ['mode' => 0750]);
            $this->assertSame('0750', self::mode("$this->dir/script"), 'also with execute bits');
            file_put_contents("$this->dir/kept", 'x');
            chmod("$this->dir/kept", 04640);
            writeFile("$this->dir/kept", 'y');
            $this->assertSame('0640', self::mode("$this->dir/kept"), 'a replaced file keeps its mode, without setuid');
            writeFile("$this->dir/kept", 'z', ['lock' => "$this->dir/kept.lock", 'mode' => 0604]);
            $this->assertSame('0604', self::mode("$this->dir/kept"), 'also through the lock');
            $this->assertSame('z', file_get_contents("$this->dir/kept"));
        } finally {
            umask($old);
        }
    }

    public function testTargetsThatAreNotRegularFilesAreRefusedAndLeftAlone(): void
    {
        $d = $this->dir;
        file_put_contents("$d/real", "7\n");
        symlink("$d/real", "$d/link");
        $this->assertSame('system 40', self::errorOf(fn () => increment("$d/link"), $e), 'increment through a symbolic link: ELOOP');
        $this->assertStringContainsString("$d/link: it is a symbolic link", $e->getMessage());
        $this->assertSame("7\n", file_get_contents("$d/real"), 'what it points to is untouched');
        writeFile("$d/link", "replaced\n");
        $this->assertFalse(is_link("$d/link"), 'writeFile replaces the link itself');
        $this->assertSame("replaced\n", file_get_contents("$d/link"));
        $this->assertSame("7\n", file_get_contents("$d/real"), 'and not what it pointed to');

        posix_mkfifo("$d/fifo", 0644);
        $this->assertSame('system 22', self::errorOf(fn () => writeFile("$d/fifo", 'x')), 'writeFile onto a FIFO: EINVAL');
        $this->assertSame('system 22', self::errorOf(fn () => increment("$d/fifo", ['wait' => 0])), 'increment of a FIFO: EINVAL, without blocking');
        $this->assertSame('fifo', filetype("$d/fifo"), 'the FIFO stays');
        unlink("$d/fifo");

        $h = fopen("$d/huge", 'w');
        ftruncate($h, Files::READ_LIMIT + 1);
        fclose($h);
        $this->assertSame('system 27', self::errorOf(fn () => writeFile("$d/huge", 'x', ['lock' => "$d/huge.lock"])), 'a file over the read limit: EFBIG');
        clearstatcache();
        $this->assertSame(Files::READ_LIMIT + 1, filesize("$d/huge"), 'left as it was');
        $this->assertSame('free', Tool::status("$d/huge.lock")['state'], 'the lock released');
        $this->assertNoTemporaryFiles($d);
    }

    public function testAWorkspaceAnotherUserCouldChangeIsRefusedAndTheCounterKept(): void
    {
        $c = "$this->dir/c.count";
        $this->assertSame(1, increment($c));
        chmod("$c.lock/lockfile/w", 0777);
        $this->assertSame('untrusted', self::errorOf(fn () => increment($c), $e), 'a workspace every user may write');
        $this->assertMatchesRegularExpression('~' . preg_quote("$c.lock/lockfile.", '~') . '[^/]+/w~', $e->getMessage(), 'naming it');
        $this->assertSame("1\n", file_get_contents($c));
        $this->assertNoTemporaryFiles($this->dir);
        $this->assertSame(['lockfile'], self::names("$c.lock"), 'the lock was released');
        chmod("$c.lock/lockfile/w", 0755);
        rmdir("$c.lock/lockfile/w");
        symlink($this->dir, "$c.lock/lockfile/w");
        $this->assertSame('untrusted', self::errorOf(fn () => increment($c)), 'a workspace that is a symbolic link');
        $this->assertSame("1\n", file_get_contents($c));
        $this->assertNoTemporaryFiles($this->dir);
    }

    public function testAFileTokenOfALegacySetupCommitsBesideTheTargetUnfenced(): void
    {
        $c = "$this->dir/c.count";
        mkdir("$c.lock");
        file_put_contents("$c.lock/lockfile", '');
        $this->assertSame(1, increment($c));
        $this->assertSame(2, increment($c));
        $this->assertFileExists("$c.lock/lockfile");
        $this->assertFalse(is_dir("$c.lock/lockfile"), 'the file token is back');
        $this->assertNoTemporaryFiles($this->dir);
    }

    public function testALockOnAnotherFilesystemThanTheTargetCommitsUnfenced(): void
    {
        $shm = '/dev/shm';
        if (!is_dir($shm) || !is_writable($shm) || stat($shm)['dev'] === stat($this->dir)['dev']) {
            $this->markTestSkipped('no writable /dev/shm on another filesystem than the scratch directory');
        }
        $lockParent = "$shm/tokenlock-php-test." . bin2hex(random_bytes(4));
        mkdir($lockParent, 0755);
        try {
            $c = "$this->dir/cross.count";
            $this->assertSame(1, increment($c, ['lock' => "$lockParent/c.lock"]));
            $this->assertSame(2, increment($c, ['lock' => "$lockParent/c.lock"]));
            $this->assertNoTemporaryFiles($this->dir);
            $this->assertNoTemporaryFiles($lockParent);
        } finally {
            self::removeTree($lockParent);
        }
    }

    public function testVersionMarksOnANetworkFilesystemRefuseAStaleRead(): void
    {
        $c = "$this->dir/c.count";
        Files::$localFor["$c.lock"] = false;
        Files::$staleReadBudgetUs = 50000;
        $this->assertSame(1, increment($c));
        $marks = array_values(preg_grep('/\Av\./', self::names("$c.lock/lockfile/w")));
        $this->assertCount(1, $marks, 'the commit left one version mark');
        $this->assertSame('v.' . Files::fnvHex("1\n"), substr($marks[0], 0, 18), 'naming the FNV-1a hash of what it wrote');
        $this->assertSame(['cbf29ce484222325', 'af63dc4c8601ec8c', '85944171f73967e8'], array_map([Files::class, 'fnvHex'], ['', 'a', 'foobar']),
            'FNV-1a, 64 bits, as its published test vectors give it');
        $this->assertSame(2, increment($c));
        $this->assertCount(1, preg_grep('/\Av\./', self::names("$c.lock/lockfile/w")), 'the mark was renamed, not added to');
        // An older version, with its old time, as a client's cache serves it.
        clearstatcache();
        $mtime = filemtime($c);
        file_put_contents($c, "1\n");
        touch($c, $mtime - 100);
        $this->assertSame('stale_data', self::errorOf(fn () => increment($c), $e));
        $this->assertSame(75, $e->getCode());
        $this->assertStringContainsString("$c: this client keeps reading a version older", $e->getMessage());
        $this->assertSame("1\n", file_get_contents($c), 'nothing was written');
        $this->assertNoTemporaryFiles($this->dir);
        // Newer than the mark by more than the skew: written outside the lock.
        touch($c, $mtime + 100);
        $this->assertSame(2, increment($c), 'a version newer than the mark is taken as it is');
        // Newer than the mark by no more than the skew, as a legacy script
        // writes it just after a commit: the same version for the whole
        // wait, then taken as written outside the lock.
        $marks = array_values(preg_grep('/\Av\./', self::names("$c.lock/lockfile/w")));
        $markSeconds = intdiv((int) substr($marks[0], 19), 1000000);
        file_put_contents($c, "10\n");
        touch($c, $markSeconds + 1);
        $this->assertSame(11, increment($c), 'a version written just after the last commit is taken after the wait');
        $this->assertNoTemporaryFiles($this->dir);
    }

    public function testFollowingSymbolicLinks(): void
    {
        $d = $this->dir;
        mkdir("$d/sub");
        file_put_contents("$d/sub/real", "old\n");
        chmod("$d/sub/real", 0640);
        symlink('sub/real', "$d/rel");
        symlink("$d/rel", "$d/chain");
        writeFile("$d/chain", "new\n", ['follow_symlinks' => true]);
        $this->assertSame("new\n", file_get_contents("$d/sub/real"), 'a chain of links, relative and absolute, is followed');
        $this->assertTrue(is_link("$d/chain") && is_link("$d/rel"), 'the links stay');
        $this->assertSame('0640', self::mode("$d/sub/real"), 'the file keeps its mode');
        file_put_contents("$d/sub/n.count", "5\n");
        symlink('sub/n.count', "$d/n.count");
        writeFile("$d/n.count", "6\n", ['follow_symlinks' => true, 'lock' => "$d/n.lock"]);
        $this->assertSame("6\n", file_get_contents("$d/sub/n.count"), 'also through the lock');
        symlink('loop2', "$d/loop1");
        symlink('loop1', "$d/loop2");
        $this->assertSame('system 40', self::errorOf(fn () => writeFile("$d/loop1", 'x', ['follow_symlinks' => true])), 'a loop of links: ELOOP');
        $this->assertTrue(is_link("$d/loop1") && is_link("$d/loop2"), 'nothing replaced');
        $this->assertNoTemporaryFiles($d);
    }

    public function testALinkAnotherUserPlantedInAStickyDirectoryIsNotFollowed(): void
    {
        if (posix_geteuid() !== 0) {
            $this->markTestSkipped('planting another user\'s link needs root');
        }
        $d = "$this->dir/sticky";
        mkdir($d);
        chmod($d, 01777);
        chmod($this->dir, 0755);
        file_put_contents("$this->dir/victim", "mine\n");
        $planter = Child::start(function (Channel $ch) use ($d): void {
            if (!posix_setgid(65534) || !posix_setuid(65534) || !symlink("$this->dir/victim", "$d/planted")) {
                throw new \RuntimeException('cannot plant the link as user nobody');
            }
        });
        $this->assertSame(0, $planter->wait());
        $this->assertSame('untrusted', self::errorOf(fn () => writeFile("$d/planted", "root's\n", ['follow_symlinks' => true]), $e));
        $this->assertStringContainsString("refusing to follow the symbolic link $d/planted: it is owned by uid 65534", $e->getMessage());
        $this->assertSame("mine\n", file_get_contents("$this->dir/victim"), 'what it points to is untouched');
        $this->assertNoTemporaryFiles($this->dir);
    }

    public function testTheSweepRemovesOnlyThisTargetsOldTemporaryFiles(): void
    {
        $d = $this->dir;
        $old = time() - 7200;
        foreach (['.c.count.tmp.0123456789abcdef', '.c.count.tmp.fedcba9876543210', '.c.count.tmp.short', '.other.tmp.0123456789abcdef'] as $n) {
            file_put_contents("$d/$n", 'x');
            touch("$d/$n", $old);
        }
        file_put_contents("$d/.c.count.tmp.00000000000000aa", 'young');
        file_put_contents("$d/target-of-link", 'keep');
        symlink("$d/target-of-link", "$d/.c.count.tmp.00000000000000bb");
        $this->assertSame(2, Files::sweepTemps(['dir' => $d, 'name' => 'c.count'], 3600 * 1000000));
        $this->assertSame(['.c.count.tmp.00000000000000aa', '.c.count.tmp.00000000000000bb', '.c.count.tmp.short',
            '.other.tmp.0123456789abcdef', 'target-of-link'], self::names($d), 'young ones, odd names, links and other targets stay');
    }

    public function testRootReplacingAFileKeepsItsOwner(): void
    {
        if (posix_geteuid() !== 0) {
            $this->markTestSkipped('keeping another user\'s ownership is done as root');
        }
        file_put_contents("$this->dir/owned", "theirs\n");
        chown("$this->dir/owned", 65534);
        chgrp("$this->dir/owned", 65534);
        writeFile("$this->dir/owned", "root's\n");
        clearstatcache();
        $this->assertSame([65534, 65534], [fileowner("$this->dir/owned"), filegroup("$this->dir/owned")]);
        increment("$this->dir/owned.count");
        chown("$this->dir/owned.count", 65534);
        chgrp("$this->dir/owned.count", 65534);
        increment("$this->dir/owned.count");
        clearstatcache();
        $this->assertSame([65534, 65534], [fileowner("$this->dir/owned.count"), filegroup("$this->dir/owned.count")], 'also through the lock');
    }

    /**
     * Each commit into a directory that cannot be flushed is made, then
     * reported as dir_sync_failed with the count; run as user nobody where
     * the tests run as root, who could open the directory.
     */
    public function testAnUnflushableDirectoryIsReportedAfterEachCommitWithTheCount(): void
    {
        $drop = $this->unflushableDirectory('drop');
        $child = Child::start(function (Channel $ch) use ($drop): void {
            if (posix_geteuid() === 0 && (!posix_setgid(65534) || !posix_setuid(65534))) {
                throw new \RuntimeException('cannot become user nobody');
            }
            foreach ([1, 2] as $n) {
                try {
                    increment("$drop/c.count");
                    $ch->send('no error');
                } catch (DirSyncException $e) {
                    $ch->send(json_encode([$e->getError(), $e->getCode(), $e->getValue(), $e->getMessage()]));
                }
            }
            try {
                writeFile("$drop/page", "new\n");
                $ch->send('no error');
            } catch (DirSyncException $e) {
                $ch->send(json_encode([$e->getError(), $e->getCode(), $e->getValue(), $e->getMessage()]));
            }
        });
        foreach ([1, 2] as $n) {
            [$error, $code, $value, $message] = json_decode($child->channel->receive(), true);
            $this->assertSame(['dir_sync_failed', 74, $n], [$error, $code, $value]);
            $this->assertStringContainsString("sync $drop/c.count: the update is committed, but flushing the directory $drop failed", $message);
            $this->assertStringContainsString("give this user read permission on $drop", $message);
        }
        [$error, , $value, $message] = json_decode($child->channel->receive(), true);
        $this->assertSame(['dir_sync_failed', null], [$error, $value]);
        $this->assertStringContainsString('the new contents are in place', $message);
        $this->assertSame(0, $child->wait());
        chmod($drop, 0755);
        $this->assertSame("2\n", file_get_contents("$drop/c.count"));
        $this->assertSame("new\n", file_get_contents("$drop/page"));
        $this->assertNoTemporaryFiles($drop);
        $this->assertLockFree("$drop/c.count.lock");
    }

    /** Permissions must be able to fail: as root, the write runs as user nobody. */
    public function testAWriteIntoADirectoryItCannotWriteFailsAndLeavesTheTarget(): void
    {
        $ro = "$this->dir/ro";
        mkdir($ro);
        file_put_contents("$ro/page", "old\n");
        chmod($this->dir, 0755);
        chmod($ro, 0555);
        $child = Child::start(function (Channel $ch) use ($ro): void {
            if (posix_geteuid() === 0 && (!posix_setgid(65534) || !posix_setuid(65534))) {
                throw new \RuntimeException('cannot become user nobody');
            }
            $ch->send(self::errorOf(fn () => writeFile("$ro/page", "new\n"), $e) . ' ' . $e?->getCode() . ' ' . $e?->getMessage());
        });
        $answer = $child->channel->receive();
        $this->assertStringStartsWith("system 13 77 tokenlock: create $ro/page: cannot create the temporary file $ro/.page.tmp.", $answer);
        $this->assertStringContainsString("check the permissions of $ro", $answer);
        $this->assertSame(0, $child->wait());
        chmod($ro, 0755);
        $this->assertSame("old\n", file_get_contents("$ro/page"));
        $this->assertSame(['page'], self::names($ro), 'no temporary file');
    }

    public function testALockLostBeforeAnUnfencedCommitWritesNothing(): void
    {
        $c = "$this->dir/c.count";
        file_put_contents($c, "5\n");
        mkdir("$c.lock");
        file_put_contents("$c.lock/lockfile", '');
        $theirs = '';
        $compute = function (?string $current) use ($c, &$theirs): array {
            Tool::breakToken("$c.lock", self::names("$c.lock")[0]);
            [, $theirs] = Tool::run(['acquire', '-n', "$c.lock"]);
            $theirs = trim($theirs);
            return ["6\n", 6];
        };
        $this->assertSame('lock_lost', self::errorOf(fn () => Files::update($c, "$c.lock", $compute, ['sync' => 'file']), $e));
        $this->assertStringContainsString("commit $c: the lock was taken over before the commit", $e->getMessage());
        $this->assertSame("5\n", file_get_contents($c), 'the counter is intact');
        $this->assertSame([$theirs], self::names("$c.lock"), 'the new holder\'s token is intact');
        $this->assertNoTemporaryFiles($this->dir);
    }
}
