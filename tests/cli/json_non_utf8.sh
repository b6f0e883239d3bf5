#!/bin/sh
# tokenlock status --json and doctor --json on a lock directory whose path
# is not UTF-8 (a byte 0xff in it): python3 and PHP's json_decode both
# parse the output, the path shows the byte as the text \xff, and
# lock_dir_hex gives back the path's exact bytes. A held lock's token and
# host tag come out as they are.
#   json_non_utf8.sh TOKENLOCK
set -u
cli=${1:?usage: json_non_utf8.sh TOKENLOCK}
for tool in python3 php; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "SKIP: $tool is missing (scripts/install-deps installs it)"; exit 77; }
done
top=$(mktemp -d) || exit 1
trap 'rm -rf "$top"' EXIT
dir=$(printf '%s/bad\377name' "$top")
mkdir "$dir" || exit 1
lock="$dir/L"
fail() { echo "FAIL: $*"; exit 1; }

# Each parser gets the document on stdin, the expected path in hex as
# argument, and prints "ok" when every check holds.
check_python() {
  python3 -c '
import json, sys
doc = json.load(sys.stdin)
want = bytes.fromhex(sys.argv[1])
assert doc["lock_dir_hex"] == sys.argv[1], doc
assert bytes.fromhex(doc["lock_dir_hex"]) == want
assert doc["lock_dir"] == want.replace(b"\xff", b"\\xff").decode(), doc["lock_dir"]
assert doc["state"] == sys.argv[2], doc
assert "measured_in_hex" in doc["clock"], doc
print("ok")' "$@"
}
check_php() {
  php -r '
$doc = json_decode(stream_get_contents(STDIN), true, 512, JSON_THROW_ON_ERROR);
$want = hex2bin($argv[1]);
if ($doc["lock_dir_hex"] !== $argv[1] || hex2bin($doc["lock_dir_hex"]) !== $want) exit(1);
if ($doc["lock_dir"] !== str_replace("\xff", "\\xff", $want)) exit(2);
if ($doc["state"] !== $argv[2]) exit(3);
echo "ok\n";' "$@"
}

want_hex=$(printf '%s' "$lock" | od -An -v -tx1 | tr -d ' \n')
"$cli" status --json "$lock" >"$top/free.json" || fail "status --json exited $?"
[ "$(check_python "$want_hex" free <"$top/free.json")" = ok ] || fail "python3 on $(cat "$top/free.json")"
[ "$(check_php "$want_hex" free <"$top/free.json")" = ok ] || fail "PHP on $(cat "$top/free.json")"

token=$("$cli" acquire "$lock") || fail "acquire exited $?"
"$cli" status --json "$lock" >"$top/held.json" || fail "status --json (held) exited $?"
[ "$(check_python "$want_hex" held <"$top/held.json")" = ok ] || fail "python3 on $(cat "$top/held.json")"
[ "$(check_php "$want_hex" held <"$top/held.json")" = ok ] || fail "PHP on $(cat "$top/held.json")"
got=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])' <"$top/held.json")
[ "$got" = "$token" ] || fail "token \"$got\", acquire printed \"$token\""
"$cli" release "$lock" "$token" || fail "release exited $?"
"$cli" status "$lock" | grep -qx free || fail "the lock is not free after release"

# doctor --json: the directory under test is the one with the 0xff byte.
"$cli" doctor --json "$dir" >"$top/doctor.json"
rc=$?
[ $rc -eq 0 ] || [ $rc -eq 1 ] || fail "doctor --json exited $rc"
python3 -c '
import json, sys
doc = json.load(open(sys.argv[1]))
assert bytes.fromhex(doc["dir_hex"]) == sys.argv[2].encode("utf-8", "surrogateescape"), doc["dir_hex"]
assert doc["checks"], doc' "$top/doctor.json" "$dir" || fail "python3 on doctor --json"
php -r 'json_decode(file_get_contents($argv[1]), true, 512, JSON_THROW_ON_ERROR);' "$top/doctor.json" ||
  fail "PHP on doctor --json"
[ -z "$(find "$dir" -name '.tokenlock*' -print)" ] || fail "doctor left scratch files in $dir"
echo "PASS: status --json and doctor --json parse in python3 and PHP for a path with byte 0xff"
