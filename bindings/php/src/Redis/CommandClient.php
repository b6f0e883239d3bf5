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

final class CommandClient
{
    /**
     * Runs `tokenlock SUBCOMMAND --redis URL ARGS...` and returns its
     * standard output; a failure is thrown with the error the command
     * names on its last line (TOKENLOCK_ERRORS=json), and a command
     * killed by a signal as `command_failed`.
     *
     * @param list<string> $args
     * @param array{command?: string} $options
     */
    public static function run(string $subcommand, string $url, array $args, array $options, string $busyAs = 'busy'): string
    {
        return Command::run(array_merge([$subcommand, '--redis', $url], $args), $options, null, $busyAs, "$subcommand --redis")[0];
    }
}
