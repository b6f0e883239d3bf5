<?php

declare(strict_types=1);

namespace Tokenlock\Tests\Support;

/** The tokenlock command run directly, to look at locks from outside the binding. */
final class Tool
{
    /** The command under test, whatever a test did to TOKENLOCK_COMMAND. */
    public static function path(): string
    {
        return TOKENLOCK_TEST_COMMAND;
    }

    /**
     * @param list<string> $args
     * @return array{0: int, 1: string, 2: string} status, stdout, stderr
     */
    public static function run(array $args, ?string $stdin = null): array
    {
        $proc = proc_open(array_merge([self::path()], $args), [
            0 => $stdin === null ? ['file', '/dev/null', 'r'] : ['pipe', 'r'],
            1 => ['pipe', 'w'],
            2 => ['pipe', 'w'],
        ], $pipes);
        if ($stdin !== null) {
            fwrite($pipes[0], $stdin);
            fclose($pipes[0]);
        }
        $out = stream_get_contents($pipes[1]);
        $err = stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        return [proc_close($proc), (string) $out, (string) $err];
    }

    /**
     * `tokenlock status --json`: state (free, held, stale), and for a held
     * lock its token and owner pid.
     *
     * @return array<string, mixed>
     */
    public static function status(string $lockDir): array
    {
        [$status, $out, $err] = self::run(['status', '--json', $lockDir]);
        if ($status !== 0) {
            throw new \RuntimeException("tokenlock status $lockDir: status $status: $err");
        }
        return json_decode($out, true, 512, JSON_THROW_ON_ERROR);
    }

    /** `tokenlock break --force`: takes the lock away from TOKEN's holder. */
    public static function breakToken(string $lockDir, string $token): void
    {
        [$status, , $err] = self::run(['break', '--force', $lockDir, $token]);
        if ($status !== 0) {
            throw new \RuntimeException("tokenlock break $lockDir: status $status: $err");
        }
    }

    /**
     * PHP CODE run with MODULE loaded and ARGS as $argv[1...], in a process
     * of its own.
     *
     * @param list<string> $args
     * @return array{0: int, 1: string, 2: string} status, stdout, stderr
     */
    public static function runPhp(string $module, string $code, array $args = []): array
    {
        $proc = proc_open(array_merge([PHP_BINARY, '-r', 'require $argv[1]; array_shift($argv); ' . $code, '--', $module], $args), [
            0 => ['file', '/dev/null', 'r'],
            1 => ['pipe', 'w'],
            2 => ['pipe', 'w'],
        ], $pipes);
        $out = stream_get_contents($pipes[1]);
        $err = stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        return [proc_close($proc), (string) $out, (string) $err];
    }
}
