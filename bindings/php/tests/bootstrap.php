<?php
// The tests drive a real `tokenlock` command: TOKENLOCK_COMMAND names it,
// or the source tree's build/tools/tokenlock is used when it has been built.

declare(strict_types=1);

// The module as its sources (autoload.php), or as the file named by
// TOKENLOCK_PHP_MODULE (the one-file bundle, tests/bindings/php_bundle.sh).
// Tests that start PHP processes of their own load TOKENLOCK_TEST_MODULE.
(static function (): void {
    $module = getenv('TOKENLOCK_PHP_MODULE');
    $module = $module === false || $module === '' ? dirname(__DIR__) . '/autoload.php' : $module;
    if (!is_file($module)) {
        fwrite(STDERR, "TOKENLOCK_PHP_MODULE=$module is not a file\n");
        exit(2);
    }
    define('TOKENLOCK_TEST_MODULE', realpath($module));
    require TOKENLOCK_TEST_MODULE;
})();
require __DIR__ . '/Support/Channel.php';
require __DIR__ . '/Support/Child.php';
require __DIR__ . '/Support/Tool.php';
require __DIR__ . '/Support/TempDirTestCase.php';
require __DIR__ . '/Support/Cgi.php';
require __DIR__ . '/Support/RedisServer.php';
require __DIR__ . '/Support/RedisTestCase.php';
require __DIR__ . '/Support/SlotCount.php';

(function (): void {
    $command = getenv('TOKENLOCK_COMMAND');
    if ($command === false || $command === '') {
        $built = dirname(__DIR__, 3) . '/build/tools/tokenlock';
        if (!is_executable($built)) {
            fwrite(STDERR, "Set TOKENLOCK_COMMAND to the tokenlock command to test with (not set, and $built is not built)\n");
            exit(2);
        }
        putenv("TOKENLOCK_COMMAND=$built");
        $command = $built;
    }
    if (!is_executable($command)) {
        fwrite(STDERR, "TOKENLOCK_COMMAND=$command is not an executable file\n");
        exit(2);
    }
    $command = realpath($command);
    putenv("TOKENLOCK_COMMAND=$command");
    // Tests that change TOKENLOCK_COMMAND put this back.
    define('TOKENLOCK_TEST_COMMAND', $command);
})();
