#!/usr/bin/env bash
# The Perl module (bindings/perl/lib: Tokenlock.pm and Tokenlock/) attacked by a hostile
# local user (docs/security.md), with two real accounts:
#   attacks_perl.sh PERL_LIB RACER
# PERL_LIB is the directory holding Tokenlock.pm and Tokenlock/, RACER tests/security/racer.c
# built. Each attack prints one line, "attack pN: refused (...)" or
# "attack pN: SUCCEEDED (...)"; the group set-up that must keep working
# prints "setup: ..." lines the same way. Exits 1 when any succeeded.
#
#   p1a  clearing a taken-over legacy token of mode 0777 (made under umask
#        0 by an old script) in a lock directory the admin made o-w: the
#        attacker swaps a subdirectory of the token for a link to the
#        victim's directory while the victim empties it;
#   p1b  clearing a taken-over token of the group set-up (2770 data
#        directory, TOKENLOCK_GROUP), whose token another group member
#        owns: the attacker's racer swaps the victim's new token for a link;
#   p1c  as p1b, the victim's own workspace `w` left in the attacker's
#        token: once the victim took the token over, the attacker's racer
#        swaps `w` for a link to the victim's directory for 100 us every
#        300 us, while the victim looks at it, enters it and clears it;
#   p2   an attacker who shares only a second group with the victim plants
#        the lock directory and its workspace in a sticky directory and
#        renames its file over the victim's temporary file;
#   p3   a FIFO planted at the victim's counter: read_counter must not block;
#   p4   the password of the victim's Redis URL, read by the attacker from the
#        process list while Tokenlock::Redis runs the command, or shown in
#        the victim's error message and ->command.
# p1 counts the victim's 200 canary files left after each race.
#
# Needs root (accounts tl_victim, tl_attacker, groups tl_share and
# tl_second, removed at the end when made here); skipped (77) otherwise.
# Serialise with the other suites that make the accounts:
#   flock /tmp/tl-security-accounts.lock attacks_perl.sh ...
# The stale tokens hold TL_SECURITY_FILLER (default 3000) files besides the
# canaries' names. Races run up to TL_SECURITY_TRIES times (default 20) within
# TL_SECURITY_RACE_SECONDS (default 40) per race, and stop at the first
# success.
set -uo pipefail
if [ $# -ne 2 ]; then
  echo "usage: attacks_perl.sh PERL_LIB RACER" >&2
  exit 64
fi
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: the security suite needs root, to create the accounts tl_victim and tl_attacker (run ctest -L security as root)"
  exit 77
fi
for tool in setpriv useradd userdel groupadd groupdel usermod mkfifo timeout stat perl; do
  command -v "$tool" >/dev/null ||
    { echo "SKIP: $tool is not installed (util-linux, passwd, coreutils, perl)"; exit 77; }
done
[ -f "$1/Tokenlock.pm" ] && [ -d "$1/Tokenlock" ] ||
  { echo "FAIL: no Tokenlock.pm with its directory Tokenlock/ in $1" >&2; exit 64; }
tries=${TL_SECURITY_TRIES:-20}
filler=${TL_SECURITY_FILLER:-3000}
race_seconds=${TL_SECURITY_RACE_SECONDS:-40}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/security/setup.sh
. "$here/setup.sh"

# A second group both accounts are in, standing for `users`: being in it
# is no choice of the victim's.
second_group=""
cleanup_perl() {
  cleanup
  [ -n "$second_group" ] && groupdel "$second_group" 2>/dev/null
  return 0
}
trap cleanup_perl EXIT

make_perl_world() {
  make_accounts
  if ! getent group tl_second >/dev/null; then
    groupadd --system tl_second || { echo "FAIL: cannot create the group tl_second" >&2; exit 1; }
    second_group=tl_second
  fi
  usermod -a -G tl_second tl_victim && usermod -a -G tl_second tl_attacker ||
    { echo "FAIL: cannot add the accounts to tl_second" >&2; exit 1; }
  work=$(mktemp -d /tmp/tokenlock-security-perl.XXXXXX)
  chmod 0755 "$work"
  mkdir -m 0755 "$work/lib" "$work/bin"
  cp -R "$1/Tokenlock.pm" "$1/Tokenlock" "$work/lib/" && cp "$2" "$work/bin/racer" ||
    { echo "FAIL: cannot copy the module and the racer to $work" >&2; exit 1; }
  chmod 0755 "$work/lib/Tokenlock" && chmod 0644 "$work/lib/Tokenlock.pm" "$work/lib/Tokenlock/"*.pm &&
    chmod 0755 "$work/bin/racer"
  racer=$work/bin/racer
  sticky=$work/sticky home=$work/victim
  mkdir "$sticky" "$home" "$work/scratch"
  chmod 1777 "$sticky" && chmod 0777 "$work/scratch"
  mkdir -m 0755 "$home/locks" "$home/data" "$home/keep"
  chown tl_victim: "$home" "$home/locks" "$home/data" "$home/keep"
  # The documented group set-up: a data directory 2770 in the chosen group.
  group_data=$work/group-data
  mkdir -m 2770 "$group_data" && chown tl_victim:tl_share "$group_data"
  write_racer_pl
  make_filler
}

# The victim's 200 canary files, c001 ... c200 in $home/keep.
plant_keep() {
  rm -rf "$home/keep"
  mkdir -m 0755 "$home/keep"
  (cd "$home/keep" && seq -f c%03.0f 1 200 | xargs touch)
  chown -R tl_victim: "$home/keep"
}
keep_left() { find "$home/keep" -maxdepth 1 -type f -name 'c[0-9][0-9][0-9]' | wc -l; }

# Runs a Perl snippet as the victim with the module; $1: the environment
# assignments (words), then the snippet and its arguments.
as_victim_perl() {
  local envs=$1
  shift
  # shellcheck disable=SC2086 # $envs is a list of assignments
  "${as_victim[@]}" env $envs perl -I"$work/lib" -MTokenlock -e "$@"
}

# The attacker's racer for p1a, in Perl: it sits in the token directory
# (its working directory follows the token through the victim's rename),
# waits until the victim starts emptying `docs` (its mtime changes), and
# swaps `docs` for a link to the victim's directory.
write_racer_pl() {
  cat >"$work/bin/racer.pl" <<'PERL'
use strict;
use warnings;
use Time::HiRes ();
my ($token, $target, $ready, $timeout_ms) = @ARGV;
chdir $token or die "racer: cannot enter $token: $!\n";
my $m0 = (Time::HiRes::lstat('docs'))[9];
open(my $r, '>', $ready) or die "racer: cannot create $ready: $!\n";
close $r;
my $end = Time::HiRes::time() + $timeout_ms / 1000;
while (Time::HiRes::time() < $end) {
  my @st = Time::HiRes::lstat('docs');
  next unless @st && $st[9] != $m0;
  rename('docs', 'docs.moved') && symlink($target, 'docs') or die "racer: cannot swap docs: $!\n";
  print "docs\n";
  exit 0;
}
exit 2;
PERL
  # The racer of p1c: it waits until the victim took the token over (the
  # stale name is gone), then swaps `w` for a link and back until stopped.
  cat >"$work/bin/flipper.pl" <<'PERL'
use strict;
use warnings;
use Time::HiRes ();
my ($token, $target, $ready, $timeout_ms) = @ARGV;
chdir $token or die "racer: cannot enter $token: $!\n";
open(my $r, '>', $ready) or die "racer: cannot create $ready: $!\n";
close $r;
$| = 1;
my $end = Time::HiRes::time() + $timeout_ms / 1000;
1 while -e $token && Time::HiRes::time() < $end;
my $flips = 0;
$SIG{TERM} = sub { print "w, $flips swaps\n" if $flips; exit 0 };
my $spin = sub { my $until = Time::HiRes::time() + $_[0] / 1e6; 1 while Time::HiRes::time() < $until };
while (Time::HiRes::time() < $end) {
  $spin->(200);
  rename('w', 'w.aside') or last;
  symlink($target, 'w') or last;
  $spin->(100);
  unlink('w');
  rename('w.aside', 'w') or last;
  $flips++;
}
print "w, $flips swaps\n" if $flips;
exit 0;
PERL
  chmod 0644 "$work/bin/racer.pl" "$work/bin/flipper.pl"
}

# The attacker's files that fill_token puts in each stale token:
# c001..c200 and $filler others, mode 0666 (made under umask 0), made
# once. A try links them in rather than making them again: making 3,200
# files took 2 to 7 s a try here (a new inode costs about 1 ms on a busy
# disk, a link 20 us), and a race's time is better spent on more tries.
# The victim's clearing goes through the same names of the same owner.
make_filler() {
  filler_dir=$work/filler
  mkdir -m 0755 "$filler_dir" && chown tl_attacker: "$filler_dir"
  "${as_attacker[@]}" sh -c 'umask 0; cd "$1" &&
    seq -f c%03.0f 1 200 | xargs touch && seq -f f%05.0f 1 "$2" | xargs touch' sh "$filler_dir" "$filler" ||
    { echo "FAIL: the attacker cannot make its files in $filler_dir" >&2; exit 1; }
}

# A token of the attacker's at $1 (mode $2) holding the filler's names,
# at the top ($3 = top) or in a subdirectory docs ($3 = docs): the
# victim's clearing takes that long to go through them.
fill_token() {
  local tok=$1 mode=$2 where=$3
  "${as_attacker[@]}" sh -c 'umask 0; mkdir -p -m "$2" "$1" && cd "$1" &&
    if [ "$3" = docs ]; then mkdir -m "$2" docs && cd docs; fi &&
    ln -- "$4"/* .' sh "$tok" "$mode" "$where" "$filler_dir" ||
    { echo "FAIL: the attacker cannot fill $tok" >&2; exit 1; }
}

# One race of p1: $1 label, $2 the victim's environment, $3 the lock
# directory; prepare_$1 makes the stale token and start_racer_$1 starts the
# racer (sets racer_pid; 1 when it did not start).
clearing_race_perl() {
  local label=$1 envs=$2 lock=$3 s=$work/scratch/$1 start=$SECONDS try rc left
  local problems="" detail="no try ran" worst=200 swapped=0
  for ((try = 1; try <= tries && SECONDS - start < race_seconds; try++)); do
    plant_keep
    "prepare_$label" "$lock"
    rm -f "$s.ready"
    "start_racer_$label" "$lock" "$s" || { problems="the racer did not start"; break; }
    as_victim_perl "$envs" 'my $l = Tokenlock->acquire($ARGV[0], wait => 0); $l->release' "$lock" 2>"$s.err"
    rc=$?
    kill "$racer_pid" 2>/dev/null
    wait "$racer_pid" 2>/dev/null
    left=$(keep_left)
    [ "$left" -lt "$worst" ] && worst=$left
    [ -s "$s.racer" ] && swapped=$((swapped + 1))
    if [ "$left" != 200 ]; then
      problems="try $try: canaries left $left of 200 (the victim's acquire exited $rc after the racer swapped $(head -1 "$s.racer") for a link to $home/keep)"
      break
    fi
    detail="$try tries, the racer swapped in $swapped, canaries left 200 of 200 each time, last exit $rc: $(first_line "$s.err")"
  done
  echo "p1$label: canaries left $worst of 200"
  report "attack p1$label" "$problems" "$detail"
}

# p1a: the lock directory is the victim's, made o-w by the admin; the
# legacy token in it is 0777 and the attacker has filled it.
prepare_a() {
  local lock=$1
  rm -rf "$lock"
  mkdir -m 0755 "$lock" && chown tl_victim: "$lock"
  "${as_victim[@]}" sh -c 'umask 0; mkdir -m 0777 "$1/lockfile1000000000"' sh "$lock"
  fill_token "$lock/lockfile1000000000/x" 0777 docs
  # The attacker's docs is the token's own subdirectory.
  "${as_attacker[@]}" sh -c 'mv "$1/x/docs" "$1/docs" && rmdir "$1/x"' sh "$lock/lockfile1000000000"
}
start_racer_a() {
  "${as_attacker[@]}" perl "$work/bin/racer.pl" "$1/lockfile1000000000" "$home/keep" "$2.ready" 20000 >"$2.racer" &
  racer_pid=$!
  started_pids+=("$racer_pid")
  wait_for_file "$2.ready"
}

# p1b: the documented group set-up; the attacker, a member of the chosen
# group, made the lock directory and left a stale token of hers.
stale_b=lockfile.1000000.elsewhere-0badc0de.7.0.0123456789abcdef
prepare_b() {
  local lock=$1
  rm -rf "$lock"
  "${as_attacker[@]}" sh -c 'umask 002; mkdir -m 0775 "$1"' sh "$lock"
  fill_token "$lock/$stale_b" 0775 top
}
start_racer_b() {
  "${as_attacker[@]}" "$racer" swap-token "$1" "$stale_b" "$home/keep" "$2.ready" 20000 >"$2.racer" &
  racer_pid=$!
  started_pids+=("$racer_pid")
  wait_for_file "$2.ready"
}

# p1c: as p1b, with the victim's own workspace in the token.
prepare_c() {
  local lock=$1
  rm -rf "$lock"
  "${as_attacker[@]}" sh -c 'umask 002; mkdir -m 0775 "$1" "$1/$2"' sh "$lock" "$stale_b"
  mkdir -m 0775 "$lock/$stale_b/w" && chown tl_victim:tl_share "$lock/$stale_b/w"
  fill_token "$lock/$stale_b/w" 0775 top
}
start_racer_c() {
  "${as_attacker[@]}" perl "$work/bin/flipper.pl" "$1/$stale_b" "$home/keep" "$2.ready" 20000 >"$2.racer" &
  racer_pid=$!
  started_pids+=("$racer_pid")
  wait_for_file "$2.ready"
}

attack_p1() {
  clearing_race_perl a "" "$home/locks/a.lock"
  clearing_race_perl b "TOKENLOCK_DIR_MODE=0775 TOKENLOCK_GROUP=tl_share" "$group_data/b.lock"
  clearing_race_perl c "TOKENLOCK_DIR_MODE=0775 TOKENLOCK_GROUP=tl_share" "$group_data/c.lock"
}

# p2: the lock directory and its workspace planted in a sticky directory
# with the group tl_second, which the victim did not choose.
attack_p2() {
  local lock=$sticky/cfg.lock target=$home/data/cfg s=$work/scratch/p2 problems="" rc try racer_pid
  local detail="no try ran" start=$SECONDS
  for ((try = 1; try <= tries && SECONDS - start < race_seconds; try++)); do
    rm -rf "$lock"
    echo "VICTIM CONFIG" >"$target" && chown tl_victim: "$target"
    "${as_attacker[@]}" sh -c 'umask 002; mkdir -m 2775 "$1" && chgrp tl_second "$1" &&
      mkdir -m 0775 "$1/lockfile" "$1/lockfile/w" && echo "ATTACKER DATA" >"$2"' sh "$lock" "$s.data.$try"
    rm -f "$s.ready"
    "${as_attacker[@]}" "$racer" swap-temp "$lock/lockfile/w" ".cfg.tmp." "$s.data.$try" "$s.ready" 10000 >"$s.racer" &
    racer_pid=$!
    started_pids+=("$racer_pid")
    wait_for_file "$s.ready" || { problems="the racer did not start"; break; }
    as_victim_perl "TOKENLOCK_DIR_MODE=0775" 'Tokenlock::write_file($ARGV[0], "VICTIM NEW\n", lock => $ARGV[1])' \
      "$target" "$lock" 2>"$s.err"
    rc=$?
    kill "$racer_pid" 2>/dev/null
    wait "$racer_pid" 2>/dev/null
    if grep -q ATTACKER "$target"; then
      problems="try $try: write_file exited $rc and $target holds '$(head -1 "$target")', owned by $(stat -c %U "$target")"
      break
    fi
    if [ "$rc" = 0 ]; then
      problems="try $try: write_file in the attacker's lock directory of group tl_second was not refused (exit 0)"
      break
    fi
    if ! refusal_explained "$s.err" "$attacker_uid"; then
      problems="try $try: exit $rc without 'refusing' and uid $attacker_uid: $(first_line "$s.err")"
      break
    fi
    grep -q "VICTIM CONFIG" "$target" || { problems="try $try: the target changed: $(head -1 "$target")"; break; }
    # Refused before the race: once is enough.
    detail="exit $rc, target intact: $(first_line "$s.err")"
    break
  done
  report "attack p2" "$problems" "$detail"
}

# p3: a FIFO at the victim's counter path in the sticky directory.
attack_p3() {
  local path=$sticky/hits s=$work/scratch/p3 problems="" rc
  rm -f "$path"
  "${as_attacker[@]}" mkfifo -m 0666 "$path"
  timeout 10 "${as_victim[@]}" perl -I"$work/lib" -MTokenlock -e 'print Tokenlock::read_counter($ARGV[0]) // "undef", "\n"' \
    "$path" >"$s.out" 2>"$s.err"
  rc=$?
  if [ "$rc" = 124 ]; then
    problems="read_counter blocked on the FIFO until killed after 10 s"
  elif [ "$rc" = 0 ]; then
    problems="read_counter of a FIFO returned '$(head -1 "$s.out")'"
  elif ! grep -q "$path" "$s.err"; then
    problems="the refusal does not name the path: $(first_line "$s.err")"
  fi
  report "attack p3" "$problems" "exit $rc: $(first_line "$s.err")"
  rm -f "$path"
}

# p4: a stand-in for the command waits (bounded) until the attacker has
# looked at its argv and environment in /proc.
attack_p4() {
  local s=$work/scratch/p4 pw=S3cretPW-p4 problems="" rc fake=$work/bin/fake-tokenlock
  cat >"$fake" <<'SH'
#!/bin/sh
echo $$ >"$FAKE_DIR/pid.tmp" && mv "$FAKE_DIR/pid.tmp" "$FAKE_DIR/pid"
i=0
while [ ! -e "$FAKE_DIR/go" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done
echo "tokenlock: acquire: cannot connect" >&2
exit 69
SH
  chmod 0755 "$fake"
  rm -f "$s".*
  "${as_victim[@]}" env FAKE_DIR="$work/scratch" perl -I"$work/lib" -MTokenlock -e '
    eval { Tokenlock::Redis->acquire($ARGV[0], "x", wait => 0, command => $ARGV[1]) };
    print STDERR ref $@ ? $@->message . "\ncommand: " . join(" ", $@->command) . "\n" : $@;' \
    "redis://:$pw@127.0.0.1:1/0" "$fake" 2>"$s.err" &
  local victim=$!
  started_pids+=("$victim")
  wait_for_file "$work/scratch/pid" || problems="the command was not started"
  if [ -z "$problems" ]; then
    local pid
    pid=$(cat "$work/scratch/pid")
    "${as_attacker[@]}" sh -c 'tr "\0" " " <"/proc/$1/cmdline"; echo; tr "\0" "\n" <"/proc/$1/environ" 2>/dev/null' sh "$pid" \
      >"$s.seen" 2>/dev/null
  fi
  touch "$work/scratch/go"
  wait "$victim"
  rc=$?
  if grep -q "$pw" "$s.seen" 2>/dev/null; then
    problems="the attacker read the password in the command's process entry: $(grep -m1 "$pw" "$s.seen" | head -c 200)"
  elif grep -q "$pw" "$s.err"; then
    problems="the victim's error shows the password: $(grep -m1 "$pw" "$s.err" | head -c 200)"
  fi
  report "attack p4" "$problems" "argv seen by the attacker: $(head -1 "$s.seen" 2>/dev/null | head -c 120); message: $(first_line "$s.err")"
  rm -f "$work/scratch/pid" "$work/scratch/go"
}

# The set-up of docs/security.md keeps working across two real users in
# the named group, and only in it.
group_setup_perl() {
  local data=$group_data s=$work/scratch/setup problems="" p1 p2
  local incr='umask 002; for (1 .. 50) { Tokenlock::increment($ARGV[0]) }'
  "${as_victim[@]}" env TOKENLOCK_GROUP=tl_share perl -I"$work/lib" -MTokenlock -e "$incr" "$data/c.count" \
    2>"$s.victim" &
  p1=$!
  "${as_attacker[@]}" env TOKENLOCK_GROUP=tl_share perl -I"$work/lib" -MTokenlock -e "$incr" "$data/c.count" \
    2>"$s.other" &
  p2=$!
  wait "$p1" || problems="the victim's increments failed: $(first_line "$s.victim");"
  wait "$p2" || problems="$problems the other user's increments failed: $(first_line "$s.other");"
  [ "$(cat "$data/c.count" 2>/dev/null)" = 100 ] ||
    problems="$problems the counter holds '$(cat "$data/c.count" 2>/dev/null)', not 100;"
  [ "$(stat -c %G "$data/c.count.lock" 2>/dev/null)" = tl_share ] ||
    problems="$problems the lock directory's group is $(stat -c %G "$data/c.count.lock" 2>/dev/null), not tl_share;"
  report_setup "setup: two users increment one counter in a 2770 directory with TOKENLOCK_GROUP=tl_share" \
    "$problems" "100 increments, count exact"
}

make_perl_world "$1" "$2"
attack_p1
attack_p2
attack_p3
attack_p4
group_setup_perl
echo "security suite (Perl): $succeeded of $reported checks SUCCEEDED against the Perl module"
[ "$succeeded" = 0 ]
