#!/usr/bin/env bash
# Tokenlock\Symfony\TokenlockSemaphoreStore through Symfony's own
# SemaphoreFactory and Semaphore, from Debian's php-symfony-semaphore:
#   php_symfony_semaphore.sh SOURCE_DIR
# Exits 77 (skipped) when PHP, phpunit or php-symfony-semaphore is missing.
set -euo pipefail
src=$1
skip() { echo "SKIP: $1 (scripts/install-deps installs it)"; exit 77; }
command -v php >/dev/null || skip "php is not installed"
command -v phpunit >/dev/null || skip "phpunit is not installed"
[ -f /usr/share/php/Symfony/Component/Semaphore/autoload.php ] || skip "php-symfony-semaphore is not installed"
cd "$src"
exec phpunit -c bindings/php/tests/semaphore/phpunit.xml
