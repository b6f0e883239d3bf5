<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\Tests\Support\TempDirTestCase;
use Tokenlock\Tests\Support\Tool;

/**
 * The whole API where a host forbids starting processes: a PHP run with
 * disable_functions=proc_open,popen,exec,shell_exec,system,passthru,pcntl_exec
 * and TOKENLOCK_COMMAND naming nothing. Every operation still works.
 */
final class NoProcessTest extends TempDirTestCase
{
    private const DISABLED = 'proc_open,popen,exec,shell_exec,system,passthru,pcntl_exec';

    private const SCRIPT = <<<'PHP'
<?php
declare(strict_types=1);
require $argv[1];
$d = $argv[2];
$out = [];
foreach (['proc_open', 'popen', 'exec', 'shell_exec', 'system', 'passthru', 'pcntl_exec'] as $f) {
    $out['disabled'][$f] = !function_exists($f) || !is_callable($f);
}
$lock = Tokenlock\Lock::acquire("$d/a.lock", ['wait' => 1, 'lease' => 60]);
$out['holder_pid'] = Tokenlock\holder("$d/a.lock")['pid'] ?? null;
$out['busy'] = Tokenlock\Lock::tryAcquire("$d/a.lock") === null;
try {
    Tokenlock\increment("$d/a.count", ['lock' => "$d/a.lock", 'wait' => 0]);
    $out['increment_under_held_lock'] = 'counted';
} catch (Tokenlock\BusyException $e) {
    $out['increment_under_held_lock'] = $e->getError();
}
$out['refreshed'] = $lock->refresh(120) !== '';
$lock->release();
$out['free'] = Tokenlock\holder("$d/a.lock") === null;
$out['with_lock'] = Tokenlock\withLock("$d/a.lock", fn (Tokenlock\Lock $l) => 'ran');
Tokenlock\writeFile("$d/plain", "one\n");
Tokenlock\writeFile("$d/locked", "two\n", ['lock' => "$d/locked.lock", 'mode' => 0600, 'sync' => 'file']);
symlink('plain', "$d/link");
Tokenlock\writeFile("$d/link", "three\n", ['follow_symlinks' => true]);
$out['files'] = [file_get_contents("$d/plain"), file_get_contents("$d/locked"), sprintf('%o', fileperms("$d/locked") & 0777)];
$out['counts'] = [Tokenlock\increment("$d/n.count"), Tokenlock\increment("$d/n.count", ['by' => 9, 'sync' => 'none']),
    Tokenlock\increment("$d/n.count", ['by' => 0, 'wait' => null]), Tokenlock\readCounter("$d/n.count")];
file_put_contents("$d/bad.count", "x\n");
try {
    Tokenlock\increment("$d/bad.count");
} catch (Tokenlock\Exception $e) {
    $out['corrupt'] = $e->getError();
}
try {
    Tokenlock\findCommand();
} catch (Tokenlock\Exception $e) {
    $out['find_command'] = $e->getError();
}
echo json_encode($out), "\n";
PHP;

    /** @return array<string, array{0: list<string>}> */
    public function configurations(): array
    {
        // -n: no php.ini, so none of the shared extensions (posix, pcntl).
        return ['with the host\'s php.ini' => [[]], 'without php.ini or extensions' => [['-n']]];
    }

    /**
     * @dataProvider configurations
     * @param list<string> $phpOptions
     */
    public function testEveryOperationWorksWithProcessFunctionsDisabledAndNoCommand(array $phpOptions): void
    {
        file_put_contents("$this->dir/script.php", self::SCRIPT);
        mkdir("$this->dir/d");
        $module = TOKENLOCK_TEST_MODULE;
        $env = ['TOKENLOCK_COMMAND' => "$this->dir/nowhere/tokenlock", 'PATH' => "$this->dir/empty", 'HOME' => "$this->dir/nohome"];
        $proc = proc_open([PHP_BINARY, ...$phpOptions, ...['-d', 'disable_functions=' . self::DISABLED, '-d', 'error_reporting=-1', '-d', 'display_errors=stderr',
            "$this->dir/script.php", $module, "$this->dir/d"]], [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, null, $env);
        $this->assertIsResource($proc);
        $out = stream_get_contents($pipes[1]);
        $err = stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        $this->assertSame(0, proc_close($proc), $err . $out);
        $this->assertSame('', $err, 'no warning, no notice');
        $r = json_decode((string) $out, true);
        $this->assertSame(array_fill_keys(explode(',', self::DISABLED), true), $r['disabled'], 'the functions are disabled');
        $this->assertIsInt($r['holder_pid']);
        $this->assertTrue($r['busy']);
        $this->assertSame('busy', $r['increment_under_held_lock']);
        $this->assertTrue($r['refreshed']);
        $this->assertTrue($r['free']);
        $this->assertSame('ran', $r['with_lock']);
        $this->assertSame(["three\n", "two\n", '600'], $r['files']);
        $this->assertSame([1, 10, 10, 10], $r['counts']);
        $this->assertSame('corrupt_data', $r['corrupt']);
        $this->assertSame('command_not_found', $r['find_command'], 'there was no command to start');
        $this->assertSame("x\n", file_get_contents("$this->dir/d/bad.count"));
        $this->assertNoTemporaryFiles("$this->dir/d");
        foreach (['a.lock', 'locked.lock', 'n.count.lock', 'bad.count.lock'] as $lockDir) {
            $this->assertSame('free', Tool::status("$this->dir/d/$lockDir")['state'], $lockDir);
        }
    }
}
