<?php

declare(strict_types=1);

namespace Tokenlock\Files;

use Tokenlock\DirSyncException;
use Tokenlock\Exception;
use Tokenlock\Native;

/**
 * The target of a write judged (its directory, a symbolic link followed
 * only when asked), and the atomic write itself: a temporary file
 * beside it, flushed as asked, renamed over it.
 *
 * @internal
 */
trait Target
{
    /**
     * The target of a write: path, directory, name, and what a replacement
     * keeps. A symbolic link is replaced unless $follow: then the chain is
     * resolved (at most 40 links), each checked as protected_symlinks does.
     *
     * `lstat` is what the target's lstat() found (false: nothing), which
     * the read under the same lock uses rather than asking again, and
     * `dev` the device of its directory: an entry found there tells that
     * the directory exists and is one, so it is asked only when there is
     * none (a target's directory is looked at once per update, not twice).
     *
     * @return array{path: string, dir: string, name: string, exists: bool, keepMode: ?int, keepOwner: ?array{0: int, 1: int}, lstat: array<string, int>|false, dev: int}
     */
    public static function resolveTarget(string $step, string $path, bool $follow): array
    {
        $bad = fn (string $why) => new Exception('bad_argument', "tokenlock: $step \"$path\": $why", 64);
        if (str_ends_with($path, '/')) {
            throw $bad("the target path ends in '/': name a file");
        }
        for ($hops = 0; ; ++$hops) {
            $slash = strrpos($path, '/');
            $dir = $slash === false ? '.' : ($slash === 0 ? '/' : substr($path, 0, $slash));
            $name = $slash === false ? $path : substr($path, $slash + 1);
            if ($name === '.' || $name === '..') {
                throw $bad('the target must name a file');
            }
            $t = ['path' => $path, 'dir' => $dir, 'name' => $name, 'exists' => false, 'keepMode' => null, 'keepOwner' => null, 'lstat' => false, 'dev' => 0];
            clearstatcache(true, $path);
            $st = @lstat($path);
            if ($st === false) {
                break;
            }
            [$t['lstat'], $t['dev']] = [$st, $st['dev']];
            $type = $st['mode'] & 0170000;
            if ($type === 0120000) {
                if (!$follow) {
                    break;
                }
                if ($hops >= 40) {
                    throw self::fileError($step, $t, 'too many levels of symbolic links', 40);
                }
                self::checkLink($step, $t, $st);
                $to = @readlink($path);
                if ($to === false) {
                    throw self::fileError($step, $t, 'cannot read the symbolic link', Native::lastErrno() ?: 5);
                }
                $path = str_starts_with($to, '/') ? $to : "$dir/$to";
                continue;
            }
            if ($type === 0040000) {
                throw self::fileError($step, $t, 'the target is a directory', 21);
            }
            if ($type !== 0100000) {
                throw Native::systemError($step, $path, 'the target is not a regular file (a device, FIFO or socket cannot be replaced atomically)', 22, 'put a regular file there');
            }
            // Its setuid, setgid and sticky bits belonged to its contents.
            $t['exists'] = true;
            $t['keepMode'] = $st['mode'] & 0777;
            $t['keepOwner'] = [$st['uid'], $st['gid']];
            break;
        }
        if ($t['lstat'] === false) {
            $t['dev'] = self::targetDirDev($step, $t);
        }
        return $t;
    }

    /**
     * The device of the directory of a target that is not there yet,
     * which must be a directory this process can search.
     *
     * @param array{path: string, dir: string} $t
     */
    private static function targetDirDev(string $step, array $t): int
    {
        clearstatcache(true, $t['dir']);
        $dst = @stat($t['dir']);
        if ($dst === false) {
            throw Native::systemError($step, $t['path'], "its directory {$t['dir']} does not exist or cannot be searched", 2, 'create the directory first');
        }
        if (($dst['mode'] & 0170000) !== 0040000) {
            throw self::fileError($step, $t, "{$t['dir']} is not a directory", 20);
        }
        return $dst['dev'];
    }

    /**
     * In a directory that is sticky and writable by all, anyone may plant
     * a link: one is followed only when it is ours or the directory owner's.
     *
     * @param array{path: string, dir: string} $t
     * @param array{uid: int} $link
     */
    private static function checkLink(string $step, array $t, array $link): void
    {
        $d = @stat($t['dir']);
        if ($d === false) {
            throw self::fileError($step, $t, "cannot look at the directory {$t['dir']} of the symbolic link", Native::lastErrno() ?: 2);
        }
        $euid = Native::euid();
        if (!($d['mode'] & 01000) || !($d['mode'] & 0002) || $link['uid'] === $euid || $link['uid'] === $d['uid']) {
            return;
        }
        throw new Exception('untrusted', sprintf('tokenlock: %s %s: refusing to follow the symbolic link %s: it is owned by uid %d, neither this user (uid %s) nor the owner of %s (uid %d), a directory that is sticky and writable by all (mode %04o), where anyone may plant a link; nothing was written or read: name the file it points to directly, or have that link removed and made by this user',
            $step, $t['path'], $t['path'], $link['uid'], $euid, $t['dir'], $d['uid'], $d['mode'] & 07777), 77);
    }

    /**
     * Writes DATA to a new temporary file .NAME.tmp.<16 hex> in $inDir,
     * flushed as $sync asks, and returns its path; on failure nothing is left.
     * PID is this process's (its random bytes are its own).
     *
     * @param array{path: string, dir: string, name: string, keepOwner: ?array{0: int, 1: int}} $t
     */
    public static function writeTemp(array $t, string $inDir, string $data, string $sync, int $mode, int $pid): string
    {
        $tmp = "$inDir/.{$t['name']}.tmp." . Native::nonce($pid);
        [$h, $st] = self::createTemp($t, $tmp, $mode);
        $fail = null;
        // As root, the replaced file's owner and group are kept, so that the
        // program owning the data can still write it; a file made ours
        // already is left alone (a chown dirties the inode for nothing).
        if ($t['keepOwner'] !== null && $st['uid'] === 0) {
            if ($st['uid'] !== $t['keepOwner'][0]) {
                @lchown($tmp, $t['keepOwner'][0]);
            }
            if ($st['gid'] !== $t['keepOwner'][1]) {
                @lchgrp($tmp, $t['keepOwner'][1]);
            }
        }
        error_clear_last();
        if (($mode & ~0666) !== 0 && !@chmod($tmp, $mode)) {
            $fail = ['create', "cannot set the mode of the temporary file $tmp"];
        }
        for ($off = 0, $n = strlen($data); $fail === null && $off < $n; $off += $w) {
            error_clear_last();
            $w = @fwrite($h, $off === 0 ? $data : substr($data, $off));
            if ($w === false || $w === 0) {
                $fail = ['write', "cannot write the temporary file $tmp"];
                $w = 0;
            }
        }
        error_clear_last();
        if ($fail === null && $sync !== 'none' && (!@fflush($h) || !@fsync($h))) {
            $fail = ['sync', "cannot flush the temporary file $tmp"];
        }
        $errno = $fail === null ? 0 : (Native::lastErrno() ?: 5);
        // A failure here counts: NFS reports write errors at close.
        error_clear_last();
        if (!@fclose($h) && $fail === null) {
            $fail = ['close', "closing the temporary file $tmp failed"];
            $errno = Native::lastErrno() ?: 5;
        }
        if ($fail !== null) {
            @unlink($tmp);
            throw self::fileError($fail[0], $t, $fail[1], $errno);
        }
        return $tmp;
    }

    /** The umask umask() last returned in this process, or null. */
    private static ?int $umaskSeen = null;

    /**
     * Creates TMP ('x': O_CREAT|O_EXCL, which never follows a link planted
     * there) and returns its handle and fstat. PHP has no fchmod(): a mode
     * without execute bits is given at creation, through the umask, so
     * that no later call by path can be turned onto another file by
     * someone who swaps the name meanwhile. The umask is set only when the
     * one last seen would not give that mode by itself; a file made with
     * another mode (the program changed its umask since) is removed
     * unwritten, which leaves anyone who opened it meanwhile a file that
     * is no longer anywhere, and made again through the umask.
     *
     * @param array{path: string, dir: string} $t
     * @return array{0: resource, 1: array<string, int>}
     */
    private static function createTemp(array $t, string $tmp, int $mode): array
    {
        $exact = ($mode & ~0666) === 0;
        for ($asIs = $exact && self::$umaskSeen !== null && (0666 & ~self::$umaskSeen) === $mode; ; $asIs = false) {
            error_clear_last();
            $umask = $exact && !$asIs ? umask(0777 & ~$mode) : null;
            $h = @fopen($tmp, 'xb');
            if ($umask !== null) {
                umask($umask);
                self::$umaskSeen = $umask;
            }
            if ($h === false) {
                throw self::fileError('create', $t, "cannot create the temporary file $tmp", Native::lastErrno() ?: 5);
            }
            $st = fstat($h);
            if ($st !== false && (!$asIs || ($st['mode'] & 07777) === $mode)) {
                return [$h, $st];
            }
            fclose($h);
            @unlink($tmp);
            if ($st === false) {
                throw self::fileError('create', $t, "cannot look at the temporary file $tmp just made", 5);
            }
        }
    }

    /**
     * Flushes the target's directory after a rename, as `file_and_dir`
     * asks: a failure is DirSyncException, since the change is made.
     *
     * @param array{path: string, dir: string} $t
     */
    public static function syncTargetDir(array $t, string $sync, string $done, string $advice, int|string|null $value = null): void
    {
        if ($sync !== 'file_and_dir') {
            return;
        }
        error_clear_last();
        $h = @fopen($t['dir'], 'r');
        $errno = $h === false ? (Native::lastErrno() ?: 5) : 0;
        if ($h !== false) {
            error_clear_last();
            $errno = @fsync($h) ? 0 : (Native::lastErrno() ?: 5);
            fclose($h);
        }
        if ($errno === 0) {
            return;
        }
        $what = "$done, but flushing the directory {$t['dir']} failed (" . Native::cause($errno) . "): a crash may undo it$advice";
        if ($errno === 13 || $errno === 1) {
            $what .= "; give this user read permission on {$t['dir']} (chmod u+r, or g+r for a shared group), or write with sync file";
        }
        $e = new DirSyncException('dir_sync_failed', "tokenlock: sync {$t['path']}: $what", 74, [], null, $errno);
        if ($value !== null) {
            $e->setValue($value);
        }
        throw $e;
    }

    private static function modeOf(array $t, ?int $mode): int
    {
        if ($mode !== null) {
            return $mode;
        }
        if ($t['keepMode'] !== null) {
            return $t['keepMode'];
        }
        return 0644 & ~(self::$umaskSeen = umask());
    }

    /** writeFile() without a lock: the temporary file beside the target, renamed over it. */
    public static function write(string $path, string $data, string $sync, ?int $mode, bool $follow): void
    {
        $t = self::resolveTarget('write', $path, $follow);
        $tmp = self::writeTemp($t, $t['dir'], $data, $sync, self::modeOf($t, $mode), Native::pid());
        $errno = Native::rename($tmp, $t['path']);
        if ($errno !== 0) {
            @unlink($tmp);
            throw self::fileError('rename', $t, "cannot rename $tmp over the target", $errno);
        }
        self::syncTargetDir($t, $sync, 'the new contents are in place', '');
    }
}
