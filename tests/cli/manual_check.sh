#!/usr/bin/env bash
# The manual pages say what the tool does: every command, every option its
# --help lists and every exit code of tools/cli.hpp appears in both
# docs/tokenlock.1.md and the installed roff page, which must render without
# warnings and be installed with the binary.
set -euo pipefail
tool=$1 source_dir=$2 build_dir=$3
md=$source_dir/docs/tokenlock.1.md
roff=$source_dir/tools/tokenlock.1
fail=0
say() { echo "manual_check: $*" >&2; fail=1; }

warnings=$(groff -man -Tutf8 -ww -z "$roff" 2>&1 || true)
[ -z "$warnings" ] || say "groff warnings: $warnings"

# In roff, '-' is written '\-' and fonts change with \fB, \fI, \fR.
roff_text=$(sed 's/\\-/-/g; s/\\f[BIR]//g' "$roff")
in_roff() { grep -qF -- "$1" <<<"$roff_text"; }

commands=$("$tool" --help | awk '/^Commands:/{on=1; next} on && !NF {exit} on {print $1}')
[ -n "$commands" ] || say "no commands in tokenlock --help"
for c in $commands; do
  grep -qF "**$c**" "$md" || say "$c is not described in $md"
  in_roff ".B $c" || say "$c is not described in $roff"
  for opt in $("$tool" "$c" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u); do
    grep -qF -- "$opt" "$md" || say "$c $opt is not in $md"
    in_roff "$opt" || say "$c $opt is not in $roff"
  done
done

for n in $(grep -oE 'constexpr int [a-z_]+ = [0-9]+' "$source_dir/tools/cli.hpp" | awk '{print $NF}'); do
  grep -qE "^\| ($n|[0-9, ]*\b$n\b[0-9, ]*) \|" "$md" || say "exit code $n is not in the table of $md"
  grep -qE "^\.B ($n|[0-9, ]*\b$n\b[0-9, ]*)$" "$roff" || say "exit code $n is not in $roff"
done

prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build_dir" --prefix "$prefix" >/dev/null
[ -x "$prefix/bin/tokenlock" ] || say "tokenlock is not installed"
[ -f "$prefix/share/man/man1/tokenlock.1" ] || say "the man page is not installed"

[ $fail -eq 0 ] && echo "manual_check: commands, options, exit codes and installation agree"
exit $fail
