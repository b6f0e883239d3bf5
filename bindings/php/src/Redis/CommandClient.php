<?php
/**
 * The Redis lock through the `tokenlock` command (`tokenlock acquire
 * --redis URL NAME` ...), for a PHP without the phpredis extension. The
 * command is the one Tokenlock\findCommand() names.
 *
 * @internal
 */

declare(strict_types=1);

namespace Tokenlock\Redis;

use Tokenlock\BusyException;
use Tokenlock\Exception;
use Tokenlock\LockLostException;
use Tokenlock\TimeoutException;

final class CommandClient
{
    /**
     * Runs `tokenlock SUBCOMMAND --redis URL ARGS...` and returns its
     * standard output; a failure is thrown with the error the command
     * names on its last line (TOKENLOCK_ERRORS=json).
     *
     * @param list<string> $args
     * @param array{command?: string} $options
     */
    public static function run(string $subcommand, string $url, array $args, array $options, string $busyAs = 'busy'): string
    {
        $argv = array_merge([\Tokenlock\findCommand($options), $subcommand, '--redis', $url], $args);
        $env = getenv();
        $env['TOKENLOCK_ERRORS'] = 'json';
        $spec = [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']];
        $proc = @proc_open($argv, $spec, $pipes, null, $env);
        if (!is_resource($proc)) {
            $cause = error_get_last()['message'] ?? 'unknown error';
            throw new Exception('system', "tokenlock: start {$argv[0]}: proc_open failed: $cause; is proc_open in disable_functions? Load the phpredis extension instead", 71, $argv);
        }
        [$out, $err] = self::collect($pipes);
        $status = proc_close($proc);
        if ($status === 0) {
            return $out;
        }
        throw self::failure($status, rtrim($err), $argv, $busyAs);
    }

    /**
     * Standard output and error, read together so that neither pipe fills.
     *
     * @param array<int, resource> $pipes
     * @return array{0: string, 1: string}
     */
    private static function collect(array $pipes): array
    {
        $text = [1 => '', 2 => ''];
        $open = [1 => $pipes[1], 2 => $pipes[2]];
        while ($open) {
            $r = array_values($open);
            $w = $e = null;
            if (@stream_select($r, $w, $e, null) === false) {
                continue;
            }
            foreach ($r as $stream) {
                $fd = array_search($stream, $open, true);
                $chunk = fread($stream, 65536);
                if ($chunk === false || ($chunk === '' && feof($stream))) {
                    fclose($stream);
                    unset($open[$fd]);
                } else {
                    $text[$fd] .= $chunk;
                }
            }
        }
        return [$text[1], $text[2]];
    }

    /** @param list<string> $argv */
    private static function failure(int $status, string $err, array $argv, string $busyAs): Exception
    {
        $cut = strrpos($err, "\n");
        $last = $cut === false ? $err : substr($err, $cut + 1);
        $fields = str_starts_with($last, '{"error"') ? json_decode($last, true) : null;
        $named = is_array($fields) && is_string($fields['error'] ?? null);
        $message = $named ? rtrim($cut === false ? '' : substr($err, 0, $cut)) : $err;
        if ($message === '') {
            $message = "tokenlock: {$argv[1]} --redis: {$argv[0]} exited with status $status";
        }
        $error = $named ? $fields['error'] : match ($status) {
            1 => $busyAs,
            3 => 'lock_lost',
            64 => 'bad_argument',
            126, 127 => 'command_not_found',
            default => 'command_failed',
        };
        $class = match ($error) {
            'busy' => BusyException::class,
            'timed_out' => TimeoutException::class,
            'lock_lost' => LockLostException::class,
            default => Exception::class,
        };
        return new $class($error, $message, $status, $argv, null, $named && is_int($fields['errno'] ?? null) ? $fields['errno'] : 0);
    }
}
