<?php

declare(strict_types=1);

namespace Tokenlock\Files;

use Tokenlock\Exception;
use Tokenlock\LockLostException;
use Tokenlock\Native;

/**
 * An update committed through the lock's token (docs/atomic-writes.md):
 * the new contents in the token's workspace, renamed over the target
 * only while the token is still ours; and the temporary files of dead
 * writers swept.
 *
 * @internal
 */
trait Commit
{
    // ---- the fenced update ------------------------------------------------

    private static function lostBeforeCommit(string $path, string $token): LockLostException
    {
        return new LockLostException('lock_lost', "tokenlock: commit $path: the lock was taken over before the commit (our token $token is gone: our lease ended or we were judged dead); nothing was written and the new owner's data is intact", 3);
    }

    /**
     * Whether our token is gone: a lookup's ENOENT is confirmed by a
     * listing, since a network client may answer a lookup from its cache.
     * ESTALE (116) counts as ENOENT: a GlusterFS client that still has a
     * token cached that a takeover moved answers with it.
     */
    private static function tokenGone(string $dir, string $token): bool
    {
        // A lookup that finds the token is checked against a listing too:
        // an sshfs client keeps a renamed name in its entry cache. Only
        // failed steps ask.
        clearstatcache(true, "$dir/$token");
        $found = @lstat("$dir/$token") !== false;
        $names = @scandir($dir);
        return $names === false ? !$found : !in_array($token, $names, true);
    }

    /**
     * The token's workspace `w`, made by the first update and judged by
     * the trust rules: another user who could write it could swap the
     * temporary file. Returns [path, made].
     *
     * @return array{0: string, 1: bool}
     */
    private static function workspace(string $dir, string $token, array $t): array
    {
        $w = "$dir/$token/w";
        $made = false;
        clearstatcache(true, $w);
        $st = @lstat($w);
        if ($st === false) {
            error_clear_last();
            if (@mkdir($w, 0700)) {
                $made = true;
                // Shared with the lock directory's chosen group, whose
                // members commit through it too.
                $group = Native::chosenGroup($dir);
                if ($group !== null) {
                    @chgrp($w, $group);
                }
                @chmod($w, Native::dirMode('commit') | ($group === null ? 0 : 0070));
            } elseif (($errno = Native::lastErrno() ?: 5) !== 17) {
                if (($errno === 2 || $errno === 116) && self::tokenGone($dir, $token)) {
                    throw self::lostBeforeCommit($t['path'], $token);
                }
                throw self::fileError('create', $t, "cannot create the workspace $w", $errno);
            }
            clearstatcache(true, $w);
            $st = null;
        }
        try {
            Native::checkInside($dir, $w, 'commit', "the lock's workspace", $st);
        } catch (Exception $e) {
            if ($made) {
                @rmdir($w);
            }
            throw $e;
        }
        return [$w, $made];
    }

    /**
     * Commits DATA over the target through the token: the temporary file
     * in D/<token>/w, renamed over the target by a path through the
     * token's name, which fails once the lock was taken over. False
     * (nothing written) when the token cannot fence it: a file token, or
     * the target on another filesystem. The token is judged, by the one
     * lstat() that finds it, before anything is made in it.
     *
     * @param array{path: string, dir: string, name: string, keepOwner: ?array{0: int, 1: int}, dev: int} $t
     * @param array{name: string}|null $oldMark
     */
    private static function fencedCommit(string $dir, string $token, array $t, string $data, string $sync, int $mode, bool $marks, ?array $oldMark): bool
    {
        clearstatcache();
        $tok = @lstat("$dir/$token");
        if ($tok === false) {
            if (self::tokenGone($dir, $token)) {
                throw self::lostBeforeCommit($t['path'], $token);
            }
            throw self::fileError('commit', $t, "cannot look at the lock's token $dir/$token", Native::lastErrno() ?: 5);
        }
        // A token that is a file (a legacy setup's) has no room for the
        // temporary file; a rename cannot cross filesystems. Anything else
        // that is not a directory (a link) is refused by the judgement.
        if (($tok['mode'] & 0170000) === 0100000 || $tok['dev'] !== $t['dev']) {
            return false;
        }
        Native::checkInside($dir, "$dir/$token", 'commit', "the lock's token", $tok);
        [$w, $made] = self::workspace($dir, $token, $t);
        try {
            $tmp = self::writeTemp($t, $w, $data, $sync, $mode, Native::tokenPid());
        } catch (Exception $e) {
            if ($made) {
                @rmdir($w);
            }
            if (($e->getErrno() === 2 || $e->getErrno() === 116) && self::tokenGone($dir, $token)) {
                throw self::lostBeforeCommit($t['path'], $token);
            }
            throw $e;
        }
        clearstatcache(true, $tmp);
        $written = $marks ? @lstat($tmp) : false;
        $errno = Native::rename($tmp, $t['path']);
        if ($errno !== 0) {
            @unlink($tmp);
            if ($made) {
                @rmdir($w);
            }
            if ($errno === 18) {
                return false;
            }
            // Made through the token's name a moment ago: a rename that no
            // longer finds it, into a directory that is there, lost the
            // token (an sshfs client may still find the old name in its caches).
            clearstatcache(true, $t['dir']);
            if (($errno === 2 || $errno === 116) && (self::tokenGone($dir, $token) || is_dir($t['dir']))) {
                throw self::lostBeforeCommit($t['path'], $token);
            }
            throw self::fileError('rename', $t, "cannot rename $tmp over the target", $errno);
        }
        if ($written !== false) {
            self::writeVersionMark($w, $oldMark, self::fnvHex($data), $written['mtime'] * 1000000);
        }
        return true;
    }

    /**
     * Across filesystems, or through a file token: beside the target, with
     * ownership proved by a refresh rename just before the commit (the
     * window between the two remains). Returns the token's new name.
     */
    private static function unfencedCommit(string $dir, string $token, array $t, string $data, string $sync, int $mode, int $leaseUs): string
    {
        $tmp = self::writeTemp($t, $t['dir'], $data, $sync, $mode, Native::tokenPid());
        try {
            $token = Native::refresh($dir, $token, $leaseUs);
        } catch (Exception $e) {
            @unlink($tmp);
            throw $e instanceof LockLostException ? self::lostBeforeCommit($t['path'], $token) : $e;
        }
        $errno = Native::rename($tmp, $t['path']);
        if ($errno !== 0) {
            @unlink($tmp);
            throw self::fileError('rename', $t, "cannot rename $tmp over the target", $errno);
        }
        return $token;
    }

    /**
     * Removes this target's temporary files older than a lease, which no
     * live writer holding the lock can own: those of crashed writes beside
     * it. Only regular files named exactly .NAME.tmp.<16 hex>.
     *
     * @param array{dir: string, name: string} $t
     */
    public static function sweepTemps(array $t, int $leaseUs): int
    {
        $prefix = ".{$t['name']}.tmp.";
        $removed = 0;
        foreach (@scandir($t['dir']) ?: [] as $n) {
            if (!str_starts_with($n, $prefix) || !preg_match('/\A[0-9a-f]{16}\z/', substr($n, strlen($prefix)))) {
                continue;
            }
            $p = "{$t['dir']}/$n";
            clearstatcache(true, $p);
            $st = @lstat($p);
            if ($st !== false && ($st['mode'] & 0170000) === 0100000 && $st['mtime'] * 1000000 < Native::nowUs() - $leaseUs && @unlink($p)) {
                ++$removed;
            }
        }
        return $removed;
    }
}
