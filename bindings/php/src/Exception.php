<?php

declare(strict_types=1);

namespace Tokenlock;

/**
 * A failed tokenlock operation.
 *
 * getCode() is the `tokenlock` command's exit status (tokenlock(1), EXIT
 * STATUS); errors found before or without running it use the status the
 * command gives for the same case (127 when it cannot be found).
 */
class Exception extends \RuntimeException
{
    private string $error;
    /** @var list<string> */
    private array $commandLine;
    private int $errno;

    /**
     * @param string       $error       the error's name, see getError()
     * @param string       $message     what failed: path, step and cause
     * @param int          $status      the command's exit status
     * @param list<string> $commandLine the command that failed, if one ran
     * @param int          $errno       for `system`: the errno (else 0)
     */
    public function __construct(string $error, string $message, int $status, array $commandLine = [], ?\Throwable $previous = null, int $errno = 0)
    {
        parent::__construct($message, $status, $previous);
        $this->error = $error;
        $this->commandLine = $commandLine;
        $this->errno = $errno;
    }

    /** For a `system` error: the errno of the failed system call; else 0. */
    public function getErrno(): int
    {
        return $this->errno;
    }

    /**
     * The error's name, the library's (tokenlock/errors.hpp): `busy`,
     * `timed_out`, `lock_lost`, `bad_argument` (a malformed argument: a
     * lease, a number, a token), `corrupt_data`, `token_missing` and
     * `lock_corrupt` (the lock directory needs a human), `not_owner`,
     * `dir_sync_failed` (DirSyncException: the new contents are in place,
     * a crash may undo them), `stale_data` (a network filesystem served an
     * old version; nothing was written, retry), `untrusted` (another user
     * could change the lock directory), `system` (getErrno() says which
     * errno: ENOENT, EACCES, EOVERFLOW past 2^64-1, ...); and this module's
     * own `command_not_found`, or `command_failed` (the command died of a
     * signal, answered nonsense, or is too old to name its error).
     */
    public function getError(): string
    {
        return $this->error;
    }

    /**
     * The command line that failed (the command's path first), or an empty
     * list when no command ran.
     *
     * @return list<string>
     */
    public function getCommandLine(): array
    {
        return $this->commandLine;
    }
}
