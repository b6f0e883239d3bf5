<?php

declare(strict_types=1);

namespace Tokenlock;

use Tokenlock\Files\Target;
use Tokenlock\Files\Reading;
use Tokenlock\Files\Commit;
use Tokenlock\Files\Counter;

/**
 * The atomic write and the update committed through the lock's token
 * (docs/atomic-writes.md, docs/protocol.md "The fence made of path
 * names"), in PHP: no process is started.
 *
 * PHP gives file times in whole seconds, so the version marks it writes
 * name the second of the commit; that only makes it more cautious about a
 * file changed outside the lock within two seconds of a commit. PHP's
 * fopen() cannot ask for O_NOFOLLOW (it can for O_NONBLOCK, mode 'n'): the
 * target is judged with lstat() before it is opened and checked to be the
 * same file after.
 *
 * @internal
 */
final class Files
{
    use Target;
    use Reading;
    use Commit;
    use Counter;

    /** The largest file an update reads (default_read_limit). */
    public const READ_LIMIT = 64 << 20;
    /**
     * The largest counter file read (docs/security.md): one unsigned
     * decimal and a newline take 21 bytes. Bounded this tightly so that
     * no counter, whatever it holds, makes increment() allocate past a
     * host's memory_limit, a fatal error that would skip the release.
     */
    public const COUNTER_LIMIT = 64;
    private const LOCAL_FS = ['ext2', 'ext3', 'ext4', 'xfs', 'btrfs', 'tmpfs', 'ramfs', 'f2fs', 'overlay', 'zfs', 'reiserfs', 'jfs', 'bcachefs', 'nilfs2'];

    /** How long a stale read on a network filesystem is read again; tests shorten it. */
    public static int $staleReadBudgetUs = 3000000;

    /**
     * Per lock directory: whether it is on a local filesystem. Tests set
     * an entry to play a network filesystem on a local disk.
     *
     * @var array<string, bool>
     */
    public static array $localFor = [];

    /** @var array<string, bool> asked once per lock directory and process */
    private static array $localSeen = [];

    /**
     * Whether a call with these options runs natively: unless it names a
     * command, or asks for a flush this PHP (before 8.1) cannot make.
     *
     * @param array<string, mixed> $options
     */
    public static function native(array $options, string $sync): bool
    {
        return !isset($options['command']) && ($sync === 'none' || function_exists('fsync'));
    }

    private static function onLocalFs(string $lockDir): bool
    {
        return self::$localFor[$lockDir] ?? self::$localSeen[$lockDir] ??= (function () use ($lockDir): bool {
            $type = Native::dirFsType($lockDir);
            return $type === null || in_array($type, self::LOCAL_FS, true);
        })();
    }

    private static function advice(int $errno, string $dir): string
    {
        return match ($errno) {
            1, 13 => "check the permissions of $dir: this process must be able to write and search it",
            2 => 'the directory of the file must exist',
            28, 122 => "the filesystem of $dir is full or over quota: free space",
            30 => "the filesystem of $dir is mounted read-only",
            default => '',
        };
    }

    /** @param array{path: string, dir: string} $t */
    private static function fileError(string $step, array $t, string $what, int $errno): Exception
    {
        return Native::systemError($step, $t['path'], $what, $errno, self::advice($errno, $t['dir']));
    }

    /** The errno of a target replaced between its lstat and its open. */
    private const EREPLACED = 11;

    /**
     * The update flow of update_file: lock, read, compute, commit through
     * the token, release, flush the directory. $compute gets the current
     * contents (null: missing) and returns [new contents, value]; the value
     * is returned.
     *
     * @param callable(?string): array{0: string, 1: mixed} $compute
     * @param array{wait?: ?float, sync: string, mode?: ?int, follow?: bool, lease_us?: int} $o
     */
    public static function update(string $path, string $lockDir, callable $compute, array $o): mixed
    {
        $dir = Native::lockPath($lockDir);
        $leaseUs = $o['lease_us'] ?? Native::leaseUs(null);
        $token = Native::acquire($dir, array_key_exists('wait', $o) ? $o['wait'] : Command::DEFAULT_WAIT, $leaseUs, Native::group($o['group'] ?? null));
        $t = null;
        $value = null;
        try {
            $t = self::resolveTarget('write', $path, $o['follow'] ?? false);
            // Housekeeping by chance: mt_rand() asks the kernel for nothing.
            if (mt_rand(0, 31) === 0) {
                self::sweepTemps($t, $leaseUs);
            }
            $marks = !self::onLocalFs($dir);
            $oldMark = $marks ? self::readVersionMark("$dir/$token/w") : null;
            $limit = empty($o['counter']) ? self::READ_LIMIT : self::COUNTER_LIMIT;
            [$current, $mtime] = self::readTarget($t, $limit, $t['lstat']);
            if ($oldMark !== null) {
                [$current, $mtime] = self::readPastStale($t, $oldMark, $leaseUs, $current, $mtime, $limit);
            }
            [$next, $value] = $compute($current);
            $mode = self::modeOf($t, $o['mode'] ?? null);
            if (!self::fencedCommit($dir, $token, $t, $next, $o['sync'], $mode, $marks, $oldMark)) {
                $token = self::unfencedCommit($dir, $token, $t, $next, $o['sync'], $mode, $leaseUs);
            }
        } finally {
            // Released whatever happened; after a commit a failure to
            // release is not reported, which would invite a retry that
            // counts twice.
            try {
                Native::release($dir, $token);
            } catch (Exception $ignored) {
            }
        }
        self::syncTargetDir($t, $o['sync'], 'the update is committed', '; do not repeat the update', $value);
        return $value;
    }
}
