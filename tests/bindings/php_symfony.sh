#!/usr/bin/env bash
# Tokenlock\Symfony\TokenlockStore against one symfony/lock: Symfony's own
# store suite (AbstractStoreTestCase and the traits of a blocking, expiring
# store) and the store's tests through Symfony's Lock and LockFactory.
#   php_symfony.sh 5.4|6.4|7.x SOURCE_DIR
# 5.4 is Debian's php-symfony-lock; 6.4 and 7.x are the files kept in
# bindings/php/tests/symfony/ (its README.md). Exits 77 (skipped) when PHP,
# phpunit, Debian's php-psr-log or, for 5.4, php-symfony-lock is missing.
set -euo pipefail
version=$1 src=$2
skip() { echo "SKIP: $1 (scripts/install-deps installs it)"; exit 77; }
command -v php >/dev/null || skip "php is not installed"
command -v phpunit >/dev/null || skip "phpunit is not installed"
[ -f /usr/share/php/Psr/Log/autoload.php ] || skip "php-psr-log is not installed"
if [ "$version" = 5.4 ]; then
  [ -f /usr/share/php/Symfony/Component/Lock/autoload.php ] || skip "php-symfony-lock is not installed"
fi
[ -f "$src/bindings/php/tests/symfony/$version/autoload.php" ] ||
  { echo "php_symfony.sh: no symfony/lock $version in bindings/php/tests/symfony (5.4, 6.4 or 7.x)" >&2; exit 64; }
cd "$src"
TOKENLOCK_SYMFONY=$version exec phpunit -c bindings/php/tests/symfony/phpunit.xml
