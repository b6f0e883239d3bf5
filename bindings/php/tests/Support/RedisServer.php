<?php

declare(strict_types=1);

namespace Tokenlock\Tests\Support;

/**
 * A redis-server of the test's own on 127.0.0.1 and a free port, without
 * persistence, stopped by its pid.
 */
final class RedisServer
{
    /** @var resource */
    private $proc;
    public int $port;
    public int $pid;

    /** @param ?int $port a port of its own (a restart on the port of a stopped one), else a free one */
    public function __construct(private string $dir, ?int $port = null)
    {
        $this->port = $port ?? self::freePort();
        $this->proc = proc_open(['redis-server', '--port', (string) $this->port, '--bind', '127.0.0.1', '--save', '',
            '--appendonly', 'no', '--dir', $dir, '--logfile', "$dir/redis.log", '--daemonize', 'no'],
            [0 => ['file', '/dev/null', 'r'], 1 => ['file', "$dir/redis.out", 'w'], 2 => ['file', "$dir/redis.out", 'a']], $pipes);
        if (!is_resource($this->proc)) {
            throw new \RuntimeException('cannot start redis-server');
        }
        $this->pid = proc_get_status($this->proc)['pid'];
        $this->waitUntilReady();
    }

    public static function available(): bool
    {
        foreach (explode(':', (string) getenv('PATH')) as $dir) {
            if ($dir !== '' && is_executable("$dir/redis-server")) {
                return true;
            }
        }
        return false;
    }

    public function url(): string
    {
        return "redis://127.0.0.1:$this->port";
    }

    /** A phpredis client of the test's own, to look at keys. */
    public function client(): \Redis
    {
        $r = new \Redis();
        $r->connect('127.0.0.1', $this->port, 2.0);
        return $r;
    }

    public function stop(): void
    {
        if (is_resource($this->proc)) {
            posix_kill($this->pid, SIGTERM);
            proc_close($this->proc);
        }
    }

    /** The server answers PING: it logs readiness only after it listens. */
    private function waitUntilReady(): void
    {
        $deadline = microtime(true) + 20;
        while (microtime(true) < $deadline) {
            if (!proc_get_status($this->proc)['running']) {
                throw new \RuntimeException('redis-server exited at start: ' . @file_get_contents("$this->dir/redis.out") . @file_get_contents("$this->dir/redis.log"));
            }
            $log = (string) @file_get_contents("$this->dir/redis.log");
            if (str_contains($log, 'Ready to accept connections')) {
                return;
            }
            usleep(10000);
        }
        $this->stop();
        throw new \RuntimeException("redis-server on port $this->port was not ready within 20 s (see $this->dir/redis.log)");
    }

    private static function freePort(): int
    {
        $s = stream_socket_server('tcp://127.0.0.1:0', $errno, $error);
        if ($s === false) {
            throw new \RuntimeException("cannot find a free port: $error");
        }
        $name = stream_socket_get_name($s, false);
        fclose($s);
        return (int) substr($name, strrpos($name, ':') + 1);
    }
}
