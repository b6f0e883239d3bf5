<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\Tests\Support\TempDirTestCase;

/**
 * Who this process is decides whom it trusts: a PHP that cannot call
 * posix_geteuid() and cannot read /proc (open_basedir) learns it from a
 * temporary file it makes, or refuses; it never trusts every owner.
 */
final class EuidTest extends TempDirTestCase
{
    private const SCRIPT = <<<'PHP'
<?php
declare(strict_types=1);
require $argv[1];
$out = ['posix' => function_exists('posix_geteuid'), 'proc' => @file_get_contents('/proc/self/status') !== false];
foreach (array_slice($argv, 2) as $lockDir) {
    try {
        Tokenlock\Lock::acquire($lockDir, ['wait' => 0])->release();
        $out[basename($lockDir)] = 'ok';
    } catch (Tokenlock\Exception $e) {
        $out[basename($lockDir)] = $e->getError() . ' ' . $e->getCode() . ' ' . $e->getMessage();
    }
}
echo json_encode($out), "\n";
PHP;

    /**
     * Runs the script without php.ini (so without posix), /proc outside
     * open_basedir, and the extra -d settings.
     *
     * @param list<string> $settings
     * @param list<string> $lockDirs
     * @return array<string, mixed>
     */
    private function blind(array $settings, array $lockDirs): array
    {
        file_put_contents("$this->dir/script.php", self::SCRIPT);
        $module = TOKENLOCK_TEST_MODULE;
        $argv = [PHP_BINARY, '-n', '-d', 'open_basedir=' . dirname(TOKENLOCK_TEST_MODULE) . ":$this->dir", '-d', 'error_reporting=-1', '-d', 'display_errors=stderr'];
        foreach ($settings as $s) {
            array_push($argv, '-d', $s);
        }
        $proc = proc_open([...$argv, "$this->dir/script.php", $module, ...$lockDirs], [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $out = (string) stream_get_contents($pipes[1]);
        $err = (string) stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        $this->assertSame(0, proc_close($proc), $err . $out);
        $r = json_decode($out, true);
        $this->assertIsArray($r, $err . $out);
        $this->assertFalse($r['posix'], 'no posix_geteuid()');
        $this->assertFalse($r['proc'], '/proc is out of reach');
        return $r;
    }

    public function testTheEuidIsLearnedFromATemporaryFileAndAnotherUsersDirectoryIsRefused(): void
    {
        $mine = "$this->dir/mine.lock";
        $lockDirs = [$mine];
        if (posix_geteuid() === 0) {
            mkdir("$this->dir/other.lock/lockfile", 0755, true);
            chown("$this->dir/other.lock", 65534);
            $lockDirs[] = "$this->dir/other.lock";
        }
        $r = $this->blind([], $lockDirs);
        $this->assertSame('ok', $r['mine.lock'], 'our own lock works');
        if (posix_geteuid() === 0) {
            $this->assertStringStartsWith('untrusted 77 ', $r['other.lock']);
            $this->assertStringContainsString('this process runs as uid 0', $r['other.lock']);
            $this->assertStringContainsString('it belongs to uid 65534', $r['other.lock']);
            $this->assertSame(['lockfile'], self::tree("$this->dir/other.lock"), 'nothing in it was touched');
        }
    }

    public function testWithoutAnyWayToLearnTheEuidEveryLockIsRefused(): void
    {
        // No temporary file either: its directory does not exist.
        $r = $this->blind(['sys_temp_dir=' . "$this->dir/none"], ["$this->dir/a.lock"]);
        $this->assertStringStartsWith('system 71 tokenlock: acquire', $r['a.lock']);
        $this->assertStringContainsString('cannot tell which user this process runs as', $r['a.lock']);
        $this->assertStringContainsString('enable the posix extension', $r['a.lock']);
        $this->assertSame(['script.php'], self::tree($this->dir), 'nothing was made');
    }
}
