<?php
/**
 * One Redis server reached through the phpredis extension: the URL as the
 * C++ client reads it (redis://[[user]:password@]host[:port][/db],
 * unix:///path[?db=N]), scripts run by EVALSHA with EVAL after NOSCRIPT,
 * and failures as Tokenlock\Exception with the library's error names.
 *
 * @internal
 */

declare(strict_types=1);

namespace Tokenlock\Redis;

use Tokenlock\Exception;

final class Connection
{
    /** @var array{host: string, port: int, path: string, db: int} */
    private array $endpoint;
    private ?\Redis $redis = null;
    private int $pid = 0;

    /**
     * The user and password of each connection, kept out of its
     * properties: var_export(), (array), serialize() and
     * debug_zval_dump() show properties, whatever __debugInfo() says.
     *
     * @var ?\WeakMap<self, array{0: string, 1: ?string}>
     */
    private static ?\WeakMap $credentials = null;

    public function __construct(
        #[\SensitiveParameter] string $url,
        private float $connectTimeout,
        private float $commandTimeout,
    ) {
        $e = self::parseUrl($url);
        self::$credentials ??= new \WeakMap();
        self::$credentials[$this] = [$e['user'], $e['password']];
        unset($e['user'], $e['password']);
        $this->endpoint = $e;
    }

    /** @return array<string, mixed> */
    public function __debugInfo(): array
    {
        return ['server' => $this->server()];
    }

    /** A copy would carry the credentials out of the process that was given them. */
    public function __serialize(): array
    {
        throw new \LogicException('Tokenlock\\Redis\\Connection cannot be serialized: it holds a password');
    }

    /** @param array<mixed> $data */
    public function __unserialize(array $data): void
    {
        throw new \LogicException('Tokenlock\\Redis\\Connection cannot be unserialized');
    }

    /** The server as messages name it, without the user or password. */
    public function server(): string
    {
        return self::shown($this->endpoint);
    }

    /**
     * The server of URL as messages name it, without the user or password.
     *
     * @throws Exception `bad_argument` for a URL it cannot read
     */
    public static function serverOf(#[\SensitiveParameter] string $url): string
    {
        return self::shown(self::parseUrl($url));
    }

    /** @param array{host: string, port: int, path: string, db: int} $e */
    private static function shown(array $e): string
    {
        if ($e['path'] !== '') {
            return 'unix://' . $e['path'] . ($e['db'] ? '?db=' . $e['db'] : '');
        }
        $host = str_contains($e['host'], ':') ? '[' . $e['host'] . ']' : $e['host'];
        return "redis://$host:{$e['port']}" . ($e['db'] ? '/' . $e['db'] : '');
    }

    /**
     * The reply of a lock script; a server error is `server_error`, a link
     * that fails is `system` with the errno the C++ client reports.
     *
     * @param list<string> $keys
     * @param list<string> $args
     */
    public function run(string $step, string $script, array $keys, array $args): mixed
    {
        $redis = $this->link($step);
        try {
            $redis->clearLastError();
            $reply = $redis->evalSha(sha1($script), array_merge($keys, $args), count($keys));
            $error = $redis->getLastError();
            if ($reply === false && $error !== null && str_starts_with($error, 'NOSCRIPT')) {
                // A restarted or flushed server forgot it: EVAL loads it again.
                $redis->clearLastError();
                $reply = $redis->eval($script, array_merge($keys, $args), count($keys));
                $error = $redis->getLastError();
            }
        } catch (\RedisException $e) {
            throw $this->linkFailure($step, 'no answer', $e);
        }
        if ($reply === false && $error !== null) {
            $fix = str_starts_with($error, 'NOPERM') ? '; the user lacks a permission: allow EVAL, EVALSHA, BLPOP and the keys tokenlock:*' : '';
            throw new Exception('server_error', "tokenlock: $step {$this->server()}: the server answered: $error$fix", 69);
        }
        return $reply;
    }

    /**
     * Blocks on LIST for at most $seconds (BLPOP) on a link of its own;
     * whether an element came.
     */
    public function blockingPop(string $list, float $seconds): bool
    {
        $redis = $this->open('wait');
        try {
            $redis->setOption(\Redis::OPT_READ_TIMEOUT, $seconds + $this->commandTimeout);
            // phpredis's blPop() takes whole seconds only; the server takes milliseconds.
            $popped = $redis->rawCommand('BLPOP', $list, sprintf('%.3f', $seconds));
        } catch (\RedisException $e) {
            throw $this->linkFailure('wait', 'no answer', $e);
        } finally {
            $redis->close();
        }
        return is_array($popped) && $popped !== [];
    }

    /** The link for commands, opened again in a forked child. */
    private function link(string $step): \Redis
    {
        $pid = \Tokenlock\Native::pid();
        if ($this->redis === null || $this->pid !== $pid) {
            // A parent's link is left to the parent: the child opens its own.
            $this->redis = $this->open($step);
            $this->pid = $pid;
        }
        return $this->redis;
    }

    private function open(string $step): \Redis
    {
        $e = $this->endpoint;
        $redis = new \Redis();
        try {
            $ok = $e['path'] !== ''
                ? $redis->connect($e['path'], 0, $this->connectTimeout)
                : $redis->connect($e['host'], $e['port'], $this->connectTimeout);
            if (!$ok) {
                throw new \RedisException('cannot connect');
            }
            $redis->setOption(\Redis::OPT_READ_TIMEOUT, $this->commandTimeout);
        } catch (\RedisException $x) {
            throw $this->linkFailure($step, 'cannot connect', $x);
        }
        $this->handshake($redis, $step);
        return $redis;
    }

    /** AUTH and SELECT, as the URL asks. */
    private function handshake(\Redis $redis, string $step): void
    {
        $e = $this->endpoint;
        [$user, $password] = self::$credentials[$this];
        try {
            if ($password !== null) {
                $ok = $redis->auth($user !== '' ? [$user, $password] : $password);
                if (!$ok) {
                    throw new Exception('server_error', "tokenlock: $step {$this->server()}: the server refused the user or password in the URL: "
                        . ($redis->getLastError() ?? 'AUTH failed') . '; fix the URL', 69);
                }
            }
            if ($e['db'] !== 0 && !$redis->select($e['db'])) {
                throw new Exception('server_error', "tokenlock: $step {$this->server()}: SELECT {$e['db']} failed: "
                    . ($redis->getLastError() ?? 'refused') . '; is the database number in the URL right?', 69);
            }
        } catch (\RedisException $x) {
            // phpredis throws the server's own refusal ("WRONGPASS ...") too.
            // Not chained: the trace of phpredis's exception holds the
            // password it was given.
            if (preg_match('/\A[A-Z]{3,} /', $x->getMessage())) {
                throw new Exception('server_error', "tokenlock: authenticate {$this->server()}: the server answered \"{$x->getMessage()}\"; "
                    . 'check the user and password in the URL (redis://user:password@host)', 69);
            }
            throw $this->linkFailure($step, 'handshake', $x, false);
        }
    }

    /** A link that failed: `system` with the errno its cause names, chained to $e if $chain. */
    private function linkFailure(string $step, string $what, \RedisException $e, bool $chain = true): Exception
    {
        $this->redis = null;
        $cause = $e->getMessage();
        [$errno, $hint] = match (true) {
            stripos($cause, 'refused') !== false => [111, '; is redis-server running there, and is the port right?'],
            stripos($cause, 'timed out') !== false || stripos($cause, 'timeout') !== false => [110, ''],
            stripos($cause, 'no such file') !== false => [2, '; is the socket path right?'],
            stripos($cause, 'permission') !== false => [13, ''],
            default => [104, ''],
        };
        $status = in_array($errno, [2, 13], true) ? ($errno === 2 ? 66 : 77) : 69;
        return new Exception('system', "tokenlock: $step {$this->server()}: $what: $cause$hint", $status, [], $chain ? $e : null, $errno);
    }

    /**
     * The URL's parts, as lib/src/redis/redis_url.cpp reads them.
     *
     * @return array{host: string, port: int, path: string, db: int, user: string, password: ?string}
     * @throws Exception `bad_argument` for a URL it cannot read
     */
    public static function parseUrl(#[\SensitiveParameter] string $url): array
    {
        $shown = self::withoutCredentials($url);
        $bad = static fn (string $why) => new Exception('bad_argument', "tokenlock: connect: bad Redis URL \"$shown\": $why; "
            . 'write it as redis://[[user]:password@]host[:port][/db] or unix://[[user]:password@]/path[?db=N]', 64);
        $out = ['host' => '', 'port' => 6379, 'path' => '', 'db' => 0, 'user' => '', 'password' => null];
        if (str_starts_with($url, 'redis://')) {
            $rest = substr($url, 8);
        } elseif (str_starts_with($url, 'unix://')) {
            $rest = substr($url, 7);
        } else {
            throw $bad('the URL must start with redis:// or unix:// (rediss:// TLS is not supported)');
        }
        $slash = strpos($rest, '/');
        $at = strrpos($slash === false ? $rest : substr($rest, 0, $slash), '@');
        if ($at !== false) {
            $cred = substr($rest, 0, $at);
            $rest = substr($rest, $at + 1);
            $colon = strpos($cred, ':');
            if ($colon === false) {
                throw $bad('credentials must be [user]:password@ (a user without a password is not accepted)');
            }
            $out['user'] = self::decode(substr($cred, 0, $colon)) ?? throw $bad('the user name has a bad %-escape');
            $out['password'] = self::decode(substr($cred, $colon + 1)) ?? throw $bad('the password has a bad %-escape');
        }
        $why = str_starts_with($url, 'unix://') ? self::unixPart($rest, $out) : self::tcpPart($rest, $out);
        if ($why !== null) {
            throw $bad($why);
        }
        return $out;
    }

    /**
     * URL with whatever may be its user and password shown as `***`: for
     * a URL that may not parse, everything up to its last '@' (a unix://
     * URL's: up to the '@' before its path), so that a password with a
     * stray '/' or '@' is hidden too.
     */
    public static function withoutCredentials(#[\SensitiveParameter] string $url): string
    {
        // The scheme however it is misspelt (redis:/, http://, none).
        $start = preg_match('~\A[A-Za-z][A-Za-z0-9+.-]{0,15}:/{0,3}~', $url, $m) ? strlen($m[0]) : 0;
        $rest = substr($url, $start);
        if (str_starts_with($url, 'unix://') && ($rest === '' || $rest[0] === '/')) {
            return $url;
        }
        $at = str_starts_with($url, 'unix://') && ($path = strpos($rest, '@/')) !== false ? $path : strrpos($rest, '@');
        if ($at !== false) {
            return substr($url, 0, $start) . '***' . substr($rest, $at);
        }
        // No '@': shown only if it reads as host[:port][/db]; anything else
        // may be a password whose '@' was forgotten (redis://:secret).
        return preg_match('~\A(\[[0-9A-Fa-f:.]*\]|[^:@/\[]*)(:[0-9]*)?(/[^:@]*)?\z~', $rest) ? $url : substr($url, 0, $start) . '***';
    }

    /**
     * What of URL may be a secret, for scrubbing a message: the part before
     * its last '@' (user and password as written) and the password
     * percent-decoded; none without an '@'.
     *
     * @return list<string>
     */
    public static function secretsOf(#[\SensitiveParameter] string $url): array
    {
        $start = preg_match('~\A[A-Za-z][A-Za-z0-9+.-]{0,15}:/{0,3}~', $url, $m) ? strlen($m[0]) : 0;
        $rest = substr($url, $start);
        $at = strrpos($rest, '@');
        if ($at === false) {
            return self::withoutCredentials($url) === $url ? [] : [$rest];
        }
        $cred = substr($rest, 0, $at);
        $colon = strpos($cred, ':');
        $password = $colon === false ? $cred : substr($cred, $colon + 1);
        return array_values(array_filter(array_unique([$cred, $password, rawurldecode($password)]), fn (string $s) => $s !== ''));
    }

    /** @param array<string, mixed> $out */
    private static function unixPart(string $rest, array &$out): ?string
    {
        [$path, $query] = array_pad(explode('?', $rest, 2), 2, null);
        if ($path === '' || $path[0] !== '/') {
            return 'a unix:// URL needs an absolute socket path';
        }
        $out['path'] = $path;
        if ($query !== null) {
            if (!preg_match('/\Adb=([0-9]{1,10})\z/', $query, $m) || (int) $m[1] > 1000000) {
                return 'the only query a unix:// URL takes is ?db=N';
            }
            $out['db'] = (int) $m[1];
        }
        return null;
    }

    /** @param array<string, mixed> $out */
    private static function tcpPart(string $rest, array &$out): ?string
    {
        [$hostport, $db] = array_pad(explode('/', $rest, 2), 2, null);
        if ($db !== null && $db !== '') {
            if (!preg_match('/\A[0-9]{1,10}\z/', $db) || (int) $db > 1000000) {
                return "the database after the '/' must be a number";
            }
            $out['db'] = (int) $db;
        }
        if (preg_match('/\A\[([^\]]*)\](?::(.*))?\z/', $hostport, $m)) {
            [$host, $port] = [$m[1], $m[2] ?? null];
        } elseif (str_starts_with($hostport, '[')) {
            return "an IPv6 address needs its closing ']'";
        } else {
            [$host, $port] = array_pad(explode(':', $hostport, 2), 2, null);
        }
        if ($host === '') {
            return 'the host is missing';
        }
        if (!preg_match('/\A[A-Za-z0-9.:_-]+\z/', $host)) {
            return 'the host has a character that no host name or address has';
        }
        if ($port !== null) {
            if ($port === '') {
                return "the port after ':' is missing";
            }
            if (!preg_match('/\A[0-9]{1,5}\z/', $port) || (int) $port < 1 || (int) $port > 65535) {
                return 'the port must be a number from 1 to 65535';
            }
            $out['port'] = (int) $port;
        }
        $out['host'] = $host;
        return null;
    }

    /** Percent-decoding of a user name or password; null for a bad escape. */
    private static function decode(string $s): ?string
    {
        if (preg_match('/%(?![0-9A-Fa-f]{2})/', $s)) {
            return null;
        }
        return rawurldecode($s);
    }
}
