<?php

declare(strict_types=1);

namespace Tokenlock\Native;

/**
 * What dead processes left in a lock directory, removed: a creator's
 * temporary directories, and the workspace of a token taken over from a
 * dead owner (docs/protocol.md), entered by identity so that no entry
 * swapped in meanwhile is followed.
 *
 * @internal
 */
trait Clearing
{
    /**
     * Removes creation leftovers of DIR whose creator died or stalled past
     * its lease: our own directories of the exact form only.
     */
    private static function sweep(string $dir, int $leaseUs): void
    {
        $slash = strrpos($dir, '/');
        $parent = $slash === false ? '.' : ($slash === 0 ? '/' : substr($dir, 0, $slash));
        $prefix = ($slash === false ? $dir : substr($dir, $slash + 1)) . '.init.';
        $names = @scandir($parent);
        if ($names === false) {
            return;
        }
        $euid = self::euid();
        foreach ($names as $n) {
            if (strlen($n) <= strlen($prefix) || !str_starts_with($n, $prefix)) {
                continue;
            }
            $path = "$parent/$n";
            clearstatcache(true, $path);
            $st = @lstat($path);
            if ($st === false || ($st['mode'] & 0170000) !== 0040000 || $st['uid'] !== $euid) {
                continue;
            }
            $rest = substr($n, strlen($prefix));
            $c = self::classify(self::PREFIX . $rest);
            if ($c[0] === 'held') {
                if (!self::judge($n, $c[1])[0]) {
                    continue;
                }
            } elseif (!preg_match('/\A[0-9a-f]{16}\z/', $rest) || $st['mtime'] * 1000000 > self::nowUs() - self::MAX_LEASE_US - self::SKEW_US) {
                continue;
            }
            // By name: had its creator renamed it onto DIR meanwhile, these
            // find nothing under this name.
            @rmdir("$path/" . self::FREE);
            @rmdir($path);
        }
    }

    /**
     * Empties the token TOKEN of DIR, just taken over from a dead owner:
     * what that owner left there (and, in a token others can write, anybody
     * else) goes, and nothing outside it, even while another user renames
     * names on the way. PHP has no openat()/unlinkat(), and any name on a
     * path can be swapped for a link between a check and a use; a working
     * directory cannot: chdir() resolves a name once, and stat('.') then
     * shows whether the directory pinned is the one lstat() judged (a
     * directory, not a link: $taken, what the takeover renamed). Every
     * removal names one entry relative to that pinned directory, never a
     * path through another name. Coming back up, '..' must be the parent
     * judged again. Anything else stops the walk: what is left stays for
     * the next takeover, nothing outside was touched. The working directory
     * is restored after (php-fpm serves its next request in this process).
     * Under ZTS PHP keeps a working directory of its own and expands
     * relative names itself, so nothing pins: the token is left as it is.
     *
     * @param array{dev: int, ino: int, mode: int} $taken
     */
    private static function clearWorkspace(string $dir, string $token, array $taken, bool $keepMarks): void
    {
        // Only where the way back is open: open_basedir may refuse a
        // chdir() to the directory a php-fpm worker started in.
        $cwd = PHP_ZTS ? false : getcwd();
        if ($cwd === false || !@chdir($cwd)) {
            return;
        }
        try {
            if (self::enter("$dir/$token", $taken)) {
                self::clearHere($taken, 0, $keepMarks);
            }
        } finally {
            @chdir($cwd);
        }
    }

    /**
     * chdir() to NAME, and whether the working directory is then the
     * directory $id (from an lstat that showed a directory).
     *
     * @param array{dev: int, ino: int, mode: int} $id
     */
    private static function enter(string $name, array $id): bool
    {
        if (($id['mode'] & 0170000) !== 0040000 || !@chdir($name)) {
            return false;
        }
        clearstatcache();
        $here = @stat('.');
        return $here !== false && $here['dev'] === $id['dev'] && $here['ino'] === $id['ino'];
    }

    /**
     * Empties the working directory, pinned as $id; false when the walk
     * must stop (the working directory is then not known to be $id).
     * Depth-limited: a workspace holds temporary files, not trees.
     *
     * @param array{dev: int, ino: int, mode: int} $id
     */
    private static function clearHere(array $id, int $depth, bool $keepMarks): bool
    {
        $names = @scandir('.', SCANDIR_SORT_NONE);
        foreach ($names ?: [] as $n) {
            // Owner marks were judged one by one; ours stays.
            if ($n === '.' || $n === '..' || ($keepMarks && $depth === 0 && self::tokenOfMark($n) !== null)) {
                continue;
            }
            // Relative names: PHP caches the last stat by its name.
            clearstatcache();
            $st = @lstat($n);
            if ($st === false) {
                continue;
            }
            if (($st['mode'] & 0170000) !== 0040000) {
                @unlink($n);  // a symbolic link itself, never what it names
                continue;
            }
            if ($depth < 8 && @chdir($n)) {
                clearstatcache();
                $here = @stat('.');
                if ($here === false || $here['dev'] !== $st['dev'] || $here['ino'] !== $st['ino']
                    || !self::clearHere($st, $depth + 1, false) || !self::enter('..', $id)) {
                    return false;
                }
            }
            @rmdir($n);
        }
        return true;
    }
}
