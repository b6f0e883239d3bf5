<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\BusyException;
use Tokenlock\Exception;
use Tokenlock\LockLostException;
use Tokenlock\NotAcquiredException;
use Tokenlock\Redis\Scripts;
use Tokenlock\RedisLock;
use Tokenlock\Tests\Support\Channel;
use Tokenlock\Tests\Support\Child;
use Tokenlock\Tests\Support\RedisServer;
use Tokenlock\Tests\Support\RedisTestCase;
use Tokenlock\Tests\Support\Tool;

/**
 * Tokenlock\RedisLock against a real redis-server, side by side with the
 * C++ client as the `tokenlock --redis` command: one lock, one line of
 * fences, whichever process holds it.
 */
final class RedisLockTest extends RedisTestCase
{
    /**
     * `tokenlock SUBCOMMAND --redis URL ARGS...`.
     *
     * @param list<string> $args
     * @return array{0: int, 1: string, 2: string} status, stdout, stderr
     */
    private function tool(string $subcommand, array $args): array
    {
        return Tool::run(array_merge([$subcommand, '--redis', $this->server->url()], $args));
    }

    /** The C++ client takes the lock; its token. */
    private function cppAcquire(string $name, float $lease = 300): string
    {
        [$status, $out, $err] = $this->tool('acquire', ['-n', '--lease', (string) $lease, '--', $name]);
        $this->assertSame(0, $status, "tokenlock acquire --redis: $err");
        return trim($out);
    }

    private function cppRelease(string $name, string $token): void
    {
        [$status, , $err] = $this->tool('release', ['--token', $token, '--', $name]);
        $this->assertSame(0, $status, "tokenlock release --redis: $err");
    }

    public function testTheScriptsAreTheCppClientsByteForByte(): void
    {
        // The holder script is checked against its source by
        // redis_scripts_php_current: the command's status asks for every
        // holder (holders.lua) instead.
        $shas = [sha1(Scripts::ACQUIRE), sha1(Scripts::SETTLE), sha1(Scripts::ACQUIRE_SHARED), sha1(Scripts::SETTLE_SHARED), sha1(Scripts::HOLDERS)];
        $this->assertSame([0, 0, 0, 0, 0], $this->client->script('exists', ...$shas), 'a fresh server knows no script');
        $token = $this->cppAcquire('scripts');
        $this->cppRelease('scripts', $token);
        [$status, $share, $err] = $this->tool('acquire', ['-s', '-n', '--', 'scripts']);
        $this->assertSame(0, $status, $err);
        $this->assertSame(0, $this->tool('status', ['--', 'scripts'])[0]);
        // The command's shared token is the owner id alone, and its own
        // release takes it back as printed.
        $this->cppRelease('scripts', trim($share));
        // The server caches a script under the SHA-1 of its text.
        $this->assertSame([1, 1, 1, 1, 1], $this->client->script('exists', ...$shas), "the C++ client's scripts are these");
    }

    public function testPhpHoldsAndTheCommandIsRefused(): void
    {
        $lock = RedisLock::acquire($this->server->url(), 'jobs', ['lease' => 60]);
        $this->assertTrue($lock->isHeld());
        [$status, , $err] = $this->tool('acquire', ['-n', '--', 'jobs']);
        $this->assertSame(1, $status, $err);
        $this->assertStringContainsString('held by pid ' . getmypid(), $err);
        [$status, $out] = $this->tool('run', ['-n', '--', 'jobs', 'echo', 'ran']);
        $this->assertSame(1, $status);
        $this->assertSame('', $out, 'run did not run its command');
        $this->assertSame((string) $lock->fence() . ' ' . $lock->owner(), $this->client->get('tokenlock:jobs'));
        $lock->release();
        $this->assertFalse($lock->isHeld());
        $this->assertSame(0, $this->client->exists('tokenlock:jobs'));
        [$status, $out] = $this->tool('run', ['-n', '--', 'jobs', 'echo', 'ran']);
        $this->assertSame([0, "ran\n"], [$status, $out]);
    }

    public function testTheCommandHoldsAndPhpIsRefused(): void
    {
        $token = $this->cppAcquire('jobs');
        $this->assertNull(RedisLock::tryAcquire($this->server->url(), 'jobs'));
        try {
            RedisLock::acquire($this->server->url(), 'jobs', ['wait' => 0]);
            $this->fail('acquired a lock the command holds');
        } catch (BusyException $e) {
            $this->assertSame('busy', $e->getError());
            $this->assertSame(1, $e->getCode());
            $this->assertStringContainsString('held by pid', $e->getMessage());
        }
        $holder = RedisLock::holder($this->server->url(), 'jobs');
        $this->assertSame($token, $holder['fence'] . '.' . $holder['owner']);
        $this->assertSame(RedisLock::hostTag(), $holder['host_tag'], 'PHP makes the host tag as the C++ library does');
        $this->cppRelease('jobs', $token);
        $lock = RedisLock::acquire($this->server->url(), 'jobs', ['wait' => 0]);
        $this->assertGreaterThan((int) explode('.', $token)[0], $lock->fence());
        $lock->release();
    }

    public function testFencesIncreaseAcrossPhpAndCppGrants(): void
    {
        $fences = [];
        for ($i = 0; $i < 3; ++$i) {
            $lock = RedisLock::acquire($this->server->url(), 'fenced');
            $fences[] = $lock->fence();
            $lock->release();
            $token = $this->cppAcquire('fenced');
            $fences[] = (int) explode('.', $token)[0];
            $this->cppRelease('fenced', $token);
        }
        // The last fence ahead of the server's clock: both still go past it.
        $ahead = (int) $this->client->get('tokenlock:fenced:fence') + 10_000_000_000;
        $this->client->set('tokenlock:fenced:fence', (string) $ahead);
        $lock = RedisLock::acquire($this->server->url(), 'fenced');
        $fences[] = $lock->fence();
        $lock->release();
        $fences[] = (int) explode('.', $this->cppAcquire('fenced'))[0];
        $sorted = $fences;
        sort($sorted);
        $this->assertSame($sorted, $fences);
        $this->assertCount(8, array_unique($fences));
        $this->assertSame([$ahead + 1, $ahead + 2], array_slice($fences, 6));
    }

    public function testRefreshStartsANewLease(): void
    {
        $lock = RedisLock::acquire($this->server->url(), 'long', ['lease' => 2]);
        $this->assertLessThanOrEqual(2000, $this->client->pttl('tokenlock:long'));
        $lock->refresh(600);
        $this->assertGreaterThan(590000, $this->client->pttl('tokenlock:long'));
        $this->assertGreaterThan(590, RedisLock::holder($this->server->url(), 'long')['remaining']);
        $lock->release();
    }

    public function testAnExpiredHolderTakenOverByTheCommandHearsOfIt(): void
    {
        $lock = RedisLock::acquire($this->server->url(), 'short', ['lease' => 0.2]);
        $deadline = microtime(true) + 10;
        do {
            $this->assertLessThan($deadline, microtime(true), 'the lease did not end within 10 s');
            usleep(20000);
            [$status, $out] = $this->tool('acquire', ['-n', '--', 'short']);
        } while ($status !== 0);
        $token = trim($out);
        try {
            $lock->release();
            $this->fail('the release of a lock taken over succeeded');
        } catch (LockLostException $e) {
            $this->assertSame('lock_lost', $e->getError());
            $this->assertSame(3, $e->getCode());
            $this->assertStringContainsString('a newer grant (fence ' . explode('.', $token)[0] . ')', $e->getMessage());
        }
        $this->assertFalse($lock->isHeld());
        $this->assertSame(preg_replace('/\./', ' ', $token, 1), $this->client->get('tokenlock:short'), "the new holder's grant is untouched");
        $this->cppRelease('short', $token);
    }

    public function testAnExpiredHolderNobodyTookHearsOfItToo(): void
    {
        $lock = RedisLock::acquire($this->server->url(), 'lapsed', ['lease' => 0.1]);
        $deadline = microtime(true) + 10;
        while ($this->client->exists('tokenlock:lapsed')) {
            $this->assertLessThan($deadline, microtime(true), 'the grant did not expire within 10 s');
            usleep(20000);
        }
        $this->expectException(LockLostException::class);
        $this->expectExceptionMessage('our lease ended (nobody has taken the lock since)');
        $lock->refresh();
    }

    public function testAWaiterIsWokenByTheCommandsRelease(): void
    {
        $token = $this->cppAcquire('queue');
        $url = $this->server->url();
        $child = Child::start(function (Channel $c) use ($url): void {
            $lock = RedisLock::acquire($url, 'queue', ['wait' => 30]);
            $c->send((string) $lock->fence());
            $lock->release();
        });
        // The waiter is counted once it was refused and blocks for a release.
        $deadline = microtime(true) + 10;
        while ($this->client->get('tokenlock:queue:waiters') !== '1') {
            $this->assertLessThan($deadline, microtime(true), 'the waiter was not counted within 10 s');
            $this->assertFalse($child->channel->ready(), 'the waiter got the lock while the command held it');
            usleep(10000);
        }
        $this->cppRelease('queue', $token);
        $this->assertGreaterThan((int) explode('.', $token)[0], (int) $child->channel->receive());
        $this->assertSame(0, $child->wait());
        $this->assertSame(0, $this->client->exists('tokenlock:queue'));
    }

    public function testACorruptGrantIsRefusedAndLeftAsItIs(): void
    {
        $this->client->set('tokenlock:bad', 'garbage', ['px' => 60000]);
        try {
            RedisLock::acquire($this->server->url(), 'bad', ['wait' => 0]);
            $this->fail('acquired over a corrupt grant');
        } catch (Exception $e) {
            $this->assertSame('lock_corrupt', $e->getError());
            $this->assertSame(69, $e->getCode());
            $this->assertStringContainsString('redis-cli DEL tokenlock:bad', $e->getMessage());
        }
        $this->assertSame('garbage', $this->client->get('tokenlock:bad'));
        $this->assertSame(0, $this->client->exists('tokenlock:bad:fence'));
    }

    public function testAnUnreachableServerAndABadUrl(): void
    {
        $this->server->stop();
        try {
            RedisLock::acquire($this->server->url(), 'x', ['wait' => 0]);
            $this->fail('acquired from a stopped server');
        } catch (Exception $e) {
            $this->assertSame(['system', 111, 69], [$e->getError(), $e->getErrno(), $e->getCode()]);
            $this->assertStringContainsString($this->server->url(), $e->getMessage());
        }
        try {
            RedisLock::acquire('http://127.0.0.1/', 'x');
            $this->fail('accepted an http:// URL');
        } catch (Exception $e) {
            $this->assertSame(['bad_argument', 64], [$e->getError(), $e->getCode()]);
        }
    }

    public function testUrlsAreReadAsTheCppClientReadsThem(): void
    {
        $this->assertSame(['host' => 'cache-1.example', 'port' => 6380, 'path' => '', 'db' => 2, 'user' => 'app', 'password' => 'p@ss:w'],
            \Tokenlock\Redis\Connection::parseUrl('redis://app:p%40ss%3Aw@cache-1.example:6380/2'));
        $this->assertSame(['host' => '::1', 'port' => 6379, 'path' => '', 'db' => 0, 'user' => '', 'password' => null],
            \Tokenlock\Redis\Connection::parseUrl('redis://[::1]'));
        $this->assertSame(['host' => '', 'port' => 6379, 'path' => '/run/redis@x.sock', 'db' => 4, 'user' => '', 'password' => 'pw'],
            \Tokenlock\Redis\Connection::parseUrl('unix://:pw@/run/redis@x.sock?db=4'));
        $bad = ['rediss://h', 'redis://', 'redis://h:0', 'redis://h:65536', 'redis://h:', 'redis://h/x', 'redis://us@h',
            'redis://:%zz@h', 'redis://h h', 'redis://[::1', 'unix://relative.sock', 'unix:///s.sock?database=1'];
        foreach ($bad as $url) {
            // The command refuses each of them too.
            [$status] = Tool::run(['status', '--redis', $url, '--', 'x']);
            $this->assertSame(64, $status, "tokenlock refuses $url");
            try {
                \Tokenlock\Redis\Connection::parseUrl($url);
                $this->fail("accepted $url");
            } catch (Exception $e) {
                $this->assertSame(['bad_argument', 64], [$e->getError(), $e->getCode()], $url);
                // What may be a user and password is not shown.
                // So is what may be a password whose '@' was forgotten: a
                // ':' not followed by a port.
                $shown = ['redis://us@h' => 'redis://***@h', 'redis://:%zz@h' => 'redis://***@h', 'redis://[::1' => 'redis://***'][$url] ?? $url;
                $this->assertStringContainsString("\"$shown\"", $e->getMessage());
            }
        }
    }

    public function testPasswordDatabaseAndAFlushedScriptCache(): void
    {
        $this->client->config('SET', 'requirepass', 'pa:ss@word');
        $base = "127.0.0.1:{$this->server->port}";
        try {
            RedisLock::acquire("redis://:wrong@$base", 'db');
            $this->fail('acquired with a wrong password');
        } catch (Exception $e) {
            $this->assertSame(['server_error', 69], [$e->getError(), $e->getCode()]);
            $this->assertStringNotContainsString('wrong', $e->getMessage(), 'the password is not shown');
        }
        $url = "redis://:pa%3Ass%40word@$base/3";
        $lock = RedisLock::acquire($url, 'db');
        $this->client->auth('pa:ss@word');
        $this->client->select(3);
        $this->assertSame($lock->fence() . ' ' . $lock->owner(), $this->client->get('tokenlock:db'));
        // A server that forgot the scripts (restart, SCRIPT FLUSH) is sent them again.
        $this->client->script('flush');
        $lock->refresh(60);
        $this->assertGreaterThan(50000, $this->client->pttl('tokenlock:db'));
        $lock->release();
        $this->assertSame(0, $this->client->exists('tokenlock:db'));
        $this->client->select(0);
        $this->assertSame(0, $this->client->exists('tokenlock:db'));
    }

    /**
     * Every text an exception carries: messages along its chain, command
     * lines, and the trace with the calls' arguments.
     */
    private static function everythingShown(\Throwable $e): string
    {
        $text = '';
        for (; $e !== null; $e = $e->getPrevious()) {
            $text .= $e->getMessage() . "\n" . $e->getTraceAsString() . "\n";
            if ($e instanceof Exception) {
                $text .= implode(' ', $e->getCommandLine()) . "\n";
            }
        }
        return $text;
    }

    public function testNoMessageShowsTheUrlsPassword(): void
    {
        $this->client->config('SET', 'requirepass', 'S3cr:et@pw');
        $this->client->auth('S3cr:et@pw');
        $port = $this->server->port;
        // A port just freed, which nothing listens on.
        $socket = stream_socket_server('tcp://127.0.0.1:0');
        $closed = (int) substr((string) stream_socket_get_name($socket, false), strlen('127.0.0.1:'));
        fclose($socket);
        $good = "redis://:S3cr%3Aet%40pw@127.0.0.1:$port";
        $held = RedisLock::acquire($good, 'secret', ['wait' => 0]);
        $garbage = "$this->dir/garbage-tokenlock";
        file_put_contents($garbage, "#!/bin/sh\necho 'not a token'\n");
        chmod($garbage, 0755);
        $calls = [
            'wrong password' => ["redis://:S3crWrong@127.0.0.1:$port", 'x', [], "redis://127.0.0.1:$port"],
            'a user and a wrong password' => ["redis://a:S3crWrong@127.0.0.1:$port/2", 'x', [], "redis://127.0.0.1:$port/2"],
            'nobody listens' => ["redis://:S3cr%3Aet%40pw@127.0.0.1:$closed", 'x', [], "redis://127.0.0.1:$closed"],
            'a bad port' => ['redis://:S3cr%3Aet%40pw@127.0.0.1:99999', 'x', [], 'redis://***@127.0.0.1:99999'],
            'a bad database' => ["redis://a:S3cret@127.0.0.1:$port/x", 'x', [], "redis://***@127.0.0.1:$port/x"],
            'a stray slash' => ["redis://:S3cr/et@127.0.0.1:$port", 'x', [], "redis://***@127.0.0.1:$port"],
            'held' => [$good, 'secret', [], "redis://127.0.0.1:$port"],
            'a command that prints no token' => [$good, 'x', ['command' => $garbage], "redis://127.0.0.1:$port"],
        ];
        // Traces with the calls' arguments, whole.
        $ini = ['zend.exception_ignore_args' => '0', 'zend.exception_string_param_max_len' => '1000000'];
        foreach ($ini as $setting => $value) {
            $ini[$setting] = ini_set($setting, $value);
        }
        try {
            foreach (['phpredis', 'command'] as $backend) {
                foreach ($calls as $what => [$url, $name, $options, $server]) {
                    if (isset($options['command']) && $backend === 'phpredis') {
                        continue;
                    }
                    $o = ['backend' => $backend, 'wait' => 0] + $options;
                    foreach (['acquire' => fn () => RedisLock::acquire($url, $name, $o), 'holder' => fn () => RedisLock::holder($url, $name, $o)] as $call => $fn) {
                        if ($what === 'held' && $call === 'holder') {
                            continue;
                        }
                        try {
                            $fn();
                            $this->fail("$backend $call, $what: no failure");
                        } catch (Exception $e) {
                            $shown = self::everythingShown($e);
                            $this->assertStringNotContainsString('S3cr', $shown, "$backend $call, $what");
                            $this->assertStringContainsString($server, $e->getMessage(), "$backend $call, $what: the server is named");
                        }
                    }
                }
            }
        } finally {
            foreach ($ini as $setting => $value) {
                ini_set($setting, (string) $value);
            }
        }
        $this->assertSame($held->fence() . ' ' . $held->owner(), $this->client->get('tokenlock:secret'), 'the held grant is intact');
        $held->release();
        $this->assertSame(['tokenlock:secret:fence'], $this->client->keys('tokenlock:*'), 'no failed call left a key');
    }

    /** @return array<string, string> every key of the locks, with its value */
    private function keysAndValues(): array
    {
        $all = [];
        foreach ($this->client->keys('tokenlock:*') as $key) {
            $all[$key] = $this->client->type($key) === \Redis::REDIS_LIST ? implode(',', $this->client->lRange($key, 0, -1)) : (string) $this->client->get($key);
        }
        ksort($all);
        return $all;
    }

    public function testADumpedLockShowsTheServerWithoutThePassword(): void
    {
        $this->client->config('SET', 'requirepass', 'S3cr:et@pw');
        $lock = RedisLock::acquire("redis://:S3cr%3Aet%40pw@127.0.0.1:{$this->server->port}", 'dumped', ['wait' => 0]);
        ob_start();
        var_dump($lock);
        debug_zval_dump($lock);
        var_export($lock);
        $shown = ob_get_clean() . print_r($lock, true) . print_r((array) $lock, true) . var_export((array) $lock, true)
            . json_encode((array) $lock) . print_r(get_object_vars($lock), true);
        // Every property, private ones too, and those of what it holds.
        $walk = function (mixed $v, int $depth) use (&$walk): string {
            if (!is_object($v) || $depth > 3) {
                return is_scalar($v) ? (string) $v : '';
            }
            $text = '';
            foreach ((new \ReflectionObject($v))->getProperties() as $p) {
                $p->setAccessible(true);
                if (!$p->isStatic() && $p->isInitialized($v)) {
                    $value = $p->getValue($v);
                    $text .= $p->getName() . '=' . (is_array($value) ? json_encode($value) : $walk($value, $depth + 1)) . "\n";
                }
            }
            return $text;
        };
        $shown .= $walk($lock, 0);
        try {
            throw new \RuntimeException('with the lock in its trace');
        } catch (\RuntimeException $e) {
            $shown .= $e->getTraceAsString();
        }
        $this->assertStringNotContainsString('S3cr', $shown);
        $this->assertStringNotContainsString('pw', $shown);
        $this->assertStringContainsString("redis://127.0.0.1:{$this->server->port}", $shown);
        $this->assertTrue($lock->isHeld(), 'still held, after all that');
        $lock->refresh();
        $lock->release();
        $this->assertFalse($lock->isHeld());
    }

    public function testALockCannotBeSerializedNorAnotherHandleUnserialized(): void
    {
        $lock = RedisLock::acquire($this->server->url(), 'ser', ['wait' => 0]);
        try {
            serialize($lock);
            $this->fail('a lock was serialized');
        } catch (\LogicException $e) {
            $this->assertStringContainsString('cannot be serialized', $e->getMessage());
        }
        foreach ([RedisLock::class, \Tokenlock\Redis\Connection::class] as $class) {
            // What a serialized lock would look like, properties and all.
            $forged = sprintf('O:%d:"%s":2:{s:4:"name";s:3:"ser";s:5:"owner";s:%d:"%s";}', strlen($class), $class, strlen($lock->owner()), $lock->owner());
            try {
                unserialize($forged);
                $this->fail("$class was unserialized");
            } catch (\LogicException $e) {
                $this->assertStringContainsString('cannot be unserialized', $e->getMessage());
            }
        }
        $this->assertTrue($lock->isHeld());
        $lock->release();
        $this->assertSame(['tokenlock:ser:fence'], $this->client->keys('tokenlock:ser*'), 'released once, by its one handle');
    }

    public function testTheCommandGetsTheUrlFromItsEnvironmentNotFromItsArguments(): void
    {
        // A command that writes down what it was given, then acts as one
        // that holds a grant.
        $fake = "$this->dir/fake-tokenlock";
        file_put_contents($fake, "#!/bin/sh\nprintf '%s\\n' \"\$@\" > \"\$0.argv\"\nprintf '%s' \"\$TOKENLOCK_URL\" > \"\$0.url\"\necho 7.host-0123abcd.1.2.0123456789abcdef\n");
        chmod($fake, 0755);
        $url = 'redis://app:S3cr%3Aet@127.0.0.1:1/2';
        $lock = RedisLock::acquire($url, 'viaenv', ['backend' => 'command', 'command' => $fake, 'wait' => 0]);
        $argv = (string) file_get_contents("$fake.argv");
        $this->assertStringNotContainsString('S3cr', $argv, 'no password on argv');
        $this->assertStringContainsString("--redis\nenv:TOKENLOCK_URL\n", $argv);
        $this->assertSame($url, file_get_contents("$fake.url"), 'the URL is in its environment');
        $this->assertSame(7, $lock->fence());
        $lock->release();
        $this->assertStringNotContainsString('S3cr', (string) file_get_contents("$fake.argv"), 'nor on the release\'s');
    }

    public function testAMalformedUrlsPasswordIsMaskedWhateverIsWrong(): void
    {
        $urls = [
            'redis://:S3cret' => 'a forgotten @',
            'redis://app:S3cret/0' => 'a forgotten @, a database',
            'redis:/app:S3cret@h' => 'one slash',
            'redis//app:S3cret@h' => 'no colon',
            'etcd://app:S3cret@h' => 'another scheme',
            'http://:S3cret@h:80/' => 'http',
            'redis://app:S3c?ret@h:x' => 'a ? and a bad port',
            'redis://app:S3c#ret/@h' => 'a # and a stray /',
            'redis://app:S3c ret@h h' => 'spaces',
            'S3cret@h' => 'no scheme',
        ];
        foreach ($urls as $url => $what) {
            foreach (['phpredis', 'command'] as $backend) {
                try {
                    RedisLock::acquire($url, 'x', ['backend' => $backend, 'wait' => 0]);
                    $this->fail("$what: accepted $url");
                } catch (Exception $e) {
                    $this->assertSame(['bad_argument', 64], [$e->getError(), $e->getCode()], "$what: " . $e->getMessage());
                    $this->assertStringNotContainsString('S3c', self::everythingShown($e), "$backend, $what");
                }
            }
        }
    }

    public function testANameEndingInTheSuffixOfAKeyIsRefused(): void
    {
        $url = $this->server->url();
        $held = RedisLock::acquire($url, 'X', ['wait' => 0]);
        // A waiter makes the other keys: a release then wakes it.
        $this->client->set('tokenlock:X:waiters', '1', ['px' => 60000]);
        $before = $this->keysAndValues();
        $this->assertArrayHasKey('tokenlock:X:fence', $before);
        foreach (['phpredis', 'command'] as $backend) {
            foreach (['fence', 'wake', 'waiters', 'handoff', 'shared', 'writer'] as $suffix) {
                $o = ['backend' => $backend, 'wait' => 0];
                $calls = ['acquire' => fn () => RedisLock::acquire($url, "X:$suffix", $o), 'try' => fn () => RedisLock::tryAcquire($url, "X:$suffix", $o),
                    'status' => fn () => RedisLock::holder($url, "X:$suffix", $o)];
                foreach ($calls as $call => $fn) {
                    try {
                        $fn();
                        $this->fail("$backend $call X:$suffix was not refused");
                    } catch (Exception $e) {
                        $this->assertSame(['bad_argument', 64], [$e->getError(), $e->getCode()], "$backend $call: {$e->getMessage()}");
                        $this->assertStringContainsString($url . " X:$suffix: bad lock name: a lock name must not end in :fence, :wake, :waiters, :handoff, :shared or :writer: those are the keys of the lock named without that suffix", $e->getMessage());
                        $this->assertSame([], $e->getCommandLine(), 'no command ran');
                    }
                }
            }
        }
        $this->assertSame($before, $this->keysAndValues(), 'nothing was read into a grant or written');
        $this->assertTrue($held->isHeld());
        // Only the end of a name counts.
        foreach (['X:fenced', 'X:fence:1', 'fence', 'X:Fence', 'X:sharedx', 'writer'] as $name) {
            RedisLock::acquire($url, $name, ['wait' => 0])->release();
        }
        $held->release();
        $this->client->del('tokenlock:X:waiters', 'tokenlock:X:wake', 'tokenlock:X:handoff');
    }

    public function testAForkedChildDoesNotReleaseItsParentsLock(): void
    {
        $lock = RedisLock::acquire($this->server->url(), 'inherited');
        $child = Child::start(function (Channel $c) use ($lock): void {
            $c->send($lock->isHeld() ? 'held' : 'not held');
            try {
                $lock->release();
                $c->send('released');
            } catch (Exception $e) {
                $c->send($e->getError());
            }
        });
        $this->assertSame('not held', $child->channel->receive());
        $this->assertSame('not_owner', $child->channel->receive());
        $this->assertSame(0, $child->wait());
        $this->assertSame($lock->fence() . ' ' . $lock->owner(), $this->client->get('tokenlock:inherited'));
        $lock->release();
    }

    /** @return array<string, array{0: string, 1: int}> */
    public function signals(): array
    {
        // Their numbers are the exit statuses of busy and lock_lost: a
        // status read as an exit status would name those errors.
        return ['SIGHUP' => ['HUP', 1], 'SIGQUIT' => ['QUIT', 3], 'SIGKILL' => ['KILL', 9]];
    }

    /**
     * A stand-in for the command that runs the real one unless the file
     * SIGNAL names a signal, which it then sends itself.
     */
    private function killableCommand(): string
    {
        $signal = escapeshellarg("$this->dir/signal");
        $standIn = "$this->dir/tokenlock-stand-in";
        file_put_contents($standIn, "#!/bin/sh\nif [ -f $signal ]; then ulimit -c 0; kill -\$(cat $signal) \$\$; fi\n"
            . 'exec ' . escapeshellarg(Tool::path()) . " \"\$@\"\n");
        chmod($standIn, 0755);
        return $standIn;
    }

    private function assertKilled(callable $call, string $step, int $signal): void
    {
        try {
            $call();
            $this->fail("$step succeeded though its command was killed");
        } catch (Exception $e) {
            $this->assertNotInstanceOf(NotAcquiredException::class, $e, $e->getMessage());
            $this->assertNotInstanceOf(LockLostException::class, $e, $e->getMessage());
            $this->assertSame(['command_failed', 128 + $signal], [$e->getError(), $e->getCode()], $e->getMessage());
            $this->assertStringContainsString("tokenlock: $step {$this->server->url()} killed", $e->getMessage());
            $this->assertStringContainsString("was killed by signal $signal", $e->getMessage());
            $this->assertStringContainsString('call again', $e->getMessage());
        }
    }

    /** @dataProvider signals */
    public function testACommandKilledByASignalIsNeitherBusyNorLost(string $name, int $number): void
    {
        $url = $this->server->url();
        $o = ['backend' => 'command', 'command' => $this->killableCommand(), 'wait' => 0];
        file_put_contents("$this->dir/signal", $name);
        $this->assertKilled(fn () => RedisLock::acquire($url, 'killed', $o), 'acquire', $number);
        $this->assertKilled(fn () => RedisLock::holder($url, 'killed', $o), 'status', $number);
        $this->assertSame([], $this->client->keys('tokenlock:*'), 'nothing was written');
        unlink("$this->dir/signal");
        $lock = RedisLock::acquire($url, 'killed', $o);
        $grant = $this->client->get('tokenlock:killed');
        file_put_contents("$this->dir/signal", $name);
        $this->assertKilled(fn () => $lock->refresh(60), 'refresh', $number);
        $this->assertKilled(fn () => $lock->release(), 'release', $number);
        $this->assertTrue($lock->isHeld(), 'a failed release leaves the grant held');
        $this->assertSame($grant, $this->client->get('tokenlock:killed'), 'the grant is intact');
        unlink("$this->dir/signal");
        $lock->release();
        // The fence key outlives every grant, so that fences keep increasing.
        $this->assertSame(['tokenlock:killed:fence'], $this->client->keys('tokenlock:*'));
    }

    public function testTheLegacyTimeoutIsNotGivenToTheCommandsRedisLock(): void
    {
        \Tokenlock\setLegacyTimeout(5);
        try {
            $lock = RedisLock::acquire($this->server->url(), 'legacy', ['backend' => 'command', 'wait' => 0]);
            $lock->release();
        } finally {
            \Tokenlock\setLegacyTimeout(null);
        }
        $this->assertSame(0, $this->client->exists('tokenlock:legacy'));
    }

    /** Without phpredis (php -n loads no extension) the command does the work. */
    public function testTheCommandFallbackWithoutTheExtension(): void
    {
        $script = "$this->dir/fallback.php";
        file_put_contents($script, <<<'PHP'
            <?php
            declare(strict_types=1);
            require $argv[1];
            if (extension_loaded('redis')) { echo "redis loaded\n"; exit(1); }
            try {
                Tokenlock\RedisLock::acquire($argv[2], 'fallback', ['wait' => 0]);
                echo "acquired while held\n";
            } catch (Tokenlock\BusyException $e) {
                echo 'refused ', $e->getError(), "\n";
            }
            fgets(STDIN);
            $lock = Tokenlock\RedisLock::acquire($argv[2], 'fallback', ['wait' => 0, 'lease' => 0.3]);
            $h = Tokenlock\RedisLock::holder($argv[2], 'fallback');
            echo 'holds ', $lock->token(), ' ', $h['fence'] === $lock->fence() ? 'seen' : 'unseen', "\n";
            fgets(STDIN);
            try {
                $lock->release();
                echo "released a lost lock\n";
            } catch (Tokenlock\LockLostException $e) {
                echo 'lost ', $e->getError(), "\n";
            }
            PHP);
        $held = RedisLock::acquire($this->server->url(), 'fallback');
        $proc = proc_open(['php', '-n', $script, TOKENLOCK_TEST_MODULE, $this->server->url()],
            [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['file', "$this->dir/fallback.err", 'w']], $pipes);
        $this->assertSame("refused busy\n", fgets($pipes[1]), (string) @file_get_contents("$this->dir/fallback.err"));
        $held->release();
        fwrite($pipes[0], "go\n");
        $line = (string) fgets($pipes[1]);
        $this->assertMatchesRegularExpression('/\Aholds [0-9]+\.\S+ seen\n\z/', $line, (string) @file_get_contents("$this->dir/fallback.err"));
        $token = explode(' ', $line)[1];
        $this->assertSame(substr($token, strpos($token, '.') + 1), explode(' ', (string) $this->client->get('tokenlock:fallback'))[1]);
        // Its lease ends and a newer grant takes the lock.
        $deadline = microtime(true) + 10;
        while (($taker = RedisLock::tryAcquire($this->server->url(), 'fallback')) === null) {
            $this->assertLessThan($deadline, microtime(true), 'the lease did not end within 10 s');
            usleep(20000);
        }
        fwrite($pipes[0], "go\n");
        $this->assertSame("lost lock_lost\n", fgets($pipes[1]));
        fclose($pipes[0]);
        fclose($pipes[1]);
        $this->assertSame(0, proc_close($proc));
        $this->assertTrue($taker->isHeld());
        $taker->release();
    }

    /** A request that dies of a fatal error, which skips destructors, still gives its grant back. */
    public function testAGrantHeldWhenTheRequestDiesIsReleased(): void
    {
        foreach (['' => 'the extension', '-n' => 'the command'] as $flag => $backend) {
            if ($flag === '' && !extension_loaded('redis')) {
                continue;
            }
            $script = "$this->dir/die.php";
            file_put_contents($script, "<?php\nrequire \$argv[1];\n"
                . '$lock = Tokenlock\RedisLock::acquire($argv[2], "dies", ["lease" => 300]);' . "\n"
                . 'echo $lock->fence(), "\n";' . "\n"
                . 'ini_set("memory_limit", "16M"); $s = str_repeat("x", 64 << 20);' . "\n");
            $proc = proc_open(['php', ...($flag === '' ? [] : [$flag]), '-d', 'display_errors=stderr', $script, TOKENLOCK_TEST_MODULE, $this->server->url()],
                [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
            $fence = trim((string) stream_get_contents($pipes[1]));
            $err = (string) stream_get_contents($pipes[2]);
            fclose($pipes[1]);
            fclose($pipes[2]);
            $this->assertSame(255, proc_close($proc), "$backend: $err");
            $this->assertMatchesRegularExpression('/\A[0-9]+\z/', $fence, "$backend: $err");
            $this->assertStringContainsString('Allowed memory size', $err);
            $this->assertStringNotContainsString('Tokenlock', $err, $backend);
            $this->assertNull(RedisLock::holder($this->server->url(), 'dies'), "$backend: the grant was released as the request ended");
            $next = RedisLock::acquire($this->server->url(), 'dies', ['wait' => 0]);
            $next->release();
        }
    }
}
