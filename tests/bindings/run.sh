#!/usr/bin/env bash
# Runs one language binding's own test suite, in that language's usual
# framework, against the built command (and C library):
#   run.sh perl|php|python SOURCE_DIR TOKENLOCK [LIBTOKENLOCK_C]
# Exits 77 (skipped) when the language or its test runner is missing.
set -euo pipefail
lang=$1 src=$2
export TOKENLOCK_COMMAND=$3
[ -n "${4:-}" ] && export TOKENLOCK_LIBRARY=$4
need() {
  command -v "$1" >/dev/null || { echo "SKIP: $1 is not installed (scripts/install-deps installs it)"; exit 77; }
}
cd "$src"
case $lang in
  perl)
    need prove
    # The module's own tests, then those of what the source tree runs on it.
    exec prove -l bindings/perl/t tests/bindings/perl
    ;;
  php)
    need php
    need phpunit
    exec phpunit -c bindings/php/phpunit.xml
    ;;
  python)
    # Debian's interpreter: the one the CGI's #! line names.
    [ -x /usr/bin/python3 ] || { echo "SKIP: /usr/bin/python3 is not installed"; exit 77; }
    exec /usr/bin/python3 -m unittest discover -s bindings/python/tests -v
    ;;
  *)
    echo "run.sh: unknown language $lang" >&2
    exit 64
    ;;
esac
