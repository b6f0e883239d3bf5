<?php
// symfony/lock 5.4 as Debian's php-symfony-lock installs it (its own
// autoloader brings psr/log), with the store tests of v5.4.40 from this
// directory, which Debian's package leaves out.

declare(strict_types=1);

const TOKENLOCK_SYMFONY_LOCK_54 = '/usr/share/php/Symfony/Component/Lock';
require_once TOKENLOCK_SYMFONY_LOCK_54 . '/autoload.php';
spl_autoload_register(static function (string $class): void {
    $prefix = 'Symfony\\Component\\Lock\\Tests\\';
    if (str_starts_with($class, $prefix)) {
        $file = __DIR__ . '/Tests/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
