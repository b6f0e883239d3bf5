<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\Lock;
use Tokenlock\Tests\Support\Channel;
use Tokenlock\Tests\Support\Child;
use Tokenlock\Tests\Support\TempDirTestCase;
use Tokenlock\Tests\Support\Tool;

/**
 * Every lock still held is released when the request ends, however it
 * ends: a fatal error skips destructors, so without this the lock would
 * stay until its lease ends (tests/e2e/php_fpm_request_end.sh shows it
 * under php-fpm, where the process lives on). Here each script is its own
 * process; the token it leaves on disk tells whether it was released.
 */
final class RequestEndTest extends TempDirTestCase
{
    /** How each script ends, after taking the lock into $lock: [PHP, what its stderr says]. */
    private const ENDS = [
        'exit' => ['exit(3);', null],
        'uncaught exception' => ['throw new RuntimeException("boom");', 'Uncaught RuntimeException: boom'],
        'fatal error' => ['undefined_function();', 'Call to undefined function'],
        'memory_limit' => ['ini_set("memory_limit", "16M"); $s = str_repeat("x", 64 << 20);', 'Allowed memory size'],
        'max_execution_time' => ['set_time_limit(1); for (;;) { $n = ($n ?? 0) + 1; }', 'Maximum execution time'],
    ];

    /** Runs BODY after the module is loaded; [exit status, stdout, stderr]. */
    private function runScript(string $body, array $ini = []): array
    {
        $script = "$this->dir/script.php";
        file_put_contents($script, "<?php\nrequire " . var_export(TOKENLOCK_TEST_MODULE, true) . ";\n$body\n");
        $argv = [PHP_BINARY, '-d', 'display_errors=stderr', '-d', 'error_reporting=-1'];
        foreach ($ini as $setting) {
            array_push($argv, '-d', $setting);
        }
        $proc = proc_open([...$argv, $script], [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $out = (string) stream_get_contents($pipes[1]);
        $err = (string) stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        return [proc_close($proc), $out, $err];
    }

    /** The lock directory's token names. */
    private function tokens(string $lockDir): array
    {
        return array_values(array_filter(scandir($lockDir), fn (string $n): bool => str_starts_with($n, 'lockfile')));
    }

    /** @return iterable<string, array{0: string}> */
    public static function ends(): iterable
    {
        foreach (array_keys(self::ENDS) as $end) {
            yield $end => [$end];
        }
    }

    /** @dataProvider ends */
    public function testALockHeldWhenTheRequestDiesIsReleased(string $end): void
    {
        [$php, $said] = self::ENDS[$end];
        $lockDir = "$this->dir/a.lock";
        [$code, $token, $err] = $this->runScript('$lock = Tokenlock\Lock::acquire(' . var_export($lockDir, true) . ");\n"
            . "echo \$lock->token();\n$php");
        $this->assertNotSame(0, $code, "the script was to end with: $end");
        if ($said !== null) {
            $this->assertStringContainsString($said, $err);
        }
        $this->assertStringNotContainsString('Tokenlock', $err, 'the release at the end says nothing');
        $this->assertStringStartsWith('lockfile.', $token);
        $this->assertSame(['lockfile'], $this->tokens($lockDir), "the lock of a request ended by $end is free, not left to a dead owner");
        $this->assertLockFree($lockDir);
    }

    /** withLock() and increment() hold tokens of their own, without a Lock object. */
    public function testAnUpdateOrCriticalSectionCutShortReleasesItsLock(): void
    {
        $lockDir = "$this->dir/b.lock";
        [, , $err] = $this->runScript('Tokenlock\withLock(' . var_export($lockDir, true) . ', function () { ini_set("memory_limit", "16M"); $s = str_repeat("x", 64 << 20); });');
        $this->assertStringContainsString('Allowed memory size', $err);
        $this->assertSame(['lockfile'], $this->tokens($lockDir));
        $count = "$this->dir/c.count";
        [$code, $out, $err] = $this->runScript('echo Tokenlock\increment(' . var_export($count, true) . "); exit(1);");
        $this->assertSame([1, '1'], [$code, $out], $err);
        $this->assertSame(['lockfile'], $this->tokens("$count.lock"));
        $this->assertNoTemporaryFiles($this->dir);
    }

    /**
     * The script's own shutdown functions, registered before or after the
     * lock was taken, run with their locks still held; one that releases its lock itself gets no
     * error for it, and neither does the destructor after the release.
     */
    public function testShutdownFunctionsStillHoldTheirLocks(): void
    {
        $lockDir = "$this->dir/a.lock";
        [$code, $out, $err] = $this->runScript('$lock = Tokenlock\Lock::acquire(' . var_export($lockDir, true) . ");\n"
            . 'register_shutdown_function(function () use ($lock) { echo $lock->isHeld() ? "held " : "not held "; '
            . '$lock->refresh(); $lock->release(); echo $lock->isHeld() ? "held" : "released"; });' . "\n"
            . '$GLOBALS["other"] = Tokenlock\Lock::acquire(' . var_export("$lockDir.2", true) . ");\n"
            . 'register_shutdown_function(function () { echo $GLOBALS["other"]->isHeld() ? " other held" : " other not held"; });' . "\n"
            . "exit(0);");
        $this->assertSame([0, 'held released other held', ''], [$code, $out, $err]);
        $this->assertSame(['lockfile'], $this->tokens($lockDir));
        $this->assertSame(['lockfile'], $this->tokens("$lockDir.2"), 'released after the shutdown functions');
    }

    /** After the release at the end, the object knows: no warning from its destructor or from release(). */
    public function testALockReleasedAtTheEndIsNoLongerHeldByItsObject(): void
    {
        $lockDir = "$this->dir/a.lock";
        [$code, $out, $err] = $this->runScript('$GLOBALS["lock"] = Tokenlock\Lock::acquire(' . var_export($lockDir, true) . ");\n"
            . 'class Late { public function __destruct() { echo $GLOBALS["lock"]->isHeld() ? "held" : "not held"; $GLOBALS["lock"]->release(); } }' . "\n"
            . '$GLOBALS["late"] = new Late();');
        $this->assertSame([0, 'not held', ''], [$code, $out, $err]);
        $this->assertSame(['lockfile'], $this->tokens($lockDir));
    }

    /** A forked child ending by exit() or a fatal error leaves its parent's lock alone, silently. */
    public function testAForkedChildDyingLeavesItsParentsLockHeld(): void
    {
        $lockDir = "$this->dir/a.lock";
        $lock = Lock::acquire($lockDir);
        foreach (['exit' => fn () => exit(0), 'fatal' => fn () => str_repeat('x', PHP_INT_MAX)] as $how => $die) {
            $child = Child::start(function (Channel $ch) use ($die): void {
                // Nothing of the runner's output, nor the error, is printed.
                while (ob_get_level() > 0) {
                    ob_end_clean();
                }
                ini_set('display_errors', '0');
                ini_set('log_errors', '0');
                $ch->send('dying');
                $die();
            });
            $this->assertSame('dying', $child->channel->receive());
            $child->wait();
            $this->assertSame([$lock->token()], $this->tokens($lockDir), "a child ended by $how released its parent's lock");
            $this->assertSame($lock->token(), Tool::status($lockDir)['token']);
        }
        $this->assertTrue($lock->isHeld());
        $lock->release();  // would throw LockLostException had a child released it
        $this->assertLockFree($lockDir);
    }
}
