#!/usr/bin/env bash
# What a planted or held turnstile costs the prototypes of SCHEME (default
# aged): for each case, a holder keeps the lock 300 ms and a PHP and a Perl
# waiter with a 2 s budget must have it within 150 ms of the release (the
# sleepers' own look comes every 100 ms; the rest is a margin for a loaded
# machine); a second waiter on a lock never released must give up by its
# 0.5 s budget (50 ms of margin). After each case the planted entry must be
# as it was, the victim file unchanged (content and mtime), nothing created
# through a link, and the lock free.
#
#   bench/lang/turnstile/attacks.sh [SCHEME]
#
# Cases: a symbolic link to a victim file; a dangling one (what it names
# must not appear); a FIFO; a directory; a hard link to the victim; a file
# of another user; the turnstile flocked forever by another process; both
# places (turnstile and turnstile.next) flocked forever; a hungry mark left
# by a head that died. Run as root it also shows that another user can
# neither plant an entry in the lock directory nor open the turnstile to
# hold it. Exits 1 if any check fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
scheme=${1:-aged}
hold_ms=300 bound_ms=150 budget_ms=500
work=$(mktemp -d)
holders=()
trap 'for p in "${holders[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
status=0
fail() { echo "  FAIL: $*"; status=1; }

# hold_forever FILE...: one process that flocks each FILE and sleeps (one
# process, so that killing it frees them and leaves nothing behind).
hold_forever() {
  perl -e '$| = 1; my @h; for (@ARGV) { open(my $f, "<", $_) or die; flock($f, 2) or die; push @h, $f } print "held\n"; sleep 1000' "$@" \
    >"$work/held" 2>&1 </dev/null &
  holders+=($!)
  for _ in $(seq 100); do grep -q held "$work/held" 2>/dev/null && break; sleep 0.05; done
}

# plant CASE D: makes the entry; prints nothing.
plant() {
  local d=$1/turnstile
  case $2 in
    symlink) ln -s "$work/victim" "$d" ;;
    dangling) ln -s "$work/created-through-link" "$d" ;;
    fifo) mkfifo "$d" ;;
    directory) mkdir "$d" ;;
    hardlink) ln "$work/victim" "$d" ;;
    other-owner) : >"$d"; chown 65534 "$d" ;;
    held) : >"$d"; chmod 600 "$d"; hold_forever "$d" ;;
    held-both) : >"$d"; : >"$d.next"; chmod 600 "$d" "$d.next"; hold_forever "$d" "$d.next" ;;
    hungry-mark) printf x >"$d"; chmod 600 "$d" ;;
  esac
}

# describe PATH: what is at PATH, to compare before and after.
describe() { stat -c '%F %h %u %s %Y' "$1" 2>/dev/null; readlink "$1" 2>/dev/null || true; }

# probe LANG D WAIT: one acquisition; prints the probe's line.
probe() {
  if [ "$1" = php ]; then php "$here/contend.php" probe "$scheme" "$2" "$3"
  else perl "$here/contend.pl" probe "$scheme" "$2" "$3"; fi
}

# one_case CASE LANG: the released and the never-released lock.
one_case() {
  local case=$1 lang=$2 d=$work/$1-$2.lock before victim out ms
  mkdir -p "$d/lockfile"
  plant "$d" "$case"
  before=$(describe "$d/turnstile") victim=$(md5sum <"$work/victim")$(stat -c %Y "$work/victim")
  mv "$d/lockfile" "$d/lockfile.1.other-00000000.1.0.0000000000000000"
  # The time is taken before the release, so that the lateness is not understated.
  ( sleep "0.$hold_ms"; date +%s%3N >"$work/released"
    mv "$d/lockfile.1.other-00000000.1.0.0000000000000000" "$d/lockfile" ) &
  out=$(probe "$lang" "$d" 2)
  wait $!
  ms=$(( $(awk '{print $4}' <<<"$out") - $(cat "$work/released") ))
  printf '  %-6s released after %d ms: got it %d ms after the release: %s\n' "$lang" "$hold_ms" "$ms" "$out"
  [[ $out == got* ]] || fail "$case/$lang: the waiter did not get a freed lock within its budget"
  [ "$ms" -le "$bound_ms" ] || fail "$case/$lang: got the lock $ms ms after its release, more than $bound_ms"
  mv "$d/lockfile" "$d/lockfile.1.other-00000000.1.0.0000000000000000"
  out=$(probe "$lang" "$d" 0.5)
  ms=$(awk '{print $2}' <<<"$out")
  printf '  %-6s never released, budget %d ms: %s\n' "$lang" "$budget_ms" "$out"
  [[ $out == timed_out* ]] || fail "$case/$lang: acquired a lock that is held"
  [ "${ms:-99999}" -le $((budget_ms + 50)) ] || fail "$case/$lang: gave up after $ms ms, past its $budget_ms ms budget"
  mv "$d/lockfile.1.other-00000000.1.0.0000000000000000" "$d/lockfile"
  check_after "$case" "$d" "$before" "$victim"
}

# check_after CASE D BEFORE VICTIM: nothing changed that is not ours.
check_after() {
  local case=$1 d=$2 after
  after=$(describe "$d/turnstile")
  if [ "$case" = hungry-mark ]; then
    [ "$(stat -c %s "$d/turnstile")" = 0 ] || fail "$case: the mark left by a dead head was not cleared"
  elif [ "$after" != "$3" ]; then
    fail "$case: the planted entry changed: '$3' -> '$after'"
  fi
  [ "$(md5sum <"$work/victim")$(stat -c %Y "$work/victim")" = "$4" ] || fail "$case: the victim file changed"
  [ ! -e "$work/created-through-link" ] || fail "$case: a file was created through the link"
  [ -d "$d/lockfile" ] || fail "$case: the lock is not free afterwards"
}

echo "victim data" >"$work/victim"
touch -d '2001-01-01' "$work/victim"
echo "scheme $scheme; a holder keeps the lock $hold_ms ms; a waiter must have it within $bound_ms ms of the release"
for case in symlink dangling fifo directory hardlink other-owner held held-both hungry-mark; do
  echo "$case:"
  for lang in php perl; do one_case "$case" "$lang"; done
done
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  d=$work/foreign.lock
  mkdir -p "$d/lockfile"
  : >"$d/turnstile"; chmod 600 "$d/turnstile"
  as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
  as_nobody ln -s "$work/victim" "$d/turnstile.next" 2>/dev/null && fail "another user planted an entry in the lock directory"
  as_nobody flock -n "$d/turnstile" true 2>/dev/null && fail "another user opened and locked the turnstile"
  echo "another user (uid 65534): cannot plant in the lock directory, cannot open the turnstile to hold it"
fi
[ $status = 0 ] && echo "all cases: latency only"
exit $status
