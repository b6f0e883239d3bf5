<?php
// symfony/lock 7.x (v7.1.1) from this directory only, psr/log from Debian's
// php-psr-log: loading one version's autoloader loads no other's files.

declare(strict_types=1);

require_once '/usr/share/php/Psr/Log/autoload.php';
spl_autoload_register(static function (string $class): void {
    $prefix = 'Symfony\\Component\\Lock\\';
    if (str_starts_with($class, $prefix)) {
        $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
