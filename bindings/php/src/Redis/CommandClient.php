<?php
/**
 * The Redis lock through the `tokenlock` command (`tokenlock acquire
 * --redis URL NAME` ...), for a PHP without the phpredis extension. The
 * command is the one Tokenlock\findCommand() names, started and judged by
 * Tokenlock\Command::run() as every other call that runs it.
 *
 * @internal
 */

declare(strict_types=1);

namespace Tokenlock\Redis;

use Tokenlock\Command;
use Tokenlock\Exception;

final class CommandClient
{
    /**
     * Runs `tokenlock SUBCOMMAND --redis URL ARGS...` (ARGS end with the
     * lock's name) and returns its standard output; a failure is thrown
     * with the error the command names on its last line
     * (TOKENLOCK_ERRORS=json), and a command killed by a signal as
     * `command_failed`. Messages name the server without credentials.
     *
     * @param list<string> $args
     * @param array{command?: string} $options
     */
    public static function run(string $subcommand, #[\SensitiveParameter] string $url, array $args, array $options, string $busyAs = 'busy'): string
    {
        // A URL the command would refuse is refused here, by a message
        // that does not repeat the URL's password.
        $server = Connection::serverOf($url);
        try {
            return Command::run(array_merge([$subcommand, '--redis', $url], $args), $options, null, $busyAs, "$subcommand $server " . end($args))[0];
        } catch (Exception $e) {
            throw self::withoutCredentials($e, $url, $server);
        }
    }

    /**
     * The failure with the URL shown without its credentials, in the
     * message (as the server) and in the command line (with `***`). The
     * command names the server without them; this holds whatever it says.
     */
    private static function withoutCredentials(Exception $e, #[\SensitiveParameter] string $url, string $server): Exception
    {
        $shown = Connection::withoutCredentials($url);
        if ($shown === $url) {
            return $e;
        }
        $class = get_class($e);
        $argv = array_map(fn (string $a) => $a === $url ? $shown : $a, $e->getCommandLine());
        // Not chained to $e, whose message and command line still hold them.
        return new $class($e->getError(), str_replace($url, $server, $e->getMessage()), $e->getCode(), $argv, null, $e->getErrno());
    }
}
