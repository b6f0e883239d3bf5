#!/usr/bin/env bash
# Quick runs (-q) of the per-language benchmarks, so that they keep working:
# each must end with its ratio lines, a positive number each. Figures come
# from full runs on a quiet machine (docs/languages.md), not from here.
#   smoke.sh SOURCE_DIR TOKENLOCK [LIBTOKENLOCK_C]
#   smoke.sh --fpm SOURCE_DIR TOKENLOCK     fpm_bench.sh instead (Apache)
# Exits 77 (skipped) when none of perl, php and python3 is installed, or
# with --fpm when fpm_bench.sh cannot run here.
set -euo pipefail
fpm=0
[ "$1" = --fpm ] && { fpm=1; shift; }
src=$1
export TOKENLOCK_COMMAND=$2
[ -n "${3:-}" ] && export TOKENLOCK_LIBRARY=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ran=0 status=0
check() {  # LANG OUTPUT KEY...
  local lang=$1 out=$2 key
  shift 2
  for key in "$@"; do
    grep -qE "^${key}=[0-9]+(\.[0-9]+)?$" "$out" && awk -F= -v k="$key" '$1 == k && $2 > 0 {ok=1} END {exit !ok}' "$out" ||
      { echo "FAIL: $lang: no positive $key= line; its output:" >&2; cat "$out" >&2; status=1; }
  done
  grep -E "_ratio[a-z0-9_]*=" "$out" | sed "s/^/$lang: /"
}
if [ $fpm = 1 ]; then
  code=0
  "$src/bench/lang/fpm_bench.sh" -q >"$work/fpm.out" 2>&1 || code=$?
  if [ $code = 77 ]; then cat "$work/fpm.out"; exit 77; fi
  [ $code = 0 ] || { cat "$work/fpm.out" >&2; exit 1; }
  check php-fpm "$work/fpm.out" php_fpm_ratio_none
  exit $status
fi
if command -v perl >/dev/null; then
  perl "$src/bench/lang/perl_bench.pl" -q -d "$work" >"$work/perl.out" 2>&1 || { cat "$work/perl.out" >&2; status=1; }
  check perl "$work/perl.out" perl_lock_rename_ratio perl_lock_ratio perl_incr_ratio
  ran=1
fi
if command -v php >/dev/null; then
  php "$src/bench/lang/php_bench.php" -q -d "$work" >"$work/php.out" 2>&1 || { cat "$work/php.out" >&2; status=1; }
  check php "$work/php.out" php_lock_rename_ratio php_lock_ratio php_incr_ratio
  # The store's figure needs symfony/lock's copy and Debian's php-psr-log.
  if [ -f /usr/share/php/Psr/Log/autoload.php ]; then check php "$work/php.out" php_store_ratio; fi
  php "$src/bench/lang/php_forms.php" -r 1 "$src/bindings/php/Tokenlock.php" "$src/bindings/php/autoload.php" \
    >"$work/php_forms.out" 2>&1 || { cat "$work/php_forms.out" >&2; status=1; }
  check php "$work/php_forms.out" php_forms_ratio_1
  "$src/bench/lang/php_before_after.sh" -r 1 -n 20 -k 2 -c "$src/bindings/php/Tokenlock.php" "$src/bindings/php/autoload.php" \
    >"$work/php_before_after.out" 2>&1 || { cat "$work/php_before_after.out" >&2; status=1; }
  check php "$work/php_before_after.out" php_before_after_lock_rename_ratio_old php_before_after_incr_ratio_new
  ran=1
fi
if [ -x /usr/bin/python3 ]; then
  /usr/bin/python3 "$src/bench/lang/python_bench.py" -q -d "$work" >"$work/python.out" 2>&1 ||
    { cat "$work/python.out" >&2; status=1; }
  keys=(python_cmd_lock_ratio python_incr_ratio)
  [ -n "${TOKENLOCK_LIBRARY:-}" ] && keys+=(python_lock_rename_ratio python_lock_ratio)
  check python "$work/python.out" "${keys[@]}"
  ran=1
fi
[ $ran = 1 ] || { echo "SKIP: none of perl, php and python3 is installed (scripts/install-deps installs them)"; exit 77; }
exit $status
