#!/usr/bin/env bash
# bindings/php/Tokenlock.php, the PHP module in one file, copied alone into
# an empty directory: every class of src/ loads from it (the Symfony store
# too, when symfony/lock is there), nothing else is read, and a subset of
# the module's tests passes against it (tests/bootstrap.php loads the file
# TOKENLOCK_PHP_MODULE names), with Symfony's store suite when it can run.
#   php_bundle.sh SOURCE_DIR TOKENLOCK
# Exits 77 (skipped) when php or phpunit is missing.
set -euo pipefail
src=$1
export TOKENLOCK_COMMAND=$2
command -v php >/dev/null || { echo "SKIP: php is not installed (scripts/install-deps installs it)"; exit 77; }
command -v phpunit >/dev/null || { echo "SKIP: phpunit is not installed (scripts/install-deps installs it)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Some tests run their scripts as user nobody, who must read the copy.
mkdir -m 0755 "$tmp/one"
chmod 0755 "$tmp"
cp "$src/bindings/php/Tokenlock.php" "$tmp/one/"
chmod 0644 "$tmp/one/Tokenlock.php"
export TOKENLOCK_PHP_MODULE=$tmp/one/Tokenlock.php

# Every class, trait and function of src/, from the one file.
symfony=/usr/share/php/Symfony/Component/Lock/autoload.php
[ -f "$symfony" ] || symfony=$src/bindings/php/tests/symfony/7.x/autoload.php
(cd "$src/bindings/php/src" && find . -name '*.php' ! -name functions.php | sed 's|^\./||; s|\.php$||; s|/|\\|g' | sort) >"$tmp/classes"
cat >"$tmp/smoke.php" <<'PHP'
<?php
declare(strict_types=1);
[, $module, $list, $symfony, $lockDir, $semaphore] = $argv;
require $module;
$bad = [];
foreach (file($list, FILE_IGNORE_NEW_LINES) as $name) {
    $class = "Tokenlock\\$name";
    if ($name === "Symfony\\TokenlockStore") {
        if (class_exists($class)) { $bad[] = "$class declared without symfony/lock"; }
        require $symfony;
    }
    if ($name === "Symfony\\TokenlockSemaphoreStore") {
        if (class_exists($class)) { $bad[] = "$class declared without symfony/semaphore"; }
        if (!is_file($semaphore)) { continue; }
        require $semaphore;
    }
    if (!class_exists($class) && !trait_exists($class)) { $bad[] = "$class is missing"; }
}
$n = Tokenlock\withLock($lockDir, fn () => Tokenlock\increment("$lockDir.count"));
$others = array_diff(get_included_files(), [$module, __FILE__]);
$others = array_filter($others, fn ($f) => !str_starts_with($f, dirname($symfony, 3)) && !str_starts_with($f, dirname($semaphore)) && !str_contains($f, "/Psr/"));
if ($others !== []) { $bad[] = "read besides the bundle: " . implode(", ", $others); }
if ($n !== 1 || !is_dir("$lockDir/lockfile")) { $bad[] = "counted $n, or left $lockDir held"; }
if ($bad !== []) { fwrite(STDERR, "FAIL: " . implode("\nFAIL: ", $bad) . "\n"); exit(1); }
echo "all ", count(file($list)), " classes and traits load from $module alone\n";
PHP
semaphore=/usr/share/php/Symfony/Component/Semaphore/autoload.php
php -n -d error_reporting=-1 -d display_errors=stderr "$tmp/smoke.php" "$TOKENLOCK_PHP_MODULE" "$tmp/classes" "$symfony" "$tmp/a.lock" "$semaphore"

# The tests that reach every part of the module, quickly.
tests=$src/bindings/php/tests
cat >"$tmp/phpunit.xml" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<phpunit bootstrap="$tests/bootstrap.php" colors="false" failOnRisky="true" failOnWarning="true"
         beStrictAboutOutputDuringTests="true" cacheResult="false">
  <testsuites>
    <testsuite name="tokenlock-php-bundle">
$(for t in LockTest NativeTest FilesNativeTest MarksTest CommandTest NoProcessTest EuidTest CounterLimitTest GroupSharingTest RedisLockHelpersTest RedisLockTest PerCallTest SharedTest SharedStatesTest; do
    echo "      <file>$tests/$t.php</file>"
  done)
    </testsuite>
  </testsuites>
</phpunit>
XML
phpunit -c "$tmp/phpunit.xml"

# Symfony's store suite on the store from the bundle, where it can run.
if [ -f /usr/share/php/Psr/Log/autoload.php ]; then
  (cd "$src" && TOKENLOCK_SYMFONY=7.x phpunit -c bindings/php/tests/symfony/phpunit.xml)
else
  echo "php_bundle: Symfony's store suite left out: php-psr-log is not installed (scripts/install-deps installs it)"
fi
# The semaphore store through Symfony's SemaphoreFactory, where it is installed.
if [ -f "$semaphore" ]; then
  (cd "$src" && phpunit -c bindings/php/tests/semaphore/phpunit.xml)
else
  echo "php_bundle: the semaphore store's tests left out: php-symfony-semaphore is not installed (scripts/install-deps installs it)"
fi
echo "php_bundle: the one-file module works alone"
