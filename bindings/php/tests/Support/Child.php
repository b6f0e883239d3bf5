<?php

declare(strict_types=1);

namespace Tokenlock\Tests\Support;

/**
 * A forked process running a closure, joined to the test by a Channel.
 *
 * The child ends with exit(), so PHP's shutdown runs in it as in any
 * process, destructors included: the tests rely on that to show that a
 * Lock inherited across fork() is left alone. A failure in the closure is
 * sent to the parent as an "error ..." line and makes the exit status 1.
 */
final class Child
{
    /** @var list<Child> children not yet waited for, killed by reapAll() */
    private static array $running = [];

    public int $pid;
    public Channel $channel;
    private ?int $status = null;

    private function __construct(int $pid, Channel $channel)
    {
        $this->pid = $pid;
        $this->channel = $channel;
    }

    /** @param callable(Channel): void $body */
    public static function start(callable $body): self
    {
        if (!function_exists('pcntl_fork')) {
            throw new \RuntimeException('these tests need the pcntl extension of the PHP CLI');
        }
        $pair = stream_socket_pair(STREAM_PF_UNIX, STREAM_SOCK_STREAM, STREAM_IPPROTO_IP);
        if ($pair === false) {
            throw new \RuntimeException('stream_socket_pair failed');
        }
        $pid = pcntl_fork();
        if ($pid < 0) {
            throw new \RuntimeException('fork failed: ' . pcntl_strerror(pcntl_get_last_error()));
        }
        if ($pid === 0) {
            fclose($pair[0]);
            $channel = new Channel($pair[1]);
            $code = 0;
            try {
                $body($channel);
            } catch (\Throwable $e) {
                try {
                    $channel->send('error ' . get_class($e) . ': ' . $e->getMessage());
                } catch (\Throwable $ignored) {
                }
                $code = 1;
            }
            // Output buffered by the test runner before the fork belongs to
            // the parent.
            while (ob_get_level() > 0) {
                ob_end_clean();
            }
            exit($code);
        }
        fclose($pair[1]);
        $child = new self($pid, new Channel($pair[0]));
        self::$running[] = $child;
        return $child;
    }

    /** Waits for the child to end; its exit status, or 128+N for signal N. */
    public function wait(): int
    {
        if ($this->status === null) {
            pcntl_waitpid($this->pid, $status);
            $this->status = pcntl_wifexited($status) ? pcntl_wexitstatus($status) : 128 + pcntl_wtermsig($status);
            $this->channel->close();
            self::$running = array_values(array_filter(self::$running, fn (Child $c) => $c !== $this));
        }
        return $this->status;
    }

    /** SIGKILL, then wait. */
    public function kill(): int
    {
        if ($this->status === null) {
            posix_kill($this->pid, SIGKILL);
        }
        return $this->wait();
    }

    /** Kills every child a failed test left behind. */
    public static function reapAll(): void
    {
        foreach (self::$running as $child) {
            $child->kill();
        }
    }
}
