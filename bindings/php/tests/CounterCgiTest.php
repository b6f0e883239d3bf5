<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\Lock;
use Tokenlock\Tests\Support\Cgi;
use Tokenlock\Tests\Support\CgiResponse;
use Tokenlock\Tests\Support\TempDirTestCase;
use Tokenlock\Tests\Support\Tool;

/**
 * cgi-examples/php/counter.php run as a web server runs a CGI program:
 * executed directly, so that php-cgi and its options come from the #! line.
 */
final class CounterCgiTest extends TempDirTestCase
{
    private string $script;
    private string $data;

    protected function setUp(): void
    {
        parent::setUp();
        $this->script = dirname(__DIR__, 3) . '/cgi-examples/php/counter.php';
        $interpreter = trim(substr((string) strtok((string) file_get_contents($this->script), "\n"), 2));
        $interpreter = strtok($interpreter, ' ');
        if (!is_executable((string) $interpreter)) {
            $this->markTestSkipped("counter.php runs with $interpreter, which is not installed");
        }
        $this->data = "$this->dir/data";
        mkdir($this->data);
    }

    /** @param array<string, string> $env */
    private function get(string $query, array $env = [], string $method = 'GET', string $body = ''): CgiResponse
    {
        return Cgi::request($this->script, $method, $query, $env + ['TOKENLOCK_COUNTER_DIR' => $this->data], $body);
    }

    private function assertCommonHeaders(CgiResponse $r): void
    {
        $this->assertSame('no-store', $r->header('Cache-Control'), $r->raw);
        $this->assertSame('nosniff', $r->header('X-Content-Type-Options'), $r->raw);
        $this->assertSame((string) strlen($r->body), $r->header('Content-Length'));
        $this->assertNull($r->header('X-Powered-By'));
        $this->assertStringNotContainsString($this->dir, $r->body, 'a body never shows a server path');
    }

    public function testGetCountsAndAnswersInText(): void
    {
        $r = $this->get('id=home');
        $this->assertSame(200, $r->status, $r->raw . $r->stderr);
        $this->assertSame('text/plain; charset=utf-8', $r->header('Content-Type'));
        $this->assertSame("1\n", $r->body);
        $this->assertCommonHeaders($r);
        $this->assertSame("2\n", $this->get('id=home')->body);
        $this->assertSame("2\n", file_get_contents("$this->data/home.count"));
        $this->assertDirectoryExists("$this->data/home.count.lock");
        $this->assertSame("1\n", $this->get('')->body, 'the id defaults to "default"');
        $this->assertSame("1\n", file_get_contents("$this->data/default.count"));
        $this->assertSame('', $r->stderr);
    }

    public function testJsonAndSvgFormats(): void
    {
        file_put_contents("$this->data/home.count", "6\n");
        $r = $this->get('id=home&format=json');
        $this->assertSame(200, $r->status);
        $this->assertSame('application/json', $r->header('Content-Type'));
        $this->assertSame("{\"id\":\"home\",\"count\":7}\n", $r->body);
        $this->assertSame(['id' => 'home', 'count' => 7], json_decode($r->body, true));
        $this->assertCommonHeaders($r);

        $r = $this->get('format=svg&id=home');
        $this->assertSame(200, $r->status);
        $this->assertSame('image/svg+xml', $r->header('Content-Type'));
        $this->assertSame(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            . "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"78\" height=\"24\" viewBox=\"0 0 78 24\" role=\"img\" aria-label=\"8 hits\">\n"
            . "<title>8 hits</title>\n"
            . "<rect width=\"78\" height=\"24\" rx=\"3\" fill=\"#1d1f21\"/>\n"
            . "<text x=\"39\" y=\"17\" fill=\"#b5f566\" font-size=\"16\" font-family=\"DejaVu Sans Mono, Menlo, Consolas, monospace\" text-anchor=\"middle\" letter-spacing=\"1\">000008</text>\n"
            . "</svg>\n",
            $r->body
        );
        $this->assertCommonHeaders($r);

        file_put_contents("$this->data/big.count", "1234566\n");
        $svg = $this->get('id=big&format=svg')->body;
        $this->assertStringContainsString('width="89"', $svg, 'seven digits make it wider');
        $this->assertStringContainsString('>1234567</text>', $svg);
    }

    public function testPeekAndHeadNeverCount(): void
    {
        $this->assertSame("0\n", $this->get('id=home&peek=1')->body, 'a missing counter reads 0');
        $this->assertFileDoesNotExist("$this->data/home.count");
        file_put_contents("$this->data/home.count", "41\n");
        $r = $this->get('id=home&peek=1&format=json');
        $this->assertSame(200, $r->status);
        $this->assertSame("{\"id\":\"home\",\"count\":41}\n", $r->body);

        $head = $this->get('id=home', [], 'HEAD');
        $this->assertSame(200, $head->status);
        $this->assertSame('', $head->body);
        $this->assertSame('3', $head->header('Content-Length'), 'the length of the GET body, "41\n"');
        $this->assertSame('no-store', $head->header('Cache-Control'));
        $this->assertSame("41\n", file_get_contents("$this->data/home.count"));
        $this->assertSame("42\n", $this->get('id=home&peek=0')->body);
    }

    /** @return array<string, array{0: string, 1: string}> */
    public function badQueries(): array
    {
        return [
            'id too long' => ['id=' . str_repeat('a', 65), "id must be 1 to 64 letters, digits, '_' or '-'"],
            'empty id' => ['id=', "id must be 1 to 64 letters, digits, '_' or '-'"],
            'id without value' => ['id', "id must be 1 to 64 letters, digits, '_' or '-'"],
            'dot in id' => ['id=a.b', "id must be 1 to 64 letters, digits, '_' or '-'"],
            'encoded slash' => ['id=..%2Fetc', "id must be 1 to 64 letters, digits, '_' or '-'"],
            'plus is a space' => ['id=a+b', "id must be 1 to 64 letters, digits, '_' or '-'"],
            'unknown parameter' => ['id=a&x=1', 'unknown parameter x'],
            'first unknown in byte order' => ['zz=1&b=2&id=a', 'unknown parameter b'],
            'php array syntax' => ['id[]=a', 'unknown parameter id\\x5b\\x5d'],
            'markup and a line break, escaped' => ['%3Cb%3E%0D%0AX:%201%1B=1', 'unknown parameter \\x3cb\\x3e\\x0d\\x0aX: 1\\x1b'],
            'repeated' => ['id=a&id=b', 'repeated parameter'],
            'repeated, same value' => ['format=json&format=json', 'repeated parameter'],
            'bad escape' => ['id=%zz', 'invalid percent-encoding'],
            'short escape' => ['id=ab%4', 'invalid percent-encoding'],
            'encoded NUL' => ['id=a%00', 'invalid percent-encoding'],
            'name missing' => ['=x', 'parameter without a name'],
            'long name' => [str_repeat('n', 33) . '=1', 'parameter too long'],
            'long value' => ['id=' . str_repeat('v', 257), 'parameter too long'],
            'too many' => [implode('&', array_map(fn ($i) => "p$i=1", range(1, 17))), 'too many parameters'],
            'too long' => ['id=a&' . str_repeat('x', 2044), 'query string too long'],
            'format' => ['format=xml', 'format must be text, json or svg'],
            'peek' => ['peek=yes', 'peek must be 0 or 1'],
        ];
    }

    /** @dataProvider badQueries */
    public function testABadQueryIs400WithAShortReasonAndCountsNothing(string $query, string $reason): void
    {
        $r = $this->get($query);
        $this->assertSame(400, $r->status, $r->raw . $r->stderr);
        $this->assertSame("$reason\n", $r->body);
        $this->assertSame('text/plain; charset=utf-8', $r->header('Content-Type'));
        $this->assertCommonHeaders($r);
        $this->assertSame([], self::tree($this->data));
    }

    public function testAQueryLikeAnOptionIsRefusedByPhpCgiOrWithRedirectStatusBy400(): void
    {
        // php-cgi ignores its #! option for such a query (tokenlock's
        // counter.php explains why): it refuses itself, and counts nothing.
        $r = $this->get('-s');
        $this->assertNotSame(200, $r->status);
        $this->assertStringNotContainsString('<?php', $r->raw, 'php-cgi -s would show the source');
        $this->assertSame([], self::tree($this->data));

        $r = $this->get('-s', ['REDIRECT_STATUS' => '200']);
        $this->assertSame(400, $r->status, $r->raw);
        $this->assertSame("unknown parameter -s\n", $r->body);
        $this->assertSame([], self::tree($this->data));
    }

    public function testOtherMethodsAre405WithAllow(): void
    {
        foreach (['POST', 'PUT', 'DELETE', 'OPTIONS'] as $method) {
            $r = $this->get('id=home', [], $method, $method === 'POST' ? 'a=1&b=2' : '');
            $this->assertSame(405, $r->status, $method);
            $this->assertSame('GET, HEAD', $r->header('Allow'));
            $this->assertSame("only GET and HEAD are allowed\n", $r->body);
            $this->assertCommonHeaders($r);
        }
        $this->assertSame([], self::tree($this->data));
    }

    public function testABusyCounterIs503WithRetryAfterWithinTheWaitBudget(): void
    {
        file_put_contents("$this->data/home.count", "5\n");
        $lock = Lock::acquire("$this->data/home.count.lock");
        $start = microtime(true);
        $r = $this->get('id=home', ['TOKENLOCK_COUNTER_WAIT_MS' => '300']);
        $elapsed = microtime(true) - $start;
        $this->assertSame(503, $r->status, $r->raw . $r->stderr);
        $this->assertSame('1', $r->header('Retry-After'));
        $this->assertSame("the counter is busy; try again\n", $r->body);
        $this->assertCommonHeaders($r);
        $this->assertGreaterThanOrEqual(0.25, $elapsed);
        $this->assertLessThan(5.0, $elapsed);
        $this->assertStringContainsString("$this->data/home.count.lock", $r->stderr, 'the log says which lock');
        $this->assertSame("5\n", file_get_contents("$this->data/home.count"));

        $this->assertSame(503, $this->get('id=home', ['TOKENLOCK_COUNTER_WAIT_MS' => '0'])->status);
        $this->assertSame("5\n", $this->get('id=home&peek=1')->body, 'peek does not wait for the lock');
        $lock->release();
        $this->assertSame("6\n", $this->get('id=home', ['TOKENLOCK_COUNTER_WAIT_MS' => '0'])->body);
        $this->assertNoTemporaryFiles($this->data);
    }

    public function testACorruptCounterIs500AndIsLeftAsItIs(): void
    {
        file_put_contents("$this->data/home.count", "garbage\n");
        foreach (['id=home', 'id=home&peek=1'] as $query) {
            $r = $this->get($query);
            $this->assertSame(500, $r->status, $query);
            $this->assertSame("the counter file is corrupt; it was left as it is\n", $r->body);
            $this->assertCommonHeaders($r);
            $this->assertStringContainsString("$this->data/home.count", $r->stderr, 'the log names the file');
        }
        $this->assertSame("garbage\n", file_get_contents("$this->data/home.count"));
        $this->assertNoTemporaryFiles($this->data);
        $this->assertLockFree("$this->data/home.count.lock");
    }

    public function testAnOversizedCounterIs500AndIsLeftAsItIs(): void
    {
        $h = fopen("$this->data/home.count", 'w');
        ftruncate($h, 64 << 20);
        fclose($h);
        foreach (['id=home', 'id=home&peek=1'] as $query) {
            $r = $this->get($query);
            $this->assertSame(500, $r->status, $query . $r->stderr);
            $this->assertSame("the counter file is corrupt; it was left as it is\n", $r->body);
            $this->assertStringContainsString('more than the 64 a counter may', $r->stderr);
        }
        clearstatcache();
        $this->assertSame(64 << 20, filesize("$this->data/home.count"));
        $this->assertLockFree("$this->data/home.count.lock");
    }

    public function testTheGroupNamedForSharingMakesTheLockInThatGroupAndAnotherIsRefused(): void
    {
        $gid = posix_getegid();
        $r = $this->get('id=home', ['TOKENLOCK_COUNTER_GROUP' => (string) $gid]);
        $this->assertSame(200, $r->status, $r->raw . $r->stderr);
        $this->assertSame("1\n", $r->body);
        clearstatcache();
        $this->assertSame($gid, filegroup("$this->data/home.count.lock"));
        $this->assertSame('0775', sprintf('%04o', fileperms("$this->data/home.count.lock") & 07777), 'group-writable');
        $r = $this->get('id=home');
        $this->assertSame(500, $r->status, 'without the group named, its group-writable lock directory is refused');
        $this->assertStringContainsString('which is not the group chosen for sharing', $r->stderr);
        $r = $this->get('id=home', ['TOKENLOCK_COUNTER_GROUP' => 'no-such-group-tl']);
        $this->assertSame(500, $r->status);
        $this->assertStringContainsString('does not exist', $r->stderr);
        $this->assertSame("1\n", file_get_contents("$this->data/home.count"), 'counted once');
    }

    public function testItCountsWithNoTokenlockCommandAnywhere(): void
    {
        $env = ['TOKENLOCK_COMMAND' => "$this->dir/no-command", 'PATH' => "$this->dir/empty", 'HOME' => "$this->dir/nohome"];
        foreach ([1, 2] as $n) {
            $r = $this->get('id=home', $env);
            $this->assertSame(200, $r->status, $r->raw . $r->stderr);
            $this->assertSame("$n\n", $r->body);
            $this->assertCommonHeaders($r);
            $this->assertSame('', $r->stderr, 'nothing to log');
        }
        $this->assertSame("2\n", file_get_contents("$this->data/home.count"));
        $this->assertNoTemporaryFiles($this->data);
        $this->assertLockFree("$this->data/home.count.lock");
    }

    public function testAMissingDataDirectoryIs500AndTheLogSaysWhere(): void
    {
        $missing = "$this->dir/no-such-dir";
        $r = $this->get('id=home', ['TOKENLOCK_COUNTER_DIR' => $missing]);
        $this->assertSame(500, $r->status);
        $this->assertSame("internal error; see the server's error log\n", $r->body);
        $this->assertCommonHeaders($r);
        $this->assertStringContainsString($missing, $r->stderr);
        $this->assertDirectoryDoesNotExist($missing);
    }

    /**
     * A data directory that cannot be flushed: each hit is counted and then
     * its flush fails, so the answer is 200 with the count, as counter.cgi
     * answers, and the log says what to fix.
     */
    public function testAnUnflushableDataDirectoryCountsAndAnswers200(): void
    {
        $drop = $this->unflushableDirectory('drop');
        $env = ['TOKENLOCK_COUNTER_DIR' => $drop, 'TOKENLOCK_COUNTER_SYNC' => 'file_and_dir', 'SCRIPT_FILENAME' => $this->script];
        foreach ([1, 2, 3] as $n) {
            $r = Cgi::request($this->scriptWithoutPrivileges(), 'GET', 'id=drop&format=json', $env);
            $this->assertSame(200, $r->status, $r->raw . $r->stderr);
            $this->assertSame("{\"id\":\"drop\",\"count\":$n}\n", $r->body);
            $this->assertCommonHeaders($r);
            $this->assertStringContainsString("give this user read permission on $drop", $r->stderr);
        }
        chmod($drop, 0755);
        $this->assertSame("3\n", file_get_contents("$drop/drop.count"));
        $this->assertNoTemporaryFiles($drop);
    }

    /**
     * counter.php, run where permissions can fail: as root, through a
     * wrapper that runs it as user nobody.
     */
    private function scriptWithoutPrivileges(): string
    {
        if (posix_geteuid() !== 0) {
            return $this->script;
        }
        $wrapper = "$this->dir/counter-as-nobody";
        file_put_contents($wrapper, "#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups "
            . escapeshellarg($this->script) . " \"\$@\"\n");
        chmod($wrapper, 0755);
        return $wrapper;
    }

    /**
     * A network filesystem's client that keeps serving an old version:
     * played on a local disk with a version mark newer than the file, and
     * the module told (through an ini file PHP_INI_SCAN_DIR adds) that the
     * lock is on a network filesystem. Nothing is written: 503 with
     * Retry-After, as counter.cgi answers stale_data.
     */
    public function testStaleDataIs503WithRetryAfterAndWritesNothing(): void
    {
        $file = "$this->data/net.count";
        file_put_contents($file, "1\n");
        touch($file, time() - 100);
        Lock::acquire("$file.lock")->release();
        mkdir("$file.lock/lockfile/w");
        $mark = "$file.lock/lockfile/w/v." . \Tokenlock\Files::fnvHex("2\n") . '.' . (time() * 1000000);
        touch($mark);
        $module = TOKENLOCK_TEST_MODULE;
        mkdir("$this->dir/ini");
        file_put_contents("$this->dir/prepend.php", "<?php\nrequire_once " . var_export($module, true) . ";\n"
            . 'Tokenlock\Files::$localFor[' . var_export("$file.lock", true) . "] = false;\n"
            . "Tokenlock\\Files::\$staleReadBudgetUs = 50000;\n");
        file_put_contents("$this->dir/ini/prepend.ini", "auto_prepend_file=$this->dir/prepend.php\n");
        $r = $this->get('id=net', ['PHP_INI_SCAN_DIR' => ":$this->dir/ini"]);
        $this->assertSame(503, $r->status, $r->raw . $r->stderr);
        $this->assertSame("the counter is busy; try again\n", $r->body);
        $this->assertSame('1', $r->header('Retry-After'));
        $this->assertCommonHeaders($r);
        $this->assertStringContainsString("$file: this client keeps reading a version older", $r->stderr);
        $this->assertSame("1\n", file_get_contents($file), 'nothing was written');
        $this->assertFileExists($mark);
        $this->assertNoTemporaryFiles($this->data);
        $this->assertLockFree("$file.lock");
    }

    /** @return array<string, array{0: string, 1: string, 2: string}> */
    public function badConfigurations(): array
    {
        return [
            'wait not a number' => ['TOKENLOCK_COUNTER_WAIT_MS', 'soon', 'TOKENLOCK_COUNTER_WAIT_MS must be 0 to 600000'],
            'wait negative' => ['TOKENLOCK_COUNTER_WAIT_MS', '-1', 'TOKENLOCK_COUNTER_WAIT_MS must be 0 to 600000'],
            'wait too long' => ['TOKENLOCK_COUNTER_WAIT_MS', '600001', 'TOKENLOCK_COUNTER_WAIT_MS must be 0 to 600000'],
            'wait with a unit' => ['TOKENLOCK_COUNTER_WAIT_MS', '5s', 'TOKENLOCK_COUNTER_WAIT_MS must be 0 to 600000'],
            'sync' => ['TOKENLOCK_COUNTER_SYNC', 'always', 'TOKENLOCK_COUNTER_SYNC must be none, file or file_and_dir'],
            'redis' => ['TOKENLOCK_COUNTER_REDIS', 'redis://127.0.0.1:6379', 'TOKENLOCK_COUNTER_REDIS is set'],
            'etcd' => ['TOKENLOCK_COUNTER_ETCD', 'etcd://127.0.0.1:2379', 'TOKENLOCK_COUNTER_ETCD is set'],
            'lock on a server' => ['TOKENLOCK_COUNTER_LOCK', 'redis://127.0.0.1:6379', 'TOKENLOCK_COUNTER_LOCK is set, but counter.php locks through lock directories'],
            'lock directories elsewhere' => ['TOKENLOCK_COUNTER_LOCK', '/srv/locks', 'TOKENLOCK_COUNTER_LOCK is set'],
        ];
    }

    /** @dataProvider badConfigurations */
    public function testAnInvalidConfigurationIs500ForEveryRequestAndTheLogNamesTheVariable(string $name, string $value, string $logged): void
    {
        foreach (['GET', 'HEAD', 'POST'] as $method) {
            $r = $this->get('id=home', [$name => $value], $method);
            $this->assertSame(500, $r->status, $method);
            $this->assertSame($method === 'HEAD' ? '' : "the counter is misconfigured; see the server's error log\n", $r->body);
            $this->assertStringContainsString($logged, $r->stderr);
        }
        $this->assertSame([], self::tree($this->data));
    }

    public function testValidConfigurationsAreAccepted(): void
    {
        $n = 0;
        foreach (['0', '+250', ' 250', '600000', '007'] as $wait) {
            foreach (['none', 'file', 'file_and_dir'] as $sync) {
                $r = $this->get('id=home', ['TOKENLOCK_COUNTER_WAIT_MS' => $wait, 'TOKENLOCK_COUNTER_SYNC' => $sync]);
                $this->assertSame(200, $r->status, "wait \"$wait\", sync $sync: " . $r->stderr);
                $this->assertSame(++$n . "\n", $r->body);
            }
        }
    }

    public function testConcurrentHitsFromPhpAndTheCommandAreAllCounted(): void
    {
        $values = [];
        for ($round = 0; $round < 3; ++$round) {
            $running = [];
            for ($i = 0; $i < 8; ++$i) {
                $running[] = Cgi::start($this->script, 'GET', 'id=shared', [
                    'TOKENLOCK_COUNTER_DIR' => $this->data,
                    'TOKENLOCK_COUNTER_SYNC' => 'none',
                    'TOKENLOCK_COUNTER_WAIT_MS' => '30000',
                ]);
            }
            // The same counter through the command, as counter.cgi and
            // scripts do.
            [$status, $out] = Tool::run(['incr', "$this->data/shared.count"]);
            $this->assertSame(0, $status);
            $values[] = (int) $out;
            foreach ($running as $started) {
                $r = Cgi::finish($started);
                $this->assertSame(200, $r->status, $r->raw . $r->stderr);
                $values[] = (int) $r->body;
            }
        }
        sort($values);
        $this->assertSame(range(1, 27), $values);
        $this->assertSame("27\n", file_get_contents("$this->data/shared.count"));
        $this->assertNoTemporaryFiles($this->data);
    }

    public function testAnswersAsCounterCgiDoes(): void
    {
        $cgi = getenv('TOKENLOCK_COUNTER_CGI') ?: dirname(__DIR__, 3) . '/build/cgi-examples/counter/counter.cgi';
        if (!is_executable($cgi)) {
            // Named by the caller (ctest does): it must be there.
            $this->assertFalse((bool) getenv('TOKENLOCK_COUNTER_CGI'), "TOKENLOCK_COUNTER_CGI names $cgi, which is not executable");
            $this->markTestSkipped("counter.cgi is not built ($cgi); set TOKENLOCK_COUNTER_CGI to compare with it");
        }
        $requests = [];
        foreach (['', 'id=home', 'id=home&format=json', 'format=svg&id=x', 'id=home&peek=1', 'peek=0', 'id=%41bc',
                  '&&id=a&', 'id=a;b', 'ID=a', '%ff=1', 'id=%C3%A9', 'id', 'abc', 'a=1&id', 'id=a&format=json&peek=1&x',
                  'id=' . str_repeat('a', 64), 'format=', 'peek=', '-s', 'id=%2', 'id=a%', 'x=%zz&id=a'] as $q) {
            $requests[] = ['GET', $q, []];
        }
        foreach ($this->badQueries() as [$q]) {
            $requests[] = ['GET', $q, []];
        }
        foreach (['HEAD', 'POST', 'PUT', 'DELETE', ''] as $method) {
            $requests[] = [$method, 'id=home', []];
        }
        foreach (['soon', '-1', '600001', ' 5', '5 ', '+5', '0', '-0', '00000000005', '1e3'] as $wait) {
            $requests[] = ['GET', 'id=w', ['TOKENLOCK_COUNTER_WAIT_MS' => $wait]];
        }
        foreach (['always', 'none', 'FILE'] as $sync) {
            $requests[] = ['GET', 'id=s', ['TOKENLOCK_COUNTER_SYNC' => $sync]];
        }
        $requests[] = ['GET', 'id=home', ['TOKENLOCK_COUNTER_DIR' => "$this->dir/missing"]];

        mkdir("$this->dir/php");
        mkdir("$this->dir/cpp");
        foreach ($requests as [$method, $query, $env]) {
            // REDIRECT_STATUS, as a server may set it, lets php-cgi run
            // queries that look like its own options.
            $env += ['REDIRECT_STATUS' => '200'];
            $php = Cgi::request($this->script, $method, $query, $env + ['TOKENLOCK_COUNTER_DIR' => "$this->dir/php"]);
            $cpp = Cgi::request($cgi, $method, $query, $env + ['TOKENLOCK_COUNTER_DIR' => "$this->dir/cpp"]);
            $what = "$method ?$query " . json_encode($env);
            $this->assertSame($cpp->status, $php->status, $what);
            $this->assertSame($cpp->body, $php->body, $what);
            foreach (['content-type', 'content-length', 'cache-control', 'allow', 'retry-after'] as $h) {
                $this->assertSame($cpp->header($h), $php->header($h), "$what: $h");
            }
        }
        $this->assertSame(self::tree("$this->dir/cpp"), self::tree("$this->dir/php"), 'the same files');

        // The same error statuses for a busy and a corrupt counter.
        foreach (['php', 'cpp'] as $side) {
            file_put_contents("$this->dir/$side/bad.count", "garbage\n");
        }
        $php = Cgi::request($this->script, 'GET', 'id=bad', ['TOKENLOCK_COUNTER_DIR' => "$this->dir/php"]);
        $cpp = Cgi::request($cgi, 'GET', 'id=bad', ['TOKENLOCK_COUNTER_DIR' => "$this->dir/cpp"]);
        $this->assertSame([$cpp->status, $cpp->body], [$php->status, $php->body]);
        // A counter at its maximum: the increment would overflow.
        foreach (['php', 'cpp'] as $side) {
            file_put_contents("$this->dir/$side/max.count", "18446744073709551615\n");
        }
        $php = Cgi::request($this->script, 'GET', 'id=max', ['TOKENLOCK_COUNTER_DIR' => "$this->dir/php"]);
        $cpp = Cgi::request($cgi, 'GET', 'id=max', ['TOKENLOCK_COUNTER_DIR' => "$this->dir/cpp"]);
        $this->assertSame([$cpp->status, $cpp->body], [$php->status, $php->body]);
        $this->assertSame(500, $php->status);
        $this->assertSame("18446744073709551615\n", file_get_contents("$this->dir/php/max.count"));
        $locks = [Lock::acquire("$this->dir/php/home.count.lock"), Lock::acquire("$this->dir/cpp/home.count.lock")];
        $php = Cgi::request($this->script, 'GET', 'id=home', ['TOKENLOCK_COUNTER_DIR' => "$this->dir/php", 'TOKENLOCK_COUNTER_WAIT_MS' => '100']);
        $cpp = Cgi::request($cgi, 'GET', 'id=home', ['TOKENLOCK_COUNTER_DIR' => "$this->dir/cpp", 'TOKENLOCK_COUNTER_WAIT_MS' => '100']);
        $this->assertSame([$cpp->status, $cpp->body, $cpp->header('Retry-After')], [$php->status, $php->body, $php->header('Retry-After')]);
        $this->assertSame(503, $php->status);
        foreach ($locks as $lock) {
            $lock->release();
        }
    }
}
