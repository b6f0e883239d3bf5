<?php

declare(strict_types=1);

namespace Tokenlock\Native;

use Tokenlock\Exception;

/**
 * The lock directory listed and created: its tokens read (a second
 * listing confirms anything wrong), and a missing one made by renaming
 * a populated temporary directory onto its name, so that concurrent
 * creators cannot make two tokens.
 *
 * @internal
 */
trait Directory
{
    /** The fix for EPERM on a rename: a sticky lock directory lets only the token's owner rename it. */
    private static function stickyFix(string $dir): string
    {
        clearstatcache();
        $d = @stat($dir);
        $t = @lstat("$dir/" . self::FREE);
        if ($d !== false && ($d['mode'] & 01000) && $t !== false) {
            return sprintf('lock directory %s is sticky and the token belongs to uid %d (we are uid %d); use a non-sticky directory shared by the users that lock', $dir, $t['uid'], self::euid());
        }
        return 'the filesystem or a file attribute forbids this rename; a sticky directory only lets the token\'s owner rename it';
    }

    /**
     * The tokens of DIR: ['free'], ['held', [name, fields]] or ['missing']
     * (no directory, or an empty one). No token beside other entries, two
     * tokens or a malformed one fail, once a second listing agrees.
     *
     * @return array{0: string, 1?: array{0: string, 1: array{expiry: int, tag: string, pid: int, start: string, legacy: bool}}}
     */
    public static function look(string $dir, string $step = 'acquire'): array
    {
        for ($attempt = 0; ; ++$attempt) {
            error_clear_last();
            $names = @scandir($dir);
            if ($names === false) {
                $errno = self::lastErrno();
                if ($errno === 2) {
                    return ['missing'];
                }
                throw self::systemError($step, $dir, 'cannot list the lock directory', $errno ?: 5);
            }
            $names = array_values(array_diff($names, ['.', '..']));
            $tokens = [];
            $malformed = [];
            foreach ($names as $name) {
                $c = self::classify($name);
                if ($c[0] === 'free') {
                    return ['free'];
                } elseif ($c[0] === 'held' || $c[0] === 'legacy') {
                    $tokens[] = [$name, $c[1]];
                } elseif ($c[0] === 'malformed') {
                    $malformed[] = $name;
                }
            }
            if (!$malformed && count($tokens) === 1) {
                return ['held', $tokens[0]];
            }
            if (!$names) {
                return ['missing'];
            }
            // A listing during a rename may miss a name or show it twice.
            if ($attempt === 0) {
                usleep(2000);
                continue;
            }
            if ($malformed) {
                throw new Exception('lock_corrupt', "tokenlock: $step $dir: the entry " . addcslashes($malformed[0], "\0..\37\177..\377") . ' starts like a token but is not one; it was left alone: remove it by hand once no process uses the lock', 69);
            }
            if ($tokens) {
                throw new Exception('lock_corrupt', "tokenlock: $step $dir: it holds " . count($tokens) . ' tokens (' . implode(', ', array_column($tokens, 0)) . '): something outside the protocol copied one; nothing was changed: remove all but one by hand once no process uses the lock', 69);
            }
            throw new Exception('token_missing', "tokenlock: $step $dir: it holds no token, only other entries (" . implode(', ', array_map(fn ($n) => addcslashes($n, "\0..\37\177..\377"), $names)) . '); nothing was changed: remove the directory once no process uses it, and it is created again', 69);
        }
    }

    /**
     * Creates DIR by renaming a populated temporary directory onto its
     * name, so that concurrent creators cannot make two tokens.
     */
    private static function create(string $dir, int $leaseUs, ?int $named): void
    {
        $slash = strrpos($dir, '/');
        $parent = $slash === false ? '.' : ($slash === 0 ? '/' : substr($dir, 0, $slash));
        $name = $slash === false ? $dir : substr($dir, $slash + 1);
        $owned = substr(self::token(self::nowUs() + $leaseUs), strlen(self::PREFIX));
        $initName = strlen("$name.init.$owned") <= 255 ? "$name.init.$owned" : "$name.init." . bin2hex(random_bytes(8));
        $init = "$parent/$initName";
        // A named group shares it: its group, and group write.
        $mode = self::dirMode() | ($named === null ? 0 : 0070);
        error_clear_last();
        if (!@mkdir($init, 0700)) {
            $errno = self::lastErrno() ?: 5;
            throw self::systemError('create', $dir, "cannot create the temporary directory $init", $errno,
                $errno === 2 ? 'the parent directory of the lock directory must exist' : '');
        }
        // chmod after mkdir, so that the umask cannot narrow the mode; the
        // group first, as chgrp may clear the setgid bit.
        if ($named !== null) {
            @chgrp($init, $named);
        }
        @chmod($init, $mode);
        error_clear_last();
        if (!@mkdir("$init/" . self::FREE, 0700)) {
            $errno = self::lastErrno() ?: 5;
            @rmdir($init);
            throw self::systemError('create', $dir, "cannot create the token $init/" . self::FREE, $errno);
        }
        if ($named !== null) {
            @chgrp("$init/" . self::FREE, $named);
        }
        @chmod("$init/" . self::FREE, $mode);
        $errno = self::syncDirectory($init);
        if ($errno !== 0) {
            @rmdir("$init/" . self::FREE);
            @rmdir($init);
            throw self::systemError('create', $dir, "cannot sync $init", $errno);
        }
        $errno = self::rename($init, $dir);
        if ($errno === 0) {
            // Not an error of the lock if this fails: the directory works,
            // and a crash that undoes it is repaired by the next acquire.
            self::syncDirectory($parent);
            self::sweep($dir, $leaseUs);
            return;
        }
        @rmdir("$init/" . self::FREE);
        @rmdir($init);
        clearstatcache(true, $dir);
        // ENOTEMPTY, EEXIST: another creator won. sshfs answers EPERM and
        // EACCES for the same race; an existing DIR tells them apart.
        if ($errno === 39 || $errno === 17 || (($errno === 1 || $errno === 13) && @lstat($dir) !== false) || $errno === 2) {
            return;
        }
        throw self::systemError('create', $dir, "cannot rename $init to the lock directory", $errno);
    }

    /**
     * fsync(2) of a directory: 0 or the errno. PHP 8.0 has no fsync(); the
     * directory then works unflushed, and a crash that undoes it is
     * repaired by the next acquire creating it again.
     */
    private static function syncDirectory(string $path): int
    {
        if (!function_exists('fsync')) {
            return 0;
        }
        error_clear_last();
        $h = @fopen($path, 'r');
        if ($h === false) {
            return self::lastErrno() ?: 5;
        }
        error_clear_last();
        $errno = @fsync($h) ? 0 : (self::lastErrno() ?: 5);
        fclose($h);
        return $errno;
    }
}
