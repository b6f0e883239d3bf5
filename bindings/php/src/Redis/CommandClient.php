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
     * Runs `tokenlock SUBCOMMAND --redis env:TOKENLOCK_URL ARGS...` (ARGS end
     * with the lock's name) with the URL in the command's environment, not
     * on its argv, which every local user reads in `ps` while it runs; and
     * returns its standard output; a failure is thrown
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
            return Command::run(array_merge([$subcommand, '--redis', 'env:TOKENLOCK_URL'], $args), $options, null, $busyAs, "$subcommand $server " . end($args),
                ['TOKENLOCK_URL' => $url])[0];
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
        $secrets = Connection::secretsOf($url);
        if ($secrets === []) {
            return $e;
        }
        $class = get_class($e);
        $message = strtr($e->getMessage(), [$url => $server] + array_fill_keys($secrets, '***'));
        $argv = array_map(fn (string $a) => strtr($a, [$url => Connection::withoutCredentials($url)] + array_fill_keys($secrets, '***')), $e->getCommandLine());
        // Not chained to $e, whose message and command line may hold them.
        return new $class($e->getError(), $message, $e->getCode(), $argv, null, $e->getErrno());
    }
}
