<?php

declare(strict_types=1);

namespace Tokenlock;

use Tokenlock\Command\Search;
use Tokenlock\Command\Options;

/**
 * Finding and running the `tokenlock` command.
 *
 * @internal
 */
final class Command
{
    use Search;
    use Options;

    /**
     * The longest wait `tokenlock write` and `incr` accept (a year). They
     * have no wait without limit, so this stands in for one.
     */
    public const LONGEST_WAIT = 31536000.0;
    /** Lock::acquire()'s wait when none is given, as the library's. */
    public const DEFAULT_WAIT = 10.0;

    /** Set by setCommand(). */
    public static ?string $configured = null;

    /** Set by setLegacyTimeout(). */
    public static ?float $legacyTimeout = null;

    /**
     * Runs `tokenlock ARGS`, feeding $stdin (none when null), and returns
     * [stdout, stderr]. $busyAs names what status 1 means for this call;
     * $where is what the messages made here name (default: the
     * subcommand), so that a caller can name its lock without a secret.
     *
     * @param list<string> $args
     * @param array{command?: string} $options
     * @return array{0: string, 1: string}
     */
    public static function run(array $args, array $options, ?string $stdin = null, string $busyAs = 'timed_out', ?string $where = null,
        #[\SensitiveParameter] array $env = []): array
    {
        $where ??= $args[0];
        // The subcommands that take a lock directory take the legacy
        // timeout too; a Redis lock has no legacy tokens, and the command
        // refuses the option there.
        if (self::$legacyTimeout !== null && in_array($args[0], ['acquire', 'incr', 'write', 'run'], true) && ($args[1] ?? '') !== '--redis') {
            array_splice($args, 1, 0, ['--legacy-timeout', self::formatSeconds(self::$legacyTimeout)]);
        }
        $argv = array_merge([self::locate($options)], $args);
        $spec = [
            0 => $stdin === null ? ['file', '/dev/null', 'r'] : ['pipe', 'r'],
            1 => ['pipe', 'w'],
            2 => ['pipe', 'w'],
        ];
        // The error's name then ends stderr, as a JSON line.
        // $env: what the command reads from its environment rather than
        // from argv, which every local user can read (a server's URL).
        $env = ['TOKENLOCK_ERRORS' => 'json'] + $env + getenv();
        $proc = @proc_open($argv, $spec, $pipes, null, $env);
        if (!is_resource($proc)) {
            $cause = error_get_last()['message'] ?? 'unknown error';
            throw new Exception('system', "tokenlock: $where: cannot start {$argv[0]}: proc_open failed: $cause; if proc_open is in disable_functions, use the calls that start no process (locks, writeFile() and increment() without `command`, RedisLock with the phpredis extension)", 71, $argv);
        }
        [$out, $err] = self::exchange($pipes, $stdin);
        [$status, $signal] = self::waitFor($proc);
        if ($status === 0) {
            return [$out, $err];
        }
        [$message, $named] = self::errorLine(rtrim($err));
        if ($signal !== null) {
            // Its exit status would be a guess: a signal is no error name.
            throw new Exception('command_failed', ($message !== '' ? "$message\n" : '')
                . "tokenlock: $where: the command {$argv[0]} was killed by signal $signal before it finished, so what it did is not known"
                . ' (a lock it took is free at the latest when its lease ends); find what sent the signal (the kernel log names the out-of-memory killer) and call again', 128 + $signal, $argv);
        }
        if ($message === '') {
            $message = "tokenlock: $where: {$argv[0]} exited with status $status";
        }
        [$error, $class] = self::classify($status, $named === null ? null : $named[0], $busyAs);
        $e = new $class($error, $message, $status, $argv, null, $named === null ? 0 : $named[1]);
        // incr prints the value it counted before reporting the failed flush.
        if ($e instanceof DirSyncException && $args[0] === 'incr' && preg_match('/\A[0-9]{1,20}\z/', trim($out))) {
            $e->setValue(self::toInt(trim($out)));
        }
        throw $e;
    }

    /**
     * Feeds stdin and collects stdout and stderr together, so that a
     * command that fills one pipe while PHP waits on another cannot stall.
     *
     * @param array<int, resource> $pipes
     * @return array{0: string, 1: string}
     */
    private static function exchange(array $pipes, ?string $stdin): array
    {
        $out = '';
        $err = '';
        $offset = 0;
        $writer = $stdin === null ? null : $pipes[0];
        if ($writer !== null) {
            stream_set_blocking($writer, false);
            if ($stdin === '') {
                fclose($writer);
                $writer = null;
            }
        }
        $readers = [1 => $pipes[1], 2 => $pipes[2]];
        while ($readers || $writer !== null) {
            $r = array_values($readers);
            $w = $writer === null ? [] : [$writer];
            $e = null;
            if (@stream_select($r, $w, $e, null) === false) {
                // Interrupted by a signal: look again.
                continue;
            }
            if ($w) {
                $n = @fwrite($writer, substr($stdin, $offset, 65536));
                if ($n === false || $n === 0) {
                    // The command stopped reading; its status says why.
                    fclose($writer);
                    $writer = null;
                } else {
                    $offset += $n;
                    if ($offset >= strlen($stdin)) {
                        fclose($writer);
                        $writer = null;
                    }
                }
            }
            foreach ($r as $stream) {
                $key = array_search($stream, $readers, true);
                $chunk = fread($stream, 65536);
                if ($chunk === false || ($chunk === '' && feof($stream))) {
                    fclose($stream);
                    unset($readers[$key]);
                } elseif ($key === 1) {
                    $out .= $chunk;
                } else {
                    $err .= $chunk;
                }
            }
        }
        return [$out, $err];
    }

    /**
     * The command's exit status and, if a signal ended it, that signal.
     * proc_close() would report a signal as if it were an exit status.
     *
     * @param resource $proc
     * @return array{0: int, 1: ?int}
     */
    private static function waitFor($proc): array
    {
        // The command has closed its output, so it is exiting: the wait is
        // short, and the backoff keeps it from spinning.
        for ($pause = 0; ; $pause = min(max(2 * $pause, 20), 5000)) {
            $st = proc_get_status($proc);
            if (!$st['running']) {
                proc_close($proc);
                return $st['signaled'] ? [128 + $st['termsig'], $st['termsig']] : [$st['exitcode'], null];
            }
            if ($pause > 0) {
                usleep($pause);
            }
        }
    }

    /**
     * The command's stderr without its JSON error line, and the name and
     * errno that line gives (null when the last line is not one: a command
     * from before --errors=json).
     *
     * @return array{0: string, 1: ?array{0: string, 1: int}}
     */
    private static function errorLine(string $err): array
    {
        $cut = strrpos($err, "\n");
        $last = $cut === false ? $err : substr($err, $cut + 1);
        if (!str_starts_with($last, '{"error"')) {
            return [$err, null];
        }
        $fields = json_decode($last, true);
        if (!is_array($fields) || !is_string($fields['error'] ?? null) || !is_int($fields['errno'] ?? null)) {
            return [$err, null];
        }
        return [rtrim($cut === false ? '' : substr($err, 0, $cut)), [$fields['error'], $fields['errno']]];
    }

    /**
     * The name and exception class for a failure: by the name the command
     * gave, else (an older command) by what its exit status alone says.
     *
     * @return array{0: string, 1: class-string<Exception>}
     */
    private static function classify(int $status, ?string $name, string $busyAs): array
    {
        if ($name === null) {
            $name = match ($status) {
                1 => $busyAs,
                3 => 'lock_lost',
                64 => 'bad_argument',
                126, 127 => 'command_not_found',
                default => 'command_failed',
            };
        }
        $class = match ($name) {
            'busy' => BusyException::class,
            'timed_out' => TimeoutException::class,
            'lock_lost' => LockLostException::class,
            'dir_sync_failed' => DirSyncException::class,
            default => Exception::class,
        };
        return [$name, $class];
    }
}
