<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\Exception;
use Tokenlock\Native;
use Tokenlock\Tests\Support\Child;
use Tokenlock\Tests\Support\TempDirTestCase;

use function Tokenlock\increment;
use function Tokenlock\withLock;
use function Tokenlock\writeFile;

/**
 * What the per-call savings must keep. A lock and release, and an
 * increment, make no more system calls than counted here (strace); and
 * what the module remembers to save them (the verdict on a lock
 * directory, on a token and its workspace, the umask that gives a mode,
 * the random bytes of a process) is given up when what it describes
 * changes: a directory replaced by another, its mode or owner changed,
 * the umask changed, a fork. Each refusal leaves the counter as it was,
 * no temporary file and the lock free.
 */
final class PerCallTest extends TempDirTestCase
{
    private const SCRIPT = <<<'PHP'
<?php
declare(strict_types=1);
[, $module, $lock, $count] = $argv;
require $module;
// The same updates sweep old temporary files (one in 32, by chance) in every run.
mt_srand(30);
for ($i = 0; $i < 3; ++$i) {
    Tokenlock\withLock($lock, fn () => null);
    Tokenlock\increment($count, ['sync' => 'none']);
}
@stat('/MARK-locks');
for ($i = 0; $i < 20; ++$i) {
    Tokenlock\withLock($lock, fn () => null);
}
@stat('/MARK-increments');
for ($i = 0; $i < 20; ++$i) {
    Tokenlock\increment($count, ['sync' => 'none']);
}
@stat('/MARK-end');
echo file_get_contents($count);
PHP;

    /**
     * The system calls of each part of SCRIPT, per call, by name; "all"
     * is their sum. Looks at the scratch directory and its ancestors,
     * which PHP makes to resolve a path after a rename emptied its
     * realpath cache, are left out: how many there are depends on where
     * the scratch directory is, not on the module.
     *
     * @return array<string, array<string, float>>
     */
    private function countCalls(): array
    {
        $strace = trim((string) shell_exec('command -v strace'));
        if ($strace === '') {
            $this->markTestSkipped('strace is not installed (scripts/install-deps installs it)');
        }
        file_put_contents("$this->dir/script.php", self::SCRIPT);
        $out = "$this->dir/strace.out";
        $cmd = [$strace, '-f', '-o', $out, PHP_BINARY, "$this->dir/script.php", TOKENLOCK_TEST_MODULE, "$this->dir/a.lock", "$this->dir/c.count"];
        $proc = proc_open($cmd, [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $stdout = (string) stream_get_contents($pipes[1]);
        $stderr = (string) stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        $status = proc_close($proc);
        if ($status !== 0 && str_contains($stderr, 'ptrace')) {
            $this->markTestSkipped("strace cannot trace here: $stderr");
        }
        $this->assertSame(0, $status, $stderr);
        $this->assertSame("23\n", $stdout, 'every increment counted');
        $skip = [];
        for ($p = $this->dir; $p !== '/' && $p !== '.'; $p = dirname($p)) {
            $skip[$p] = true;
        }
        $skip['/'] = true;
        $n = [];
        $part = '';
        foreach (file($out, FILE_IGNORE_NEW_LINES) as $line) {
            if (preg_match('~"/MARK-(\w+)"~', $line, $m)) {
                $part = $m[1];
            } elseif ($part !== '' && preg_match('~^(?:\d+\s+)?(\w+)\((?:AT_FDCWD, "([^"]*)")?~', $line, $m)) {
                if ($m[1] === 'newfstatat' && isset($m[2], $skip[$m[2]])) {
                    continue;
                }
                $n[$part][$m[1]] = ($n[$part][$m[1]] ?? 0) + 0.05;
                $n[$part]['all'] = ($n[$part]['all'] ?? 0) + 0.05;
            }
        }
        return $n;
    }

    public function testALockAndAnIncrementMakeNoMoreSystemCallsThanCounted(): void
    {
        $n = $this->countCalls();
        $locks = $n['locks'];
        $calls = json_encode($locks);
        // Two renames; the lock directory's lstat (its verdict is kept while
        // that shows it unchanged); the turnstile's (a hungry head); a
        // getpid each for the token and the release (a forked child's).
        $this->assertEqualsWithDelta(2, $locks['rename'] ?? 0, 0.01, $calls);
        $this->assertLessThanOrEqual(2.01, $locks['newfstatat'] ?? 0, $calls);
        $this->assertLessThanOrEqual(2.01, $locks['getpid'] ?? 0, $calls);
        $this->assertLessThanOrEqual(0.1, $locks['getrandom'] ?? 0, "random bytes are read a block at a time: $calls");
        $this->assertLessThanOrEqual(6.1, $locks['all'], "a lock and release made 7 system calls before: $calls");

        $incr = $n['increments'];
        $calls = json_encode($incr);
        foreach (['umask', 'geteuid', 'lchown', 'chown', 'fchown', 'chmod', 'mkdir'] as $name) {
            $this->assertSame(0, (int) round($incr[$name] ?? 0), "no $name in an increment: $calls");
        }
        $this->assertEqualsWithDelta(3, $incr['rename'] ?? 0, 0.01, $calls);
        $this->assertLessThanOrEqual(0.2, $incr['getrandom'] ?? 0, $calls);
        // 27 and 14 of them in a row, and a listing of the target's
        // directory when an update sweeps old temporary files.
        $this->assertLessThanOrEqual(14.2, $incr['newfstatat'] ?? 0, "stats of the lock directory, the turnstile, the target, the token, its workspace, the open handles and what PHP resolves: $calls");
        $this->assertLessThanOrEqual(28, $incr['all'], "an increment made 43 such calls before: $calls");
    }

    public function testALockDirectoryReplacedOrChangedIsJudgedAgain(): void
    {
        $l = "$this->dir/a.lock";
        withLock($l, fn () => null);
        withLock($l, fn () => null);

        // Another directory put in its place, which every user may write.
        rename($l, "$l.judged");
        mkdir($l);
        mkdir("$l/lockfile");
        chmod($l, 0777);
        $this->assertSame('untrusted', self::errorOf(fn () => withLock($l, fn () => null), $e), 'the planted directory');
        $this->assertStringContainsString($l, $e->getMessage());
        $this->assertSame(['lockfile'], self::names($l), 'nothing in it was touched');
        self::removeTree($l);
        rename("$l.judged", $l);
        $this->assertSame(7, withLock($l, fn () => 7), 'the judged one back: trusted');

        // The same directory, its mode changed.
        chmod($l, 0777);
        $this->assertSame('untrusted', self::errorOf(fn () => withLock($l, fn () => null)), 'the mode changed');
        $this->assertSame(['lockfile'], self::names($l));
        chmod($l, 0755);
        $this->assertSame(8, withLock($l, fn () => 8));
        $this->assertLockFree($l);

        if (posix_geteuid() !== 0) {
            return;  // changing an owner needs root
        }
        chown($l, 65534);
        $this->assertSame('untrusted', self::errorOf(fn () => withLock($l, fn () => null), $e), 'the owner changed');
        $this->assertStringContainsString('uid 65534', $e->getMessage());
        $this->assertSame(['lockfile'], self::names($l));
        chown($l, 0);
        $this->assertSame(9, withLock($l, fn () => 9));
        $this->assertLockFree($l);
    }

    public function testATokenOrWorkspaceReplacedOrChangedIsJudgedAgainAndTheCounterKept(): void
    {
        $c = "$this->dir/c.count";
        $this->assertSame(1, increment($c));
        $this->assertSame(2, increment($c));
        $refused = function (string $what) use ($c): void {
            $this->assertSame('untrusted', self::errorOf(fn () => increment($c), $e), $what);
            $this->assertStringContainsString("$c.lock/lockfile.", $e->getMessage(), "naming it: $what");
            $this->assertSame("2\n", file_get_contents($c), "the counter kept: $what");
            $this->assertNoTemporaryFiles($this->dir);
            $this->assertLockFree("$c.lock");
        };
        $w = "$c.lock/lockfile/w";

        // The workspace replaced by another directory, which every user may write.
        rename($w, "$this->dir/w.judged");
        mkdir($w);
        chmod($w, 0777);
        $refused('a workspace put in place of the judged one');
        rmdir($w);
        rename("$this->dir/w.judged", $w);
        $this->assertSame(3, increment($c), 'the judged one back');
        file_put_contents($c, "2\n");

        // The token's mode changed.
        chmod("$c.lock/lockfile", 0777);
        $refused('a token every user may write');
        chmod("$c.lock/lockfile", 0755);
        $this->assertSame(3, increment($c));
        file_put_contents($c, "2\n");

        if (posix_geteuid() !== 0) {
            return;  // changing an owner needs root
        }
        chown($w, 65534);
        $refused('a workspace of another user');
        chown($w, 0);
        $this->assertSame(3, increment($c));
    }

    public function testAChangedUmaskNeverWidensTheModeOfACommit(): void
    {
        $c = "$this->dir/c.count";
        $old = umask(022);
        try {
            $this->assertSame(1, increment($c));
            $this->assertSame(2, increment($c));
            // The umask remembered would make the file 0644 as it is; the
            // one in force now makes 0666, which is seen and made again.
            umask(0);
            $this->assertSame(3, increment($c));
            $this->assertSame(0644, self::modeOf($c), 'the counter keeps its mode');
            chmod($c, 0600);
            $this->assertSame(4, increment($c));
            $this->assertSame(0600, self::modeOf($c), 'a narrower mode kept too');
            umask(077);
            chmod($c, 0640);
            $this->assertSame(5, increment($c));
            $this->assertSame(0640, self::modeOf($c), 'and a wider one than the umask gives');
            umask(022);
            writeFile("$this->dir/new", "x\n", ['lock' => "$this->dir/new.lock"]);
            $this->assertSame(0644, self::modeOf("$this->dir/new"), 'a new file: 0644 less the umask in force');
            umask(027);
            writeFile("$this->dir/new2", "x\n", ['lock' => "$this->dir/new.lock"]);
            $this->assertSame(0640, self::modeOf("$this->dir/new2"), 'the umask changed since: the new one');
        } finally {
            umask($old);
        }
        $this->assertSame("5\n", file_get_contents($c));
        $this->assertNoTemporaryFiles($this->dir);
        $this->assertLockFree("$c.lock");
    }

    public function testAForkedChildDrawsRandomBytesOfItsOwn(): void
    {
        $parentNext = Native::token(1);  // the parent's block of random bytes is read
        $child = Child::start(function ($channel): void {
            $channel->send(Native::token(1));
        });
        $childToken = $child->channel->receive();
        $this->assertSame(0, $child->wait());
        $mine = Native::token(1);
        $nonce = fn (string $token) => substr($token, -16);
        $this->assertMatchesRegularExpression('/\.[0-9a-f]{16}\z/', $childToken);
        $this->assertNotSame($nonce($mine), $nonce($childToken), 'the child does not reuse the parent\'s next bytes');
        $this->assertNotSame($nonce($parentNext), $nonce($mine));
        $this->assertNotSame(Native::identity()['owner'], substr($childToken, strlen('lockfile.1.'), -16), 'and its token names its own pid');
    }

    public function testATargetDirectoryRemovedSinceFailsNamingItAndLeavesNothing(): void
    {
        $sub = "$this->dir/sub";
        $lock = "$this->dir/sub.lock";
        mkdir($sub);
        $this->assertSame(1, increment("$sub/c.count", ['lock' => $lock]));
        unlink("$sub/c.count");
        rmdir($sub);
        $this->assertSame('system', self::errorOf(fn () => increment("$sub/c.count", ['lock' => $lock]), $e));
        $this->assertSame(2, $e->getErrno(), 'ENOENT');
        $this->assertStringContainsString("$sub/c.count", $e->getMessage());
        $this->assertFileDoesNotExist($sub, 'nothing made in its place');
        $this->assertNoTemporaryFiles($this->dir);
        $this->assertLockFree($lock);
        mkdir($sub);
        $this->assertSame(1, increment("$sub/c.count", ['lock' => $lock]), 'made again: counted again');
    }

    private static function modeOf(string $path): int
    {
        clearstatcache();
        return fileperms($path) & 07777;
    }

    /** @return list<string> */
    private static function names(string $dir): array
    {
        $names = array_values(array_diff(scandir($dir), ['.', '..']));
        sort($names);
        return $names;
    }

    private static function errorOf(callable $fn, ?Exception &$e = null): string
    {
        try {
            $fn();
        } catch (Exception $caught) {
            $e = $caught;
            return $caught->getError();
        }
        return 'no error';
    }
}
