<?php

declare(strict_types=1);

namespace Tokenlock\Tests\Support;

use PHPUnit\Framework\TestCase;

/**
 * A test with its own scratch directory, removed afterwards, and helpers to
 * check that a failed operation left nothing behind.
 */
abstract class TempDirTestCase extends TestCase
{
    protected string $dir;

    protected function setUp(): void
    {
        $base = sys_get_temp_dir() . '/tokenlock-php-test.' . getmypid() . '.' . bin2hex(random_bytes(4));
        if (!mkdir($base, 0700)) {
            throw new \RuntimeException("cannot create $base");
        }
        $this->dir = $base;
    }

    protected function tearDown(): void
    {
        Child::reapAll();
        self::removeTree($this->dir);
    }

    protected static function removeTree(string $path): void
    {
        if (is_link($path) || is_file($path)) {
            unlink($path);
            return;
        }
        if (!is_dir($path)) {
            return;
        }
        foreach (scandir($path) as $name) {
            if ($name !== '.' && $name !== '..') {
                self::removeTree("$path/$name");
            }
        }
        rmdir($path);
    }

    /**
     * Every name below $dir, relative to it, sorted.
     *
     * @return list<string>
     */
    protected static function tree(string $dir): array
    {
        $names = [];
        $it = new \RecursiveIteratorIterator(
            new \RecursiveDirectoryIterator($dir, \FilesystemIterator::SKIP_DOTS),
            \RecursiveIteratorIterator::SELF_FIRST
        );
        foreach ($it as $path => $info) {
            $names[] = substr($path, strlen($dir) + 1);
        }
        sort($names);
        return $names;
    }

    /** Fails if a temporary file of an atomic write or an update is left below $dir. */
    protected function assertNoTemporaryFiles(string $dir): void
    {
        $left = array_values(array_filter(self::tree($dir), fn (string $n) => strpos(basename($n), '.tmp.') !== false));
        $this->assertSame([], $left, "temporary files left below $dir");
    }

    protected function assertLockFree(string $lockDir): void
    {
        $this->assertSame('free', Tool::status($lockDir)['state'], "the lock $lockDir should be free");
    }
}
