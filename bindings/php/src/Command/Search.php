<?php

declare(strict_types=1);

namespace Tokenlock\Command;

use Tokenlock\Exception;

/**
 * Where the `tokenlock` command is: the `command` option, setCommand(),
 * TOKENLOCK_COMMAND, beside the main script, ~/bin, PATH (findCommand()),
 * each search remembered for the process.
 *
 * @internal
 */
trait Search
{
    /** @var array<string, string> search inputs => path found */
    private static array $found = [];

    /**
     * The command a call with these options runs (see findCommand()).
     *
     * @param array{command?: string} $options
     */
    public static function locate(array $options): string
    {
        if (isset($options['command']) && $options['command'] !== '') {
            return self::checkExecutable((string) $options['command'], "the 'command' option");
        }
        if (self::$configured !== null) {
            return self::checkExecutable(self::$configured, 'Tokenlock\setCommand()');
        }
        $env = getenv('TOKENLOCK_COMMAND');
        if ($env !== false && $env !== '') {
            return self::checkExecutable($env, 'TOKENLOCK_COMMAND');
        }
        $script = get_included_files()[0] ?? '';
        $home = self::home();
        $path = (string) getenv('PATH');
        $key = "$script\0$home\0$path";
        if (isset(self::$found[$key])) {
            return self::$found[$key];
        }
        $places = [];
        if ($script !== '') {
            $places[] = dirname($script) . '/tokenlock';
        }
        if ($home !== '') {
            $places[] = rtrim($home, '/') . '/bin/tokenlock';
        }
        foreach (explode(':', $path) as $dir) {
            if ($dir !== '') {
                $places[] = rtrim($dir, '/') . '/tokenlock';
            }
        }
        foreach ($places as $candidate) {
            if (is_file($candidate) && is_executable($candidate)) {
                return self::$found[$key] = $candidate;
            }
        }
        throw new Exception(
            'command_not_found',
            'tokenlock: cannot find the tokenlock command: TOKENLOCK_COMMAND is not set, and it is not '
            . ($script !== '' ? 'beside the script in ' . dirname($script) . ', ' : '')
            . ($home !== '' ? "in $home/bin, " : '')
            . "nor in PATH ($path); copy it to one of these places or set TOKENLOCK_COMMAND to its path",
            127
        );
    }

    private static function checkExecutable(string $path, string $source): string
    {
        if (!is_file($path) || !is_executable($path)) {
            throw new Exception(
                'command_not_found',
                "tokenlock: the tokenlock command $path (from $source) "
                . (file_exists($path) ? 'is not an executable file' : 'does not exist'),
                127
            );
        }
        return $path;
    }

    private static function home(): string
    {
        $home = getenv('HOME');
        if ($home !== false && $home !== '') {
            return $home;
        }
        // A CGI program is seldom given HOME.
        if (function_exists('posix_getpwuid') && function_exists('posix_geteuid')) {
            $entry = posix_getpwuid(posix_geteuid());
            if (is_array($entry) && ($entry['dir'] ?? '') !== '') {
                return $entry['dir'];
            }
        }
        return '';
    }
}
