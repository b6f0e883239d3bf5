<?php
// The Symfony store's tests against one symfony/lock at a time:
// TOKENLOCK_SYMFONY (5.4, 6.4 or 7.x) names the directory whose autoloader
// alone provides Symfony\Component\Lock (tests/bindings/php_symfony.sh).

declare(strict_types=1);

(static function (): void {
    $version = (string) getenv('TOKENLOCK_SYMFONY');
    if (!in_array($version, ['5.4', '6.4', '7.x'], true)) {
        fwrite(STDERR, "Set TOKENLOCK_SYMFONY to 5.4, 6.4 or 7.x, the symfony/lock to test with (got \"$version\")\n");
        exit(2);
    }
    define('TOKENLOCK_SYMFONY_VERSION', $version);
    define('TOKENLOCK_SYMFONY_DIR', __DIR__ . '/' . $version);
    require TOKENLOCK_SYMFONY_DIR . '/autoload.php';
})();

(static function (): void {
    $module = getenv('TOKENLOCK_PHP_MODULE');
    $module = $module === false || $module === '' ? dirname(__DIR__, 2) . '/autoload.php' : $module;
    if (!is_file($module)) {
        fwrite(STDERR, "TOKENLOCK_PHP_MODULE=$module is not a file\n");
        exit(2);
    }
    define('TOKENLOCK_TEST_MODULE', realpath($module));
    require TOKENLOCK_TEST_MODULE;
})();
require __DIR__ . '/../Support/Channel.php';
require __DIR__ . '/../Support/Child.php';
require __DIR__ . '/../Support/Tool.php';
require __DIR__ . '/../Support/TempDirTestCase.php';
