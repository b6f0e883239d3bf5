<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\Exception;
use Tokenlock\Files;
use Tokenlock\Tests\Support\TempDirTestCase;
use Tokenlock\Tests\Support\Tool;

use function Tokenlock\increment;
use function Tokenlock\readCounter;

/**
 * A counter file holds at most 64 bytes (docs/security.md, Reads): more
 * is corrupt_data, read no further, nothing written, the lock released,
 * whatever the host's memory_limit.
 */
final class CounterLimitTest extends TempDirTestCase
{
    /** A counter file of SIZE bytes: digits, or a sparse file of zeros past 4 KiB. */
    private function counter(string $name, int $size): string
    {
        $path = "$this->dir/$name";
        if ($size <= 4096) {
            file_put_contents($path, str_repeat('7', $size - 1) . "\n");
        } else {
            $h = fopen($path, 'w');
            ftruncate($h, $size);
            fclose($h);
        }
        return $path;
    }

    public function testACounterOfMoreThan64BytesIsCorruptAndLeftAsItIs(): void
    {
        $this->assertSame(64, Files::COUNTER_LIMIT);
        foreach ([65, 4096, Files::READ_LIMIT + 1] as $size) {
            $path = $this->counter("c$size.count", $size);
            $before = md5_file($path);
            foreach (['increment' => fn () => increment($path, ['wait' => 0]), 'readCounter' => fn () => readCounter($path)] as $call => $fn) {
                try {
                    $fn();
                    $this->fail("$call of a counter of $size bytes succeeded");
                } catch (Exception $e) {
                    $this->assertSame(['corrupt_data', 65], [$e->getError(), $e->getCode()], "$call, $size bytes: " . $e->getMessage());
                    $this->assertStringContainsString("read counter $path", $e->getMessage());
                    $this->assertStringContainsString('more than the 64 a counter may', $e->getMessage());
                }
            }
            clearstatcache();
            $this->assertSame($size, filesize($path), 'left as it was');
            $this->assertSame($before, md5_file($path));
            $this->assertSame('free', Tool::status("$path.lock")['state'], 'the lock was released');
        }
        $this->assertNoTemporaryFiles($this->dir);
        // 64 bytes are read, and judged by their form.
        $path = $this->counter('c64.count', 64);
        try {
            increment($path);
            $this->fail('a 63-digit counter was counted');
        } catch (Exception $e) {
            $this->assertSame('corrupt_data', $e->getError());
            $this->assertStringContainsString('does not hold one unsigned decimal', $e->getMessage());
        }
    }

    /**
     * A 64 MiB counter under a 4 MB memory_limit: before the limit a read
     * of it ended PHP with a fatal error, which skips every finally and
     * left the token held.
     */
    public function testAHugeCounterUnderASmallMemoryLimitIsRefusedAndTheLockReleased(): void
    {
        $path = $this->counter('huge.count', Files::READ_LIMIT);
        $script = "$this->dir/incr.php";
        file_put_contents($script, '<?php require $argv[1]; try { Tokenlock\increment($argv[2], ["wait" => 0]); echo "counted\n"; } '
            . 'catch (Tokenlock\Exception $e) { echo $e->getError(), "\n"; }');
        $proc = proc_open([PHP_BINARY, '-n', '-d', 'memory_limit=4M', $script, TOKENLOCK_TEST_MODULE, $path],
            [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $out = (string) stream_get_contents($pipes[1]);
        $err = (string) stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        $this->assertSame(0, proc_close($proc), $err . $out);
        $this->assertSame("corrupt_data\n", $out, $err);
        $this->assertSame('free', Tool::status("$path.lock")['state'], 'the lock was released');
        clearstatcache();
        $this->assertSame(Files::READ_LIMIT, filesize($path));
    }
}
