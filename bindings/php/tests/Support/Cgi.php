<?php

declare(strict_types=1);

namespace Tokenlock\Tests\Support;

/** One CGI response: status, headers (names in lower case), body, and what went to stderr. */
final class CgiResponse
{
    public int $status;
    /** @var array<string, string> */
    public array $headers;
    public string $body;
    public string $stderr;
    public string $raw;

    /** @param array<string, string> $headers */
    public function __construct(int $status, array $headers, string $body, string $stderr, string $raw)
    {
        $this->status = $status;
        $this->headers = $headers;
        $this->body = $body;
        $this->stderr = $stderr;
        $this->raw = $raw;
    }

    public function header(string $name): ?string
    {
        return $this->headers[strtolower($name)] ?? null;
    }
}

/**
 * Runs a CGI program as a web server does: executed directly (php-cgi then
 * comes from the #! line), with the request in the environment, the body on
 * standard input, and, as Apache does for a query without '=', the query's
 * words as arguments.
 */
final class Cgi
{
    /**
     * @param array<string, string> $env added to (or replacing) the request's variables
     */
    public static function request(string $program, string $method, string $query, array $env = [], string $body = ''): CgiResponse
    {
        $proc = self::start($program, $method, $query, $env, $body);
        return self::finish($proc);
    }

    /**
     * Starts the request without waiting for it, so that several run at once.
     *
     * @param array<string, string> $env
     * @return array{0: resource, 1: array<int, resource>}
     */
    public static function start(string $program, string $method, string $query, array $env = [], string $body = ''): array
    {
        $base = [
            'PATH' => '/usr/local/bin:/usr/bin:/bin',
            'GATEWAY_INTERFACE' => 'CGI/1.1',
            'SERVER_PROTOCOL' => 'HTTP/1.1',
            'SERVER_SOFTWARE' => 'tokenlock-test',
            'SERVER_NAME' => 'localhost',
            'SERVER_PORT' => '80',
            'REMOTE_ADDR' => '127.0.0.1',
            'REQUEST_METHOD' => $method,
            'QUERY_STRING' => $query,
            'SCRIPT_FILENAME' => $program,
            'SCRIPT_NAME' => '/cgi-bin/' . basename($program),
            'REQUEST_URI' => '/cgi-bin/' . basename($program) . ($query === '' ? '' : "?$query"),
            'TOKENLOCK_COMMAND' => Tool::path(),
        ];
        if ($body !== '') {
            $base['CONTENT_LENGTH'] = (string) strlen($body);
            $base['CONTENT_TYPE'] = 'application/x-www-form-urlencoded';
        }
        $argv = [$program];
        if ($query !== '' && strpos($query, '=') === false) {
            foreach (explode('+', $query) as $word) {
                $argv[] = rawurldecode($word);
            }
        }
        $proc = proc_open($argv, [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, dirname($program), array_merge($base, $env));
        if (!is_resource($proc)) {
            throw new \RuntimeException("cannot run $program");
        }
        fwrite($pipes[0], $body);
        fclose($pipes[0]);
        return [$proc, $pipes];
    }

    /** @param array{0: resource, 1: array<int, resource>} $started */
    public static function finish(array $started): CgiResponse
    {
        [$proc, $pipes] = $started;
        $out = (string) stream_get_contents($pipes[1]);
        $err = (string) stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        proc_close($proc);
        $split = strpos($out, "\r\n\r\n");
        $sepLen = 4;
        if ($split === false) {
            $split = strpos($out, "\n\n");
            $sepLen = 2;
        }
        if ($split === false) {
            return new CgiResponse(0, [], $out, $err, $out);
        }
        $headers = [];
        foreach (preg_split('/\r?\n/', substr($out, 0, $split)) as $line) {
            $colon = strpos($line, ':');
            if ($colon === false) {
                return new CgiResponse(0, [], $out, $err, $out);
            }
            $headers[strtolower(substr($line, 0, $colon))] = trim(substr($line, $colon + 1));
        }
        // A CGI program that sends no Status answers 200.
        $status = isset($headers['status']) ? (int) $headers['status'] : 200;
        return new CgiResponse($status, $headers, substr($out, $split + $sepLen), $err, $out);
    }
}
