<?php
/**
 * Loads the tokenlock module from its sources, for code that does not use
 * composer: `require '.../bindings/php/autoload.php';` once, then use the
 * classes and functions of namespace Tokenlock as documented in
 * src/functions.php. The functions are loaded at once (PHP cannot
 * autoload functions); each class is loaded from src/ when first used,
 * one file per class, as composer's PSR-4 autoloader does.
 *
 * To copy one file instead, take Tokenlock.php beside this one: the same
 * sources in one file (scripts/bundle-php).
 */

declare(strict_types=1);

require_once __DIR__ . '/src/functions.php';

spl_autoload_register(static function (string $class): void {
    if (strncmp($class, 'Tokenlock\\', 10) === 0) {
        $file = __DIR__ . '/src/' . strtr(substr($class, 10), '\\', '/') . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
