#!/usr/bin/env bash
# The PHP module installs as a composer package, offline: bindings/php/
# composer.json passes Debian's `composer validate --strict`, and a fresh
# project that requires it from a path repository (packagist disabled, a
# scratch COMPOSER_HOME, no network) loads it through vendor/autoload.php
# and counts through the lock, also under an open_basedir that admits only
# the project and /proc, as shared hosts set it: the path repository's
# "symlink": false copies the package into vendor/ (a symlink would point
# outside open_basedir, and its files could not be loaded).
#   php_composer_install.sh SOURCE_DIR VERSION TOKENLOCK
# Exits 77 (skipped) when php or composer is missing.
set -euo pipefail
src=$1 version=$2 tool=$3
command -v php >/dev/null || { echo "SKIP: php is not installed (scripts/install-deps installs php-cli)"; exit 77; }
command -v composer >/dev/null || { echo "SKIP: composer is not installed (scripts/install-deps installs it)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export COMPOSER_HOME=$tmp/home COMPOSER_CACHE_DIR=$tmp/cache COMPOSER_DISABLE_NETWORK=1 \
  COMPOSER_NO_INTERACTION=1 COMPOSER_ALLOW_SUPERUSER=1
(cd "$src/bindings/php" && composer validate --strict --no-check-publish)
# A copy outside the source tree: composer then cannot take a version from
# the project's git, and the test sees exactly what a user's copy holds.
mkdir "$tmp/package"
cp "$src/bindings/php/composer.json" "$tmp/package/"
cp -r "$src/bindings/php/src" "$tmp/package/src"
mkdir "$tmp/app"
cat >"$tmp/app/composer.json" <<JSON
{
    "name": "example/app",
    "type": "project",
    "license": "proprietary",
    "repositories": [
        {"type": "path", "url": "$tmp/package", "options": {"symlink": false, "versions": {"tokenlock/tokenlock": "$version"}}},
        {"packagist.org": false}
    ],
    "require": {"tokenlock/tokenlock": "$version"}
}
JSON
cd "$tmp/app"
composer install --no-progress 2>&1
installed=$(composer show --format=json tokenlock/tokenlock | php -r 'echo json_decode(stream_get_contents(STDIN), true)["versions"][0];')
[ "$installed" = "$version" ] ||
  { echo "FAIL: composer installed tokenlock/tokenlock $installed, the project is $version" >&2; exit 1; }
{ [ -f vendor/tokenlock/tokenlock/src/functions.php ] && [ -f vendor/tokenlock/tokenlock/src/Lock.php ]; } ||
  { echo "FAIL: composer did not install src/functions.php and src/Lock.php into vendor/tokenlock/tokenlock" >&2; exit 1; }
mkdir data
cat >count.php <<'PHP'
<?php
declare(strict_types=1);
require __DIR__ . '/vendor/autoload.php';
$where = (new ReflectionFunction('Tokenlock\increment'))->getFileName();
if (!str_starts_with($where, __DIR__ . '/vendor/')) {
    fwrite(STDERR, "FAIL: Tokenlock\\increment comes from $where, not the installed package\n");
    exit(1);
}
// PSR-4: the classes of their own files load on first use. The Symfony
// store needs Symfony's interfaces, from Debian's php-symfony-lock here.
$classes = ['Tokenlock\Lock', 'Tokenlock\Native', 'Tokenlock\Files', 'Tokenlock\BusyException', 'Tokenlock\RedisLock'];
$symfony = '/usr/share/php/Symfony/Component/Lock/autoload.php';
if (is_file($symfony)) {
    require $symfony;
    $classes[] = 'Tokenlock\Symfony\TokenlockStore';
}
foreach ($classes as $class) {
    if (!class_exists($class)) {
        fwrite(STDERR, "FAIL: the autoloader does not load $class\n");
        exit(1);
    }
}
$got = [];
for ($i = 0; $i < 3; ++$i) {
    $got[] = Tokenlock\withLock(__DIR__ . '/data/count.lock', function (Tokenlock\Lock $lock) {
        return Tokenlock\increment(__DIR__ . '/data/hits.count', ['lock' => __DIR__ . '/data/hits.lock']);
    });
}
if ($got !== [1, 2, 3] || Tokenlock\readCounter(__DIR__ . '/data/hits.count') !== 3) {
    fwrite(STDERR, 'FAIL: counted ' . json_encode($got) . "\n");
    exit(1);
}
echo "counted to 3 through $where\n";
PHP
TOKENLOCK_COMMAND=$tool php count.php
cat >basedir.php <<'PHP'
<?php
declare(strict_types=1);
require __DIR__ . '/vendor/autoload.php';
$n = Tokenlock\increment(__DIR__ . '/data/hits.count', ['lock' => __DIR__ . '/data/hits.lock']);
if ($n !== 4) {
    fwrite(STDERR, "FAIL: under open_basedir the counter went from 3 to $n\n");
    exit(1);
}
echo 'counted to 4 under open_basedir=' . ini_get('open_basedir') . "\n";
PHP
[ ! -L vendor/tokenlock/tokenlock ] ||
  { echo "FAIL: vendor/tokenlock/tokenlock is a symbolic link despite \"symlink\": false" >&2; exit 1; }
# Notices are errors here: the module must not need anything outside.
php -d open_basedir="$tmp/app:/proc" -d error_reporting=-1 -d display_errors=stderr basedir.php 2>basedir.err
[ ! -s basedir.err ] || { echo "FAIL: under open_basedir PHP said:" >&2; cat basedir.err >&2; exit 1; }
leftover=$(find data -name '*.tmp.*')
[ -z "$leftover" ] || { echo "FAIL: temporary files left: $leftover" >&2; exit 1; }
# An optimised autoloader (a class map of src/) finds each class once:
# composer warns of an ambiguous class when two files declare it.
composer dump-autoload --optimize 2>&1 | tee dump.out
! grep -i 'ambiguous' dump.out || { echo "FAIL: composer's class map found a class declared twice" >&2; exit 1; }
php -r 'require "vendor/autoload.php"; exit(Tokenlock\Lock::tryAcquire("data/map.lock")?->release() === null && trait_exists("Tokenlock\Native\Trust") ? 0 : 1);' ||
  { echo "FAIL: the optimised autoloader does not load the module" >&2; exit 1; }
[ -d data/map.lock/lockfile ] || { echo "FAIL: data/map.lock is not free after the release" >&2; exit 1; }
echo "php_composer_install: tokenlock/tokenlock installed offline from a path repository and works"
