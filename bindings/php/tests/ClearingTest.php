<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\Lock;
use Tokenlock\Native;
use Tokenlock\Tests\Support\Channel;
use Tokenlock\Tests\Support\Child;
use Tokenlock\Tests\Support\TempDirTestCase;

/**
 * Clearing a token taken over from a dead owner (docs/security.md: nothing
 * outside the lock directory is ever removed; a link found is removed,
 * never what it names, even while names are swapped). PHP has no
 * unlinkat(): the walk pins each directory as the working directory.
 */
final class ClearingTest extends TempDirTestCase
{
    /**
     * A held token of a dead owner in a fresh lock directory D: [D, token];
     * with $expired, its lease ended a minute ago too (for a process that
     * cannot see owners die).
     */
    private function staleLock(string $name, bool $expired = false): array
    {
        $lockDir = "$this->dir/$name";
        $probe = Lock::acquire($lockDir);
        // Our own name with another start time: its owner is gone.
        [, , $tag, $pid, $start] = explode('.', $probe->token());
        $probe->release();
        $token = 'lockfile.' . ((time() + ($expired ? -60 : 600)) * 1000000) . ".$tag.$pid." . ((int) $start + 1) . '.0123456789abcdef';
        rename("$lockDir/lockfile", "$lockDir/$token");
        return [$lockDir, $token];
    }

    /** Canary files c1..cN in DIR, made again. */
    private static function plant(string $dir, int $n): void
    {
        @mkdir($dir, 0755, true);
        for ($i = 1; $i <= $n; ++$i) {
            file_put_contents("$dir/c$i", "canary $i\n");
        }
    }

    private static function left(string $dir, int $n): int
    {
        $left = 0;
        for ($i = 1; $i <= $n; ++$i) {
            clearstatcache();
            $left += (is_file("$dir/c$i") && !is_link("$dir/c$i") && file_get_contents("$dir/c$i") === "canary $i\n") ? 1 : 0;
        }
        return $left;
    }

    public function testATreeIsClearedLinksRemovedNotFollowedAndTheWorkingDirectoryRestored(): void
    {
        [$lockDir, $token] = $this->staleLock('a.lock');
        self::plant("$this->dir/outside", 3);
        mkdir("$lockDir/$token/w/deep/deeper", 0755, true);
        file_put_contents("$lockDir/$token/w/.x.tmp.0123456789abcdef", 'partial');
        file_put_contents("$lockDir/$token/w/deep/deeper/f", 'f');
        symlink("$this->dir/outside", "$lockDir/$token/w/deep/dirlink");
        symlink("$this->dir/outside/c1", "$lockDir/$token/filelink");
        mkdir("$this->dir/cwd");
        $before = getcwd();
        chdir("$this->dir/cwd");
        try {
            $lock = Lock::tryAcquire($lockDir);
            $this->assertSame("$this->dir/cwd", getcwd(), 'the working directory is restored after the walk');
        } finally {
            chdir($before);
        }
        $this->assertNotNull($lock);
        $this->assertSame([], array_values(array_diff(scandir("$lockDir/" . $lock->token()), ['.', '..'])), 'the token was cleared');
        $this->assertSame(3, self::left("$this->dir/outside", 3), 'the links were removed, not followed');
        $lock->release();
    }

    /**
     * A php-fpm worker started in a directory open_basedir keeps out of
     * reach could not chdir() back: the token is then left as it is, and
     * the working directory never moves.
     */
    public function testWithoutAWayBackTheTokenIsLeftAndTheWorkingDirectoryKept(): void
    {
        [$lockDir, $token] = $this->staleLock('b.lock', true);
        file_put_contents("$lockDir/$token/left", 'x');
        file_put_contents("$this->dir/take.php", '<?php require $argv[1]; $l = Tokenlock\Lock::acquire($argv[2], ["wait" => 0]); '
            . 'echo json_encode([getcwd(), scandir($argv[2] . "/" . $l->token())]); $l->release();');
        $proc = proc_open([PHP_BINARY, '-n', '-d', 'display_errors=stderr', '-d', 'open_basedir=' . dirname(TOKENLOCK_TEST_MODULE) . ":$this->dir", "$this->dir/take.php",
            TOKENLOCK_TEST_MODULE, $lockDir], [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, '/');
        $out = (string) stream_get_contents($pipes[1]);
        $err = (string) stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        $this->assertSame(0, proc_close($proc), $err . $out);
        [$cwd, $names] = json_decode($out, true);
        $this->assertSame('/', $cwd, 'the working directory never moved');
        // Without /proc every lock gets owner marks: ours is there too.
        $this->assertContains('left', $names, 'taken over, its token left as it was');
    }

    public function testATokenSwappedForALinkOrAnotherDirectoryIsNotCleared(): void
    {
        self::plant("$this->dir/victim", 5);
        mkdir("$this->dir/d");
        mkdir("$this->dir/d/other");
        file_put_contents("$this->dir/d/other/kept", 'kept');
        $clear = new \ReflectionMethod(Native::class, 'clearWorkspace');
        $clear->setAccessible(true);
        // What the takeover renamed was a directory; at its name now: a link.
        mkdir("$this->dir/judged");
        $judged = lstat("$this->dir/judged");
        symlink("$this->dir/victim", "$this->dir/d/lockfile.t");
        $cwd = getcwd();
        $clear->invoke(null, "$this->dir/d", 'lockfile.t', $judged, false);
        $this->assertSame(5, self::left("$this->dir/victim", 5), 'a link at the token\'s name is not entered');
        // The link's own identity judged: not a directory, not entered.
        $clear->invoke(null, "$this->dir/d", 'lockfile.t', lstat("$this->dir/d/lockfile.t"), false);
        $this->assertSame(5, self::left("$this->dir/victim", 5));
        // Another directory at the name: not the one judged.
        rename("$this->dir/d/other", "$this->dir/d/lockfile.u");
        $clear->invoke(null, "$this->dir/d", 'lockfile.u', $judged, false);
        $this->assertFileExists("$this->dir/d/lockfile.u/kept");
        $this->assertSame($cwd, getcwd(), 'the working directory is as it was');
    }

    /**
     * A real race, without a second user: a process of ours exchanges a
     * subdirectory of the stale token with a link to canary files, by
     * renameat2(RENAME_EXCHANGE), again and again, while the takeover
     * clears the token. The canaries must all stay.
     */
    public function testARacerSwappingSubdirectoriesForLinksDuringTheClearingRemovesNothingOutside(): void
    {
        if (!extension_loaded('FFI') || !function_exists('pcntl_fork')) {
            $this->markTestSkipped('the racer needs the FFI and pcntl extensions');
        }
        $victim = "$this->dir/victim";
        $flips = 0;
        $start = hrtime(true);
        for ($try = 1; $try <= 30 && hrtime(true) - $start < 8e9; ++$try) {
            self::plant($victim, 100);
            [$lockDir, $token] = $this->staleLock("r$try.lock");
            self::plant("$lockDir/$token/docs", 100);
            symlink($victim, "$lockDir/$token/docs.link");
            $stop = "$this->dir/stop$try";
            $racer = Child::start(function (Channel $ch) use ($lockDir, $token, $stop): void {
                $libc = \FFI::cdef('int renameat2(int, const char *, int, const char *, unsigned int);', 'libc.so.6');
                chdir("$lockDir/$token");
                $ch->send('ready');
                $n = 0;
                $end = hrtime(true) + 5e9;
                for ($i = 1; ($i & 255) !== 0 || (!file_exists($stop) && hrtime(true) < $end); ++$i) {
                    $n += $libc->renameat2(-100, 'docs', -100, 'docs.link', 2) === 0 ? 1 : 0;
                }
                $ch->send((string) $n);
            });
            $this->assertSame('ready', $racer->channel->receive());
            $lock = Lock::tryAcquire($lockDir);
            touch($stop);
            $flips += (int) $racer->channel->receive();
            $racer->wait();
            $this->assertNotNull($lock, "try $try: the stale token was taken over");
            $lock->release();
            $this->assertSame(100, self::left($victim, 100), "try $try: canary files left of 100");
        }
        $this->assertGreaterThan(0, $flips, 'the racer exchanged the names');
    }
}
