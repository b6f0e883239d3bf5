#!/usr/bin/php-cgi -dcgi.force_redirect=0
<?php
/*
 * counter.php: the hit counter of counter.cgi (docs/cgi-guide.md), in PHP,
 * for hosts that run PHP programs as CGI. Same URLs, statuses, bodies and
 * files as counter.cgi, so both can serve one counter side by side:
 *
 *   GET counter.php?id=NAME[&format=text|json|svg][&peek=1]   HEAD never counts
 *
 * Counter NAME lives in $TOKENLOCK_COUNTER_DIR/NAME.count with its lock
 * NAME.count.lock, updated by Tokenlock.php in PHP itself: no process is
 * started, so it runs where disable_functions lists proc_open and exec, and
 * where no `tokenlock` binary can run (noexec homes, other architectures).
 * Configuration, from the environment (Apache: SetEnv):
 *   TOKENLOCK_COUNTER_DIR      data directory, outside the web root
 *                              (default /var/lib/tokenlock-counter)
 *   TOKENLOCK_COUNTER_WAIT_MS  how long a hit waits for a busy counter
 *                              before 503 (0 to 600000, default 5000;
 *                              0 tries once)
 *   TOKENLOCK_COUNTER_SYNC     none, file or file_and_dir (default)
 *   TOKENLOCK_COUNTER_GROUP    the group (name or gid) the counters are
 *                              shared with, when the script user and
 *                              another user both count (docs/security.md)
 * TOKENLOCK_COUNTER_LOCK (and its older names TOKENLOCK_COUNTER_REDIS and
 * _ETCD) is refused (500): this counter locks through lock directories
 * beside the counters only, and would not exclude a counter.cgi locking
 * elsewhere.
 *
 * Deploying: copy counter.php and Tokenlock.php (bindings/php/, the whole
 * module in one file) into the CGI directory; counter.php mode 0755,
 * Tokenlock.php 0644, the directory 0755 (suEXEC refuses anything
 * writable by others). The `tokenlock` command is not needed (`tokenlock
 * status` and `doctor` help to look at counters). Shared hosting,
 * .htaccess there:
 *
 *   Options +ExecCGI
 *   <Files "counter.php">
 *       SetHandler cgi-script
 *   </Files>
 *   <Files "Tokenlock.php">
 *       Require all denied
 *   </Files>
 *   SetEnv TOKENLOCK_COUNTER_DIR /home/alice/counter-data
 *   SetEnv REDIRECT_STATUS 200
 *
 * SetHandler makes the server execute this file as a CGI program (mod_cgi
 * or mod_cgid) rather than hand it to the host's own PHP handler.
 *
 * Hosts whose PHP handler is php-fpm (mod_proxy_fcgi) or mod_php run the
 * same file without its first line: unlike php-cgi, they do not skip a #!
 * line, and would send it as the start of every body (and refuse the
 * declare() below it). Delete that line, leave out the SetHandler above,
 * and set the variables the same way (SetEnv reaches php-fpm too); the
 * answers are the same (tests/e2e/languages_e2e.sh compares them).
 *
 * How php-cgi is configured, and why:
 *
 * - The #! line. The server executes this file, so the kernel runs
 *   `/usr/bin/php-cgi -dcgi.force_redirect=0 /path/counter.php`, and
 *   php-cgi, seeing GATEWAY_INTERFACE, runs SCRIPT_FILENAME (this file) as
 *   a CGI and skips the #! line. Change the path where php-cgi lives
 *   elsewhere (`command -v php-cgi`); `#!/usr/bin/env` cannot carry the
 *   option, and Linux passes everything after the interpreter as one
 *   argument, so only one option fits, written without a space.
 *
 * - cgi.force_redirect=0. By default php-cgi answers only requests that
 *   carry REDIRECT_STATUS, which Apache sets when it reaches php-cgi
 *   through an Action handler (an internal redirect), and otherwise prints
 *   "Security Alert! The PHP CGI cannot be accessed directly". That guards
 *   a php-cgi binary reachable as a URL. Here no URL leads to php-cgi: it is
 *   this script's interpreter. The setting is PHP_INI_SYSTEM, so neither
 *   .user.ini nor ini_set() can change it, and a php.ini beside the script
 *   would replace the host's whole php.ini; hence `-d` on the #! line.
 *
 * - SetEnv REDIRECT_STATUS 200 (optional). php-cgi ignores every command
 *   line option when the query string has no '=' and starts with '-' (its
 *   guard against CVE-2012-1823, as Apache passes such a query as command
 *   line arguments), so `counter.php?-s` meets force_redirect again and
 *   gets php-cgi's Security Alert, which Apache turns into a 500, instead
 *   of counter.cgi's 400. Nothing is counted either way. Setting
 *   REDIRECT_STATUS in the server makes php-cgi run the script for those
 *   too, and the answer is the 400 of counter.cgi.
 *
 * - php-cgi parses QUERY_STRING into $_GET by its own rules (a repeated
 *   name wins silently, `id[]` becomes an array, bad escapes pass). The
 *   query is parsed here from the raw QUERY_STRING instead, with
 *   counter.cgi's rules and limits, so both refuse the same URLs.
 *
 * - display_errors is turned off first thing: php-cgi's built-in default
 *   prints PHP's messages, with server paths, into the body. Details go to
 *   stderr, the server's error log.
 */

declare(strict_types=1);

ini_set('display_errors', '0');
ini_set('log_errors', '1');
header_remove('X-Powered-By');

/**
 * VALUE (from the query string or the environment) as counter.cgi shows it:
 * letters, digits and " _-.,:/=+@%" as they are, every other byte as \xNN,
 * at most 64 bytes of it, so that it can neither drive a terminal, forge a
 * log line, nor become markup.
 */
function counter_shown(string $value): string
{
    $out = preg_replace_callback('~[^A-Za-z0-9 _\-.,:/=+@%]~', static fn (array $m): string
        => sprintf('\\x%02x', ord($m[0])), substr($value, 0, 64));
    return $out . (strlen($value) > 64 ? '...' : '');
}

/** Writes one line to the server's error log. */
function counter_log(string $message): void
{
    static $stderr = null;
    $stderr ??= fopen('php://stderr', 'wb');
    fwrite($stderr, 'counter.php: ' . str_replace("\n", "\n  ", rtrim($message)) . "\n");
}

/** @param list<array{0: string, 1: string}> $headers extra headers */
function counter_respond(int $status, string $body, string $type, array $headers, bool $headOnly): void
{
    http_response_code($status);
    header('Content-Type: ' . $type);
    header('Content-Length: ' . strlen($body));
    header('Cache-Control: no-store');
    // A browser must not guess HTML in a text answer that echoes input.
    header('X-Content-Type-Options: nosniff');
    foreach ($headers as [$name, $value]) {
        header("$name: $value");
    }
    if (!$headOnly) {
        echo $body;
    }
}

/** counter.cgi's cgi::percent_decode: '+' is a space; a bad escape or NUL fails. */
function counter_percent_decode(string $in, ?string &$out): bool
{
    $out = '';
    $n = strlen($in);
    for ($i = 0; $i < $n; ++$i) {
        $c = $in[$i];
        if ($c === '+') {
            $out .= ' ';
        } elseif ($c === '%') {
            if ($i + 2 >= $n || !ctype_xdigit($in[$i + 1] . $in[$i + 2])) {
                return false;
            }
            $d = chr(hexdec($in[$i + 1] . $in[$i + 2]));
            if ($d === "\0") {
                return false;
            }
            $out .= $d;
            $i += 2;
        } elseif ($c === "\0") {
            return false;
        } else {
            $out .= $c;
        }
    }
    return true;
}

/**
 * counter.cgi's cgi::parse_query, with its limits: null and a reason, or
 * the parameters. Keys are strings again (PHP turns "1" into 1).
 *
 * @return array{0: ?array<string, string>, 1: string}
 */
function counter_parse_query(string $query): array
{
    if (strlen($query) > 2048) {
        return [null, 'query string too long'];
    }
    $out = [];
    $len = strlen($query);
    $start = 0;
    while ($start <= $len) {
        $end = strpos($query, '&', $start);
        if ($end === false) {
            $end = $len;
        }
        $piece = substr($query, $start, $end - $start);
        $start = $end + 1;
        if ($piece === '') {
            if ($end === $len) {
                break;
            }
            continue;
        }
        $eq = strpos($piece, '=');
        $value = '';
        if (!counter_percent_decode($eq === false ? $piece : substr($piece, 0, $eq), $name)
            || ($eq !== false && !counter_percent_decode(substr($piece, $eq + 1), $value))) {
            return [null, 'invalid percent-encoding'];
        }
        if ($name === '') {
            return [null, 'parameter without a name'];
        }
        if (strlen($name) > 32 || strlen($value) > 256) {
            return [null, 'parameter too long'];
        }
        if (array_key_exists($name, $out)) {
            return [null, 'repeated parameter'];
        }
        if (count($out) === 16) {
            return [null, 'too many parameters'];
        }
        $out[$name] = $value;
        if ($end === $len) {
            break;
        }
    }
    return [$out, ''];
}

/**
 * counter.cgi's load_config: [dir, wait in ms, sync], or null and why.
 *
 * @return array{0: ?array{0: string, 1: int, 2: string}, 1: string}
 */
function counter_config(): array
{
    $dir = (string) getenv('TOKENLOCK_COUNTER_DIR');
    if ($dir === '') {
        $dir = '/var/lib/tokenlock-counter';
    }
    $waitMs = 5000;
    $wait = (string) getenv('TOKENLOCK_COUNTER_WAIT_MS');
    if ($wait !== '') {
        // strtol's syntax, as counter.cgi reads it: leading white space, a
        // sign, digits, nothing after.
        $ok = preg_match('/\A[ \t\n\x0B\f\r]*([+-]?)0*([0-9]+)\z/', $wait, $m) === 1;
        if ($ok) {
            $negative = $m[1] === '-' && trim($m[2], '0') !== '';
            $ok = !$negative && strlen($m[2]) <= 6 && (int) $m[2] <= 600000;
            $waitMs = $ok ? (int) $m[2] : 0;
        }
        if (!$ok) {
            return [null, 'TOKENLOCK_COUNTER_WAIT_MS must be 0 to 600000 milliseconds, not "' . counter_shown($wait) . '"'];
        }
    }
    foreach (['TOKENLOCK_COUNTER_LOCK', 'TOKENLOCK_COUNTER_REDIS', 'TOKENLOCK_COUNTER_ETCD'] as $name) {
        if ((string) getenv($name) !== '') {
            return [null, "$name is set, but counter.php locks through lock directories beside the counters only "
                . '(use counter.cgi, or unset it)'];
        }
    }
    $sync = (string) getenv('TOKENLOCK_COUNTER_SYNC');
    if ($sync === '') {
        $sync = 'file_and_dir';
    } elseif (!in_array($sync, ['none', 'file', 'file_and_dir'], true)) {
        return [null, 'TOKENLOCK_COUNTER_SYNC must be none, file or file_and_dir, not "' . counter_shown($sync) . '"'];
    }
    $group = (string) getenv('TOKENLOCK_COUNTER_GROUP');
    return [[$dir, $waitMs, $sync, $group === '' ? null : $group], ''];
}

/** The image counter.cgi draws: at least six digits, fixed height. */
function counter_svg(string $value): string
{
    $digits = str_pad($value, 6, '0', STR_PAD_LEFT);
    $width = 12 + 11 * strlen($digits);
    $half = intdiv($width, 2);
    return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        . "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"$width\" height=\"24\" viewBox=\"0 0 $width 24\" role=\"img\" aria-label=\"$value hits\">\n"
        . "<title>$value hits</title>\n"
        . "<rect width=\"$width\" height=\"24\" rx=\"3\" fill=\"#1d1f21\"/>\n"
        . "<text x=\"$half\" y=\"17\" fill=\"#b5f566\" font-size=\"16\" "
        . "font-family=\"DejaVu Sans Mono, Menlo, Consolas, monospace\" text-anchor=\"middle\" "
        . "letter-spacing=\"1\">$digits</text>\n"
        . "</svg>\n";
}

/**
 * Loads the tokenlock module: Tokenlock.php beside this file, else, run
 * from the source tree, the module's sources. False when there is none.
 */
function counter_load_module(): bool
{
    // A host may have loaded the module already (auto_prepend_file, its
    // composer autoloader): a second copy would redeclare its functions.
    if (function_exists('Tokenlock\\increment')) {
        return true;
    }
    foreach ([__DIR__ . '/Tokenlock.php', __DIR__ . '/../../bindings/php/autoload.php'] as $module) {
        if (is_file($module)) {
            require_once $module;
            return true;
        }
    }
    return false;
}

/**
 * The parameters of a request, checked as counter.cgi checks them.
 *
 * @return array{0: ?array{0: string, 1: string, 2: string}, 1: string}
 *         [id, format, peek], or null and why the query is refused
 */
function counter_read_query(string $query): array
{
    [$q, $reason] = counter_parse_query($query);
    if ($q === null) {
        return [null, $reason];
    }
    // counter.cgi names the first unknown parameter in byte order.
    $names = array_map('strval', array_keys($q));
    sort($names, SORT_STRING);
    foreach ($names as $name) {
        if ($name !== 'id' && $name !== 'format' && $name !== 'peek') {
            return [null, 'unknown parameter ' . counter_shown($name)];
        }
    }
    $id = $q['id'] ?? 'default';
    if (preg_match('/\A[A-Za-z0-9_-]{1,64}\z/', $id) !== 1) {
        return [null, "id must be 1 to 64 letters, digits, '_' or '-'"];
    }
    $format = $q['format'] ?? 'text';
    if (!in_array($format, ['text', 'json', 'svg'], true)) {
        return [null, 'format must be text, json or svg'];
    }
    $peek = $q['peek'] ?? '0';
    if ($peek !== '0' && $peek !== '1') {
        return [null, 'peek must be 0 or 1'];
    }
    return [[$id, $format, $peek], ''];
}

/**
 * The request, as counter.cgi's counter::handle answers it.
 *
 * @param array{0: string, 1: int, 2: string, 3: ?string} $config
 * @return array{0: int, 1: string, 2: string, 3: list<array{0: string, 1: string}>}
 *         status, body, content type, extra headers
 */
function counter_handle(string $method, string $query, array $config): array
{
    $text = 'text/plain; charset=utf-8';
    if ($method !== 'GET' && $method !== 'HEAD') {
        return [405, "only GET and HEAD are allowed\n", $text, [['Allow', 'GET, HEAD']]];
    }
    [$request, $reason] = counter_read_query($query);
    if ($request === null) {
        return [400, "$reason\n", $text, []];
    }
    [$id, $format, $peek] = $request;

    [$dir, $waitMs, $sync, $group] = $config;
    $file = "$dir/$id.count";
    try {
        $value = ($peek === '1' || $method === 'HEAD')
            ? (Tokenlock\readCounter($file) ?? 0)
            : Tokenlock\increment($file, ['wait' => $waitMs / 1000, 'sync' => $sync, 'group' => $group]);
    } catch (Tokenlock\Exception $e) {
        counter_log($e->getMessage());
        // stale_data: a network filesystem's client served an old version;
        // nothing was written, and a retry will likely succeed.
        if ($e instanceof Tokenlock\NotAcquiredException || $e->getError() === 'stale_data') {
            return [503, "the counter is busy; try again\n", $text, [['Retry-After', '1']]];
        }
        if ($e->getError() === 'corrupt_data') {
            return [500, "the counter file is corrupt; it was left as it is\n", $text, []];
        }
        if (!($e instanceof Tokenlock\DirSyncException) || $e->getValue() === null) {
            return [500, "internal error; see the server's error log\n", $text, []];
        }
        // The hit is counted; only its durability is in doubt.
        $value = $e->getValue();
    }
    $value = (string) $value;
    if ($format === 'json') {
        return [200, "{\"id\":\"$id\",\"count\":$value}\n", 'application/json', []];
    }
    if ($format === 'svg') {
        return [200, counter_svg($value), 'image/svg+xml', []];
    }
    return [200, "$value\n", $text, []];
}

(function (): void {
    $method = (string) getenv('REQUEST_METHOD');
    $headOnly = $method === 'HEAD';
    // A request body is never used, but it is read (up to a bound) first:
    // a CGI that exits while the server still writes the body to its
    // standard input makes Apache reset the connection instead of answering.
    $left = min((int) getenv('CONTENT_LENGTH'), 1 << 20);
    if ($left > 0 && ($in = fopen('php://input', 'rb')) !== false) {
        while ($left > 0 && !feof($in) && ($chunk = fread($in, min($left, 65536))) !== false && $chunk !== '') {
            $left -= strlen($chunk);
        }
        fclose($in);
    }
    $misconfigured = "the counter is misconfigured; see the server's error log\n";
    $text = 'text/plain; charset=utf-8';

    if (!counter_load_module()) {
        counter_log('misconfigured: Tokenlock.php is not beside ' . __FILE__ . '; copy bindings/php/Tokenlock.php there');
        counter_respond(500, $misconfigured, $text, [], $headOnly);
        return;
    }

    [$config, $error] = counter_config();
    if ($config === null) {
        counter_log("misconfigured: $error");
        counter_respond(500, $misconfigured, $text, [], $headOnly);
        return;
    }
    try {
        [$status, $body, $type, $headers] = counter_handle($method, (string) getenv('QUERY_STRING'), $config);
    } catch (\Throwable $e) {
        counter_log(get_class($e) . ': ' . $e->getMessage() . ' at ' . $e->getFile() . ':' . $e->getLine());
        [$status, $body, $type, $headers] = [500, "internal error; see the server's error log\n", $text, []];
    }
    counter_respond($status, $body, $type, $headers, $headOnly);
})();
