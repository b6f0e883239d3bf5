<?php
// The tests drive a real `tokenlock` command: TOKENLOCK_COMMAND names it,
// or the source tree's build/tools/tokenlock is used when it has been built.

declare(strict_types=1);

require __DIR__ . '/../src/Tokenlock.php';
// The module's other classes, one per file under src/ (composer.json's PSR-4).
spl_autoload_register(static function (string $class): void {
    if (str_starts_with($class, 'Tokenlock\\') && !str_starts_with($class, 'Tokenlock\\Tests\\')) {
        $file = __DIR__ . '/../src/' . str_replace('\\', '/', substr($class, 10)) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
require __DIR__ . '/Support/Channel.php';
require __DIR__ . '/Support/Child.php';
require __DIR__ . '/Support/Tool.php';
require __DIR__ . '/Support/TempDirTestCase.php';
require __DIR__ . '/Support/Cgi.php';
require __DIR__ . '/Support/RedisServer.php';

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
