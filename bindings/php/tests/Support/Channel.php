<?php

declare(strict_types=1);

namespace Tokenlock\Tests\Support;

/**
 * One end of a socket pair between a test and a process it forked: lines
 * in both directions, which is how the two wait for each other.
 */
final class Channel
{
    /** @var resource */
    private $stream;

    /** @param resource $stream */
    public function __construct($stream)
    {
        $this->stream = $stream;
    }

    public function send(string $line): void
    {
        if (strpos($line, "\n") !== false) {
            $line = str_replace("\n", ' | ', $line);
        }
        if (@fwrite($this->stream, $line . "\n") === false) {
            throw new \RuntimeException('the other process closed the channel');
        }
    }

    /**
     * The next line. A line that starts with "error " is a failure in the
     * forked process, rethrown here so that the test reports it.
     */
    public function receive(): string
    {
        $line = fgets($this->stream);
        if ($line === false) {
            throw new \RuntimeException('the other process closed the channel before answering');
        }
        $line = rtrim($line, "\n");
        if (strncmp($line, 'error ', 6) === 0) {
            throw new \RuntimeException('in the forked process: ' . substr($line, 6));
        }
        return $line;
    }

    /** Whether a line (or the end) can be read without waiting. */
    public function ready(): bool
    {
        $r = [$this->stream];
        $w = $e = null;
        return stream_select($r, $w, $e, 0) > 0;
    }

    public function close(): void
    {
        if (is_resource($this->stream)) {
            fclose($this->stream);
        }
    }
}
