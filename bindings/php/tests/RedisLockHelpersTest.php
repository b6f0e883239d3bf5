<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use PHPUnit\Framework\TestCase;
use Tokenlock\Command;
use Tokenlock\Native;
use Tokenlock\Redis\CommandClient;
use Tokenlock\Redis\Connection;
use Tokenlock\Redis\Waiter;
use Tokenlock\RedisLock;

/**
 * The Redis lock's classes use Command's and Native's helpers (option checks,
 * durations, decimals, the process's identity) rather than copies of
 * them, which would drift apart.
 */
final class RedisLockHelpersTest extends TestCase
{
    /** @return list<string> the names of a class's own static methods of this visibility */
    private static function statics(string $class, int $visibility): array
    {
        $names = [];
        foreach ((new \ReflectionClass($class))->getMethods(\ReflectionMethod::IS_STATIC | $visibility) as $m) {
            if ($m->getDeclaringClass()->getName() === $class && $m->isStatic() && ($m->getModifiers() & $visibility)) {
                $names[] = $m->getName();
            }
        }
        return $names;
    }

    public function testNoHelperOfTokenlockPhpIsCopied(): void
    {
        $shared = array_merge(self::statics(Command::class, \ReflectionMethod::IS_PUBLIC), self::statics(Native::class, \ReflectionMethod::IS_PUBLIC));
        $this->assertContains('formatSeconds', $shared, 'the helpers are reachable');
        foreach ([RedisLock::class, Connection::class, CommandClient::class, Waiter::class] as $class) {
            $copies = array_values(array_intersect(self::statics($class, \ReflectionMethod::IS_PRIVATE), $shared));
            $this->assertSame([], $copies, "$class keeps its own copy of these helpers of Command and Native");
        }
    }

    public function testTheOwnerIdIsTheFileLocksIdentity(): void
    {
        $me = Native::identity();
        $this->assertMatchesRegularExpression('/\A' . preg_quote("{$me['tag']}.{$me['pid']}.{$me['start']}.", '/') . '[0-9a-f]{16}\z/', RedisLock::ownerId());
        $this->assertSame($me['tag'], RedisLock::hostTag());
        $this->assertNotSame(RedisLock::ownerId(), RedisLock::ownerId(), 'each grant has a nonce of its own');
    }
}
