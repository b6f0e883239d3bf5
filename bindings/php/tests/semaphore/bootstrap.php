<?php
// TokenlockSemaphoreStore's tests: symfony/semaphore from Debian's
// php-symfony-semaphore (tests/bindings/php_symfony_semaphore.sh checks it
// is there), the module from its sources unless TOKENLOCK_PHP_MODULE names
// another copy.

declare(strict_types=1);

require '/usr/share/php/Symfony/Component/Semaphore/autoload.php';
(static function (): void {
    $module = getenv('TOKENLOCK_PHP_MODULE');
    $module = $module === false || $module === '' ? dirname(__DIR__, 2) . '/autoload.php' : $module;
    if (!is_file($module)) {
        fwrite(STDERR, "TOKENLOCK_PHP_MODULE=$module is not a file\n");
        exit(2);
    }
    require $module;
})();
require __DIR__ . '/../Support/Channel.php';
require __DIR__ . '/../Support/Child.php';
require __DIR__ . '/../Support/TempDirTestCase.php';
