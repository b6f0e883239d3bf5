<?php

declare(strict_types=1);

namespace Tokenlock\Tests\Symfony;

use PHPUnit\Framework\TestCase;
use Symfony\Component\Lock\Lock;
use Symfony\Component\Lock\PersistingStoreInterface;
use Symfony\Component\Lock\Tests\Store\AbstractStoreTestCase;

/**
 * Run after the others (phpunit.xml's order): every symfony/lock file this
 * run loaded is the chosen version's, so its results are that version's.
 */
final class OneSymfonyTest extends TestCase
{
    private const DEBIAN = '/usr/share/php/Symfony/Component/Lock';

    public function testOnlyTheChosenSymfonyLockWasLoaded(): void
    {
        $component = TOKENLOCK_SYMFONY_VERSION === '5.4' ? self::DEBIAN : TOKENLOCK_SYMFONY_DIR;
        foreach ([Lock::class, PersistingStoreInterface::class] as $class) {
            $this->assertStringStartsWith("$component/", (string) (new \ReflectionClass($class))->getFileName(), $class);
        }
        $this->assertStringStartsWith(TOKENLOCK_SYMFONY_DIR . '/Tests/', (string) (new \ReflectionClass(AbstractStoreTestCase::class))->getFileName());
        $symfony = array_filter(get_included_files(), fn (string $f) => str_contains($f, '/Symfony/Component/Lock/') || str_contains($f, '/tests/symfony/'));
        $foreign = array_filter($symfony, fn (string $f) => !str_starts_with($f, "$component/")
            && !str_starts_with($f, TOKENLOCK_SYMFONY_DIR . '/') && dirname($f) !== __DIR__);
        $this->assertSame([], array_values($foreign), 'files of another symfony/lock were loaded');
        $this->assertGreaterThan(10, count($symfony), 'the suite loaded the component');
    }

    public function testTheLoadedLockHasItsVersionsSignatures(): void
    {
        // 6.0 added the return types (release(): void); 5.4 has none.
        $typed = (new \ReflectionMethod(Lock::class, 'release'))->hasReturnType();
        $this->assertSame(TOKENLOCK_SYMFONY_VERSION !== '5.4', $typed);
    }
}
