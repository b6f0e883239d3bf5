#!/usr/bin/env bash
# The Perl module as a host installs it: a copy of bindings/perl alone, no
# source tree around it, no tokenlock command on PATH and no TOKENLOCK_*
# settings. `perl Makefile.PL && make && make test` must pass and run every
# native test file; only those that need the command may be skipped
# (bindings/perl/README.md lists them). Counted from the TAP output.
#   perl_make_test_copy.sh SOURCE_DIR
set -euo pipefail
src=$1
for tool in perl make; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed (scripts/install-deps installs it)"; exit 77; }
done
# The files that go through the command, and may be skipped here.
needs_command='t/22-board-waiters.t t/24-redis.t t/50-redis-shared.t'

top=$(mktemp -d "${TMPDIR:-/tmp}/tokenlock-perl-copy-XXXXXX")
trap 'rm -rf "$top"' EXIT
cp -R "$src/bindings/perl" "$top/Tokenlock"

# PATH without any directory holding a tokenlock; no TOKENLOCK_* variable.
path=
IFS=: read -r -a dirs <<<"$PATH"
for d in "${dirs[@]}"; do
  [ -n "$d" ] && [ ! -e "$d/tokenlock" ] && path=${path:+$path:}$d
done
unset_args=()
while IFS= read -r name; do unset_args+=(-u "$name"); done < <(env | sed -n 's/^\(TOKENLOCK_[A-Za-z0-9_]*\)=.*/\1/p')

cd "$top/Tokenlock"
status=0
env "${unset_args[@]}" -u PERL5LIB -u PERL_MM_OPT -u MAKEFLAGS PATH="$path" \
  sh -c 'perl Makefile.PL && make && make test TEST_VERBOSE=1' >"$top/log" 2>&1 || status=$?
cat "$top/log"
[ "$status" -eq 0 ] || { echo "FAIL: perl Makefile.PL && make && make test exited $status in the copy"; exit 1; }

# Per test file, from the harness's verbose TAP: ran (a plan of 1 or more
# tests) or skipped (1..0 # SKIP, which the harness shows as "skipped:").
report=$(awk '
  /^t\/[^ ]+\.t \.+ skipped: / { skipped[$1] = 1; file = ""; next }
  /^t\/[^ ]+\.t \.+ *$/ { file = $1; next }
  file != "" && /^1\.\.0( |$)/ { skipped[file] = 1; next }
  file != "" && /^1\.\.[1-9][0-9]*/ { ran[file] = 1; next }
  END { for (f in ran) print "ran " f; for (f in skipped) print "skipped " f }' "$top/log" | sort)
echo "$report"
fail=0
for t in t/*.t; do
  case " $needs_command " in
    *" $t "*)
      grep -qx "skipped $t" <<<"$report" || grep -qx "ran $t" <<<"$report" ||
        { echo "FAIL: $t neither ran nor was skipped"; fail=1; }
      ;;
    *)
      grep -qx "ran $t" <<<"$report" || { echo "FAIL: $t did not run (a native test must run without the command)"; fail=1; }
      ;;
  esac
done
ran=$(grep -c '^ran ' <<<"$report" || true)
native=$(( $(ls t/*.t | wc -l) - $(wc -w <<<"$needs_command") ))
echo "native test files run: $ran of $native"
[ "$ran" -ge "$native" ] || fail=1
grep -q '^Result: PASS' "$top/log" || { echo "FAIL: no Result: PASS"; fail=1; }
exit $fail
