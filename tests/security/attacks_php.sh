#!/usr/bin/env bash
# The PHP module, as its one file Tokenlock.php (made from bindings/php/src
# by scripts/bundle-php), attacked by a hostile local user
# (docs/security.md), with two real accounts:
#   attacks_php.sh RACER [PHP_MODULE_DIR]
# RACER is tests/security/racer.c built; PHP_MODULE_DIR, the directory
# holding Tokenlock.php, defaults to this tree's bindings/php. Each check prints one line, "NAME: refused
# (...)" or "NAME: SUCCEEDED (...)", and the suite exits 1 when any
# succeeded; the group set-up of the docs, which must keep working across
# the two users, prints "setup: ..." lines the same way.
#
#   clearing a taken-over workspace, a real race each (200 canary files of
#   the victim's, in docs/ and .ssh/ of its home, must all stay):
#     php 1a  a legacy lock: D/<token> left at 0777 inside the victim's
#             D (0755): the attacker's racer (PHP, renameat2 through FFI)
#             exchanges subdirectories of the token with links to the
#             victim's docs/ and .ssh/, again and again
#     php 1b  the group set-up: the attacker, a member of the chosen group,
#             owns D and the token, and racer.c swaps the victim's new token
#             for a link to the victim's home
#   php 2   a directory planted in a sticky directory by a user who shares
#           only a second group with the victim: refused with
#           TOKENLOCK_DIR_MODE=0775, since that group was never chosen
#   php 3   euid unknown to PHP (posix disabled, /proc outside
#           open_basedir): another user's lock directory is still refused
#   setup   TOKENLOCK_GROUP=tl_share: both users increment one counter
#
# Needs root, to make the accounts tl_victim and tl_attacker and the groups
# tl_share and tl_second (those it made are removed at the end); skipped
# (77) otherwise, or without php. Races run up to TL_SECURITY_TRIES times
# (default 100) within TL_SECURITY_RACE_SECONDS (default 15) per race.
set -uo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: attacks_php.sh RACER [PHP_MODULE_DIR]" >&2
  exit 64
fi
here=$(cd "$(dirname "$0")" && pwd)
module_src=${2:-$here/../../bindings/php}
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: the security suite needs root, to create the accounts tl_victim and tl_attacker (run ctest -L security as root)"
  exit 77
fi
php -r 'exit(extension_loaded("FFI") ? 0 : 1);' ||
  { echo "SKIP: PHP's FFI extension is not loaded (php-ffi): the racer of attack php 1a exchanges names with renameat2"; exit 77; }
for tool in php setpriv useradd userdel groupadd groupdel gpasswd stat; do
  command -v "$tool" >/dev/null ||
    { echo "SKIP: $tool is not installed (php-cli, util-linux, passwd, coreutils)"; exit 77; }
done
[ -f "$module_src/Tokenlock.php" ] || { echo "FAIL: no Tokenlock.php in $module_src" >&2; exit 1; }
tries=${TL_SECURITY_TRIES:-100}
race_seconds=${TL_SECURITY_RACE_SECONDS:-15}
# shellcheck source=tests/security/setup.sh
. "$here/setup.sh"

second_group=""
# The second group, which only the attacker and the victim share; made
# (and removed at the end) unless a previous run left it.
make_second_group() {
  if ! getent group tl_second >/dev/null; then
    groupadd --system tl_second || { echo "FAIL: cannot create the group tl_second" >&2; exit 1; }
    second_group=tl_second
  fi
  gpasswd -a tl_victim tl_second >/dev/null && gpasswd -a tl_attacker tl_second >/dev/null ||
    { echo "FAIL: cannot add the accounts to tl_second" >&2; exit 1; }
}
remove_second_group() {
  cleanup
  [ -n "$second_group" ] && groupdel "$second_group" 2>/dev/null
  return 0
}
trap remove_second_group EXIT

# The module and the scripts both accounts run, where both can read them.
make_php_world() {
  make_accounts
  make_second_group
  work=$(mktemp -d /tmp/tokenlock-security-php.XXXXXX)
  chmod 0755 "$work"
  mkdir -m 0755 "$work/bin" "$work/php"
  cp "$1" "$work/bin/racer" && cp "$module_src/Tokenlock.php" "$work/php/" ||
    { echo "FAIL: cannot copy the racer and the module to $work" >&2; exit 1; }
  chmod -R a+rX "$work/php" && chmod 0755 "$work/bin/racer"
  racer=$work/bin/racer module=$work/php/Tokenlock.php
  sticky=$work/sticky home=$work/victim
  mkdir "$sticky" "$home" "$work/scratch"
  chmod 1777 "$sticky" && chmod 0777 "$work/scratch"
  group_locks=$work/group-locks
  mkdir -m 2770 "$group_locks" && chgrp tl_share "$group_locks"
  write_scripts
  make_php_stale_token
}

write_scripts() {
  # The victim's side: one acquire (a takeover of the stale token) and a
  # release; prints nothing, the message on stderr, exits with the
  # command's status for the error.
  cat >"$work/bin/lock.php" <<'PHP'
<?php
require $argv[1];
try {
    Tokenlock\Lock::acquire($argv[2], ['wait' => 0])->release();
} catch (Tokenlock\Exception $e) {
    fwrite(STDERR, $e->getMessage() . "\n");
    exit($e->getCode());
}
PHP
  # increment.php MODULE FILE N: N increments.
  cat >"$work/bin/increment.php" <<'PHP'
<?php
require $argv[1];
try {
    for ($i = 0; $i < (int) $argv[3]; ++$i) {
        Tokenlock\increment($argv[2]);
    }
} catch (Tokenlock\Exception $e) {
    fwrite(STDERR, $e->getMessage() . "\n");
    exit($e->getCode());
}
PHP
  # The attacker's racer for a token it can write: in the token (followed
  # through the victim's rename by the working directory), each NAME (a
  # directory) is exchanged with a link to TARGET by renameat2
  # (RENAME_EXCHANGE, through FFI), again and again, until STOP exists or
  # SECONDS pass; prints how many exchanges succeeded.
  cat >"$work/bin/flip.php" <<'PHP'
<?php
[, $dir, $ready, $stop, $seconds] = $argv;
$pairs = array_map(fn ($p) => explode('=', $p, 2), array_slice($argv, 5));
chdir($dir) || exit(1);
foreach ($pairs as [$n, $target]) {
    symlink($target, "$n.link") || exit(1);
}
$libc = FFI::cdef('int renameat2(int, const char *, int, const char *, unsigned int);', 'libc.so.6');
touch($ready) || exit(1);
$end = hrtime(true) + (int) ($seconds * 1e9);
$done = 0;
for ($i = 1; ($i & 1023) !== 0 || (hrtime(true) < $end && !file_exists($stop)); ++$i) {
    foreach ($pairs as [$n]) {
        $done += $libc->renameat2(-100, $n, -100, "$n.link", 2) === 0 ? 1 : 0;
    }
}
echo "$done\n";
PHP
  chmod 0644 "$work/bin"/*.php
}

# A held token whose owner is dead (stale on this host), made by a PHP
# process of the attacker's that dies holding it. Sets stale_token.
make_php_stale_token() {
  local private=$work/attacker-private
  mkdir -m 0755 "$private" && chown tl_attacker: "$private"
  stale_token=$("${as_attacker[@]}" php -r 'require $argv[1];
    echo Tokenlock\Lock::acquire($argv[2])->token(), "\n"; posix_kill(getmypid(), 9);' "$module" "$private/l")
  case $stale_token in
    lockfile.*) ;;
    *) echo "FAIL: the attacker's PHP printed no token: '$stale_token'" >&2; exit 1 ;;
  esac
}

# 100 canary files in each of the victim's docs/ and .ssh/.
plant_php_canaries() {
  local i
  rm -rf "$home/docs" "$home/.ssh"
  mkdir -p "$home/docs" "$home/.ssh"
  for ((i = 1; i <= 100; i++)); do
    echo "canary $i" >"$home/docs/c$i"
    echo "canary $i" >"$home/.ssh/c$i"
  done
  chmod 0755 "$home" && chmod 0700 "$home/.ssh"
  chown -R tl_victim: "$home"
}
canaries_left() {
  local n=0 i
  for ((i = 1; i <= 100; i++)); do
    [ "$(cat "$home/docs/c$i" 2>/dev/null)" = "canary $i" ] && n=$((n + 1))
    [ "$(cat "$home/.ssh/c$i" 2>/dev/null)" = "canary $i" ] && n=$((n + 1))
  done
  echo "$n"
}

# The legacy lock of 1a: the victim's D (0755) with the stale token left
# at 0777, which the attacker filled with the victim's file names.
fill_legacy_lock() {
  local lock=$1 tok=$1/$stale_token
  rm -rf "$lock"
  mkdir -m 0755 "$lock" && chown tl_victim: "$lock"
  "${as_victim[@]}" sh -c 'umask 0; mkdir -m 0777 "$1"' sh "$tok"
  "${as_attacker[@]}" sh -c 'cd "$1" && mkdir docs .ssh &&
    (cd docs && seq -f c%.0f 1 100 | xargs touch) && (cd .ssh && seq -f c%.0f 1 100 | xargs touch)' sh "$tok" ||
    { echo "FAIL: the attacker cannot fill $tok" >&2; exit 1; }
}

# The group lock of 1b: D and the token the attacker's, in the group
# directory; many files, so that the victim's clearing takes a while.
fill_group_lock() {
  local lock=$1 tok=$1/$stale_token
  if [ -d "$tok" ] && [ ! -L "$tok" ] && [ "$(ls -A "$lock")" = "$stale_token" ] &&
    [ "$(ls -U -A "$tok" | wc -l)" = 20002 ]; then
    return 0
  fi
  rm -rf "$lock"
  "${as_attacker[@]}" sh -c 'umask 002; mkdir -m 0775 "$1" "$1/$2" && chgrp tl_share "$1" "$1/$2" &&
    cd "$1/$2" && seq -f f%05.0f 1 20000 | xargs touch && mkdir docs .ssh' sh "$lock" "$stale_token" ||
    { echo "FAIL: the attacker cannot fill $lock" >&2; exit 1; }
}

# One race: $1 label, $2 how the lock is made (legacy|group), $3 the
# victim's environment (one assignment list or none).
clearing_race_php() {
  local label=$1 kind=$2 victim_env=$3 lock s=$work/scratch/php$1 start try rc racer_pid left=200 detail="no try ran" problems="" swapped=0
  plant_php_canaries
  if [ "$kind" = legacy ]; then lock=$sticky/$label.lock; else lock=$group_locks/$label.lock; fi
  start=$SECONDS
  for ((try = 1; try <= tries && SECONDS - start < race_seconds; try++)); do
    rm -f "$s.ready" "$s.stop"
    if [ "$kind" = legacy ]; then
      fill_legacy_lock "$lock"
      "${as_attacker[@]}" php -d ffi.enable=1 "$work/bin/flip.php" "$lock/$stale_token" "$s.ready" "$s.stop" 10 \
        "docs=$home/docs" ".ssh=$home/.ssh" >"$s.racer" 2>&1 &
    else
      fill_group_lock "$lock"
      "${as_attacker[@]}" "$racer" swap-token "$lock" "$stale_token" "$home" "$s.ready" 10000 >"$s.racer" &
    fi
    racer_pid=$!
    started_pids+=("$racer_pid")
    wait_for_file "$s.ready" || { problems="the racer did not start"; break; }
    # shellcheck disable=SC2086 # $victim_env is a list of assignments
    "${as_victim[@]}" env $victim_env php "$work/bin/lock.php" "$module" "$lock" 2>"$s.err"
    rc=$?
    # flip.php stops at $s.stop and prints its count of exchanges (10 s at
    # most); racer.c prints the token it swapped, and is stopped.
    touch "$s.stop"
    [ "$kind" = legacy ] || kill "$racer_pid" 2>/dev/null
    wait "$racer_pid" 2>/dev/null
    if [ "$kind" = legacy ]; then
      [ "$(head -1 "$s.racer")" -gt 0 ] 2>/dev/null && swapped=$((swapped + 1))
    else
      [ -s "$s.racer" ] && swapped=$((swapped + 1))
    fi
    left=$(canaries_left)
    if [ "$left" != 200 ]; then
      problems="try $try: canary files left $left of 200 (the victim's PHP exited $rc: $(first_line "$s.err"))"
      break
    fi
    detail="$try tries, the racer swapped in $swapped, canary files left $left of 200, last exit $rc: $(first_line "$s.err")"
  done
  report "php 1$label" "$problems" "$detail"
}

attack_php_1() {
  clearing_race_php a legacy ""
  # The group set-up as the docs give it; TOKENLOCK_DIR_MODE alone chose
  # group sharing before the group was named.
  clearing_race_php b group "TOKENLOCK_DIR_MODE=0775 TOKENLOCK_GROUP=tl_share"
}

# Attack 2: the attacker shares tl_second with the victim, and plants
# sticky/cfg.count.lock (the lock of cfg.count) with group tl_second,
# mode 0775.
attack_php_2() {
  local lock=$sticky/cfg.count.lock s=$work/scratch/php2 rc problems=""
  "${as_attacker[@]}" sh -c 'umask 002; mkdir -m 0775 "$1" "$1/lockfile" && chgrp tl_second "$1" "$1/lockfile"' sh "$lock"
  "${as_victim[@]}" env TOKENLOCK_DIR_MODE=0775 php "$work/bin/increment.php" "$module" "$sticky/cfg.count" 1 2>"$s.err"
  rc=$?
  if [ "$rc" != 77 ]; then
    problems="the victim's increment with TOKENLOCK_DIR_MODE=0775 in the attacker's lock directory (group tl_second, mode 0775) exited $rc, not 77"
  elif ! refusal_explained "$s.err" "$attacker_uid"; then
    problems="exit 77 without 'refusing' and uid $attacker_uid: $(first_line "$s.err")"
  fi
  [ ! -e "$sticky/cfg.count" ] || problems="$problems; cfg.count was written"
  [ -d "$lock/lockfile" ] || problems="$problems; the planted lock directory changed"
  report "php 2" "$problems" "exit $rc: $(first_line "$s.err")"
}

# Attack 3: root's PHP that cannot learn its euid from posix or /proc
# (the user most worth tricking), in a lock directory of the attacker's.
attack_php_3() {
  local lock=$sticky/blind.count.lock s=$work/scratch/php3 rc problems=""
  "${as_attacker[@]}" sh -c 'mkdir -m 0755 "$1" "$1/lockfile"' sh "$lock"
  php -d disable_functions=posix_geteuid,posix_getuid,posix_getpwuid \
    -d open_basedir="$work:/tmp" "$work/bin/increment.php" "$module" "$sticky/blind.count" 1 2>"$s.err"
  rc=$?
  if [ "$rc" != 77 ]; then
    problems="root's increment in the attacker's lock directory, with posix_geteuid disabled and /proc outside open_basedir, exited $rc, not 77"
  elif ! refusal_explained "$s.err" "$attacker_uid"; then
    problems="exit 77 without 'refusing' and uid $attacker_uid: $(first_line "$s.err")"
  fi
  [ ! -e "$sticky/blind.count" ] || problems="$problems; blind.count was written"
  report "php 3" "$problems" "exit $rc: $(first_line "$s.err")"
}

# The set-up of the docs: a 2770 data directory in tl_share, both users
# naming the group; each increments 50 times.
group_setup_php() {
  local data=$work/group-data s=$work/scratch/php-group problems="" p1 p2
  mkdir -m 2770 "$data" && chgrp tl_share "$data"
  "${as_victim[@]}" env TOKENLOCK_GROUP=tl_share php "$work/bin/increment.php" "$module" "$data/c.count" 50 2>"$s.victim" &
  p1=$!
  "${as_attacker[@]}" env TOKENLOCK_GROUP=tl_share php "$work/bin/increment.php" "$module" "$data/c.count" 50 2>"$s.other" &
  p2=$!
  wait "$p1" || problems="the victim's increments failed: $(first_line "$s.victim");"
  wait "$p2" || problems="$problems the other user's increments failed: $(first_line "$s.other");"
  [ "$(cat "$data/c.count" 2>/dev/null)" = 100 ] ||
    problems="$problems the counter holds '$(cat "$data/c.count" 2>/dev/null)', not 100;"
  report_setup "setup: two users increment one counter in a 2770 group directory, TOKENLOCK_GROUP=tl_share" \
    "$problems" "100 increments, count exact"
}

make_php_world "$1"
attack_php_1
attack_php_2
attack_php_3
group_setup_php
echo "security suite (PHP): $succeeded of $reported checks SUCCEEDED against the PHP module"
[ "$succeeded" = 0 ]
