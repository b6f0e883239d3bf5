<?php

declare(strict_types=1);

namespace Tokenlock\Tests\Support;

/**
 * A test against a redis-server of its own, started in the test's scratch
 * directory and stopped by pid afterwards, with every child process reaped
 * first. Skipped, saying what to install, without redis-server or phpredis.
 */
abstract class RedisTestCase extends TempDirTestCase
{
    protected RedisServer $server;
    protected \Redis $client;
    protected string $url;

    protected function setUp(): void
    {
        if (!RedisServer::available()) {
            $this->markTestSkipped('redis-server is not installed (scripts/install-deps installs it)');
        }
        if (!extension_loaded('redis')) {
            $this->markTestSkipped('the phpredis extension is not loaded (scripts/install-deps installs php-redis)');
        }
        parent::setUp();
        $this->server = new RedisServer($this->dir);
        $this->client = $this->server->client();
        $this->url = $this->server->url();
    }

    protected function tearDown(): void
    {
        if (isset($this->server)) {
            Child::reapAll();
            $this->server->stop();
        }
        parent::tearDown();
    }
}
