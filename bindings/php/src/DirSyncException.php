<?php

declare(strict_types=1);

namespace Tokenlock;

/**
 * The new contents are in place (or the count is made) but the directory
 * could not be flushed after the rename, so a crash may undo them: error
 * `dir_sync_failed`, status 74. Do not repeat the call.
 */
class DirSyncException extends Exception
{
    private int|string|null $value = null;

    /**
     * increment()'s new value, which was counted; null for other calls.
     *
     * @return int|string|null a decimal string if it exceeds PHP_INT_MAX
     */
    public function getValue(): int|string|null
    {
        return $this->value;
    }

    /** @internal set by increment() from what the command printed */
    public function setValue(int|string $value): void
    {
        $this->value = $value;
    }
}
