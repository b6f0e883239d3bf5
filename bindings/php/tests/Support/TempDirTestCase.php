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
        if (is_link($path) || (file_exists($path) && !is_dir($path))) {
            unlink($path);  // a file, a link, a FIFO
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

    /**
     * A write-only directory (mode 0333, as upload drop directories are)
     * below the scratch directory: its user can create and rename in it
     * but cannot open it, so fsync(2) of it fails after every commit.
     */
    protected function unflushableDirectory(string $name): string
    {
        $drop = "$this->dir/$name";
        mkdir($drop);
        chmod($this->dir, 0755);
        chmod($drop, 0333);
        return $drop;
    }

    /**
     * The tokenlock command to run where permissions must be able to fail:
     * root opens any directory, so as root a wrapper in the scratch
     * directory runs the command as user nobody.
     */
    protected function commandWithoutPrivileges(): string
    {
        if (posix_geteuid() !== 0) {
            return Tool::path();
        }
        $wrapper = "$this->dir/tokenlock-as-nobody";
        file_put_contents($wrapper, "#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups "
            . escapeshellarg(Tool::path()) . " \"\$@\"\n");
        chmod($wrapper, 0755);
        return $wrapper;
    }

    /** Fails if a temporary file of an atomic write or an update is left below $dir. */
    protected function assertNoTemporaryFiles(string $dir): void
    {
        $left = array_values(array_filter(self::tree($dir), fn (string $n) => strpos(basename($n), '.tmp.') !== false));
        $this->assertSame([], $left, "temporary files left below $dir");
    }

    protected function assertLockFree(string $lockDir): void
    {
        // Another user's lock directory is refused to us (docs/security.md):
        // then its one token must be the free one.
        if (function_exists('posix_geteuid') && fileowner($lockDir) !== posix_geteuid() && fileowner($lockDir) !== 0) {
            $tokens = array_values(array_filter(scandir($lockDir), fn (string $n) => strpos($n, 'lockfile') === 0));
            $this->assertSame(['lockfile'], $tokens, "the lock $lockDir should be free");
            return;
        }
        $this->assertSame('free', Tool::status($lockDir)['state'], "the lock $lockDir should be free");
    }
}
