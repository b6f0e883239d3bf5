# Attacks on the lock itself (sourced by attacks.sh): 1 clearing a taken-over
# workspace, 3 a second holder, 6 the creation sweep, 7 run killed, 8 the rest.

# The attacker's lock directory at $1 (mode $2) holding a stale token of
# hers with 20,000 empty files and the subdirectories a home has; made
# again only when a previous try changed it.
fill_stale_lock() {
  local lock=$1 mode=$2 tok=$1/$stale_token
  if [ -d "$tok" ] && [ ! -L "$tok" ] && [ "$(ls -A "$lock")" = "$stale_token" ] &&
    [ "$(ls -U -A "$tok" | wc -l)" = 20002 ]; then
    return 0
  fi
  rm -rf "$lock"
  "${as_attacker[@]}" sh -c 'umask 0; mkdir -m "$2" "$1" "$1/$3" && chgrp tl_share "$1" "$1/$3" &&
    cd "$1/$3" && seq -f f%05.0f 1 20000 | xargs touch &&
    mkdir -m "$2" docs .ssh && mkdir -m "$2" docs/deep' sh "$lock" "$mode" "$stale_token" ||
    { echo "FAIL: the attacker cannot fill $lock" >&2; exit 1; }
}

# One race of attack 1: the victim ($2: tl_victim or root) takes over the
# stale token with `run -n`; the attacker's racer renames the victim's
# token away as soon as it appears and links the name to $3.
clearing_race() {
  local label=$1 who=$2 target=$3 owner=$4 mode=$5 dir_env=$6 parent=$7
  local lock=$parent/$label.lock s=$work/scratch/$label start=$SECONDS
  local try rc racer_pid problems="" unrefused="" damage detail="no try ran"
  plant_canaries "$target" "$owner"
  # The race's time counts from the first lock made: making 20,000 files
  # takes seconds on a loaded host.
  fill_stale_lock "$lock" "$mode"
  start=$SECONDS
  for ((try = 1; try <= tries && SECONDS - start < race_seconds; try++)); do
    fill_stale_lock "$lock" "$mode"
    rm -f "$s.ready"
    "${as_attacker[@]}" "$racer" swap-token "$lock" "$stale_token" "$target" "$s.ready" 10000 >"$s.racer" &
    racer_pid=$!
    wait_for_file "$s.ready" || { problems="the racer did not start"; break; }
    # shellcheck disable=SC2086 # $dir_env is one assignment or none
    if [ "$who" = root ]; then
      env $dir_env "$tl" run -n "$lock" true 2>"$s.err"
    else
      "${as_victim[@]}" env $dir_env "$tl" run -n "$lock" true 2>"$s.err"
    fi
    rc=$?
    kill "$racer_pid" 2>/dev/null
    wait "$racer_pid" 2>/dev/null
    damage=$(canaries_damage "$target" "$owner")
    if [ -n "$damage" ]; then
      problems="try $try: run -n as $who exited $rc after the racer swapped $(head -1 "$s.racer") for a link to $target: $damage"
      break
    fi
    if [ "$rc" = 77 ] && ! refusal_explained "$s.err" "$attacker_uid"; then
      problems="exit 77 without 'refusing' and uid $attacker_uid: $(first_line "$s.err")"
      break
    fi
    # Not refused, but the race not won yet: the next try may win it.
    [ "$mode" = 0777 ] && [ "$rc" != 77 ] && [ -z "$unrefused" ] &&
      unrefused="run -n as $who exited $rc in a lock directory of mode 0777, not 77 (the race was not won in $try tries)"
    detail="$try tries in ${race_seconds}s at most, canaries intact, last exit $rc: $(first_line "$s.err")"
  done
  report "attack 1$label" "${problems:-$unrefused}" "$detail"
}

attack_1() {
  clearing_race a tl_victim "$home" tl_victim 0777 "" "$sticky"
  clearing_race b root "$rootdir" root 0777 "" "$sticky"
  # The group named for sharing: the directory is trusted, so only walking by
  # descriptor keeps the victim's files safe.
  clearing_race c tl_victim "$home" tl_victim 2770 TOKENLOCK_GROUP=tl_share "$group_locks"
}

# A holder run by the victim (with the environment assignment $4, if
# any) whose command waits on a FIFO until stop_holder; sets holder_pid.
# 1 when `run` ended without starting it.
start_holder() {
  local lock=$1 lease=$2 s=$work/scratch/$3 i
  rm -f "$s.started" "$s.fifo"
  mkfifo -m 0666 "$s.fifo"
  "${as_victim[@]}" env ${4:+"$4"} "$tl" run --lease "$lease" "$lock" sh -c 'touch "$1.started"; read -r x <"$1.fifo"' sh "$s" \
    >/dev/null 2>"$s.err" &
  holder_pid=$!
  started_pids+=("$holder_pid")
  for ((i = 0; i < 1000; i++)); do
    [ -e "$s.started" ] && return 0
    alive "$holder_pid" || return 1
    sleep 0.01
  done
  return 1
}

# Lets the holder's command end; sets holder_rc.
stop_holder() {
  local s=$work/scratch/$1
  [ -e "$s.started" ] && timeout 10 sh -c 'echo end >"$1"' sh "$s.fifo"
  wait "$holder_pid"
  holder_rc=$?
}

# 3: a lease longer than the protocol's bound let a second holder in.
huge_lease_run() {
  local lock=$home/locks/l3a problems="" rc
  if start_holder "$lock" 90000 l3a; then
    "${as_victim[@]}" "$tl" run -n "$lock" echo SECOND >"$work/scratch/l3a.out" 2>&1
    rc=$?
    [ "$rc" = 0 ] && grep -q SECOND "$work/scratch/l3a.out" &&
      problems="run --lease 90000 holds the lock and run -n ran echo SECOND beside it (exit 0)"
    stop_holder l3a
    [ -z "$problems" ] && problems="run --lease 90000 was accepted (exit $holder_rc), not 64"
  else
    stop_holder l3a
    [ "$holder_rc" = 64 ] || problems="run --lease 90000 exited $holder_rc, not 64"
  fi
  report "attack 3a" "$problems" "run --lease 90000 exits 64: $(first_line "$work/scratch/l3a.err")"
}

# acquire (or refresh, $2) with a year's lease; then whether run -n gets in.
huge_lease_token() {
  local label=$1 how=$2 lock=$home/locks/l$1 s=$work/scratch/l$1 problems="" rc tok
  if [ "$how" = acquire ]; then
    tok=$("${as_victim[@]}" "$tl" acquire -n --lease 31536000 --pid "$lease_owner" "$lock" 2>"$s.err")
    rc=$?
  else
    tok=$("${as_victim[@]}" "$tl" acquire -n --lease 60 --pid "$lease_owner" "$lock" 2>"$s.err") ||
      { report "attack $label" "acquire --lease 60 failed: $(first_line "$s.err")" ""; return; }
    local new
    new=$("${as_victim[@]}" "$tl" refresh --lease 31536000 "$lock" "$tok" 2>"$s.err")
    rc=$?
    [ "$rc" = 0 ] && tok=$new
  fi
  if [ "$rc" = 0 ]; then
    problems="$how --lease 31536000 was accepted (exit 0, not 64)"
    "${as_victim[@]}" "$tl" run -n "$lock" echo SECOND >"$s.out" 2>&1 && grep -q SECOND "$s.out" &&
      problems="$problems and run -n ran echo SECOND while it was held"
  elif [ "$rc" != 64 ]; then
    problems="$how --lease 31536000 exited $rc, not 64"
  elif [ "$how" = refresh ] && ! "${as_victim[@]}" "$tl" status "$lock" | grep -q '^held'; then
    problems="after the refused refresh the lock is no longer held"
  fi
  "${as_victim[@]}" "$tl" release "$lock" "$tok" >/dev/null 2>&1
  report "attack $label" "$problems" "$how --lease 31536000 exits 64: $(first_line "$s.err")"
}

# The largest lease allowed keeps others out.
largest_lease_holds() {
  local lock=$home/locks/l3d problems="" rc
  if start_holder "$lock" 86400 l3d; then
    "${as_victim[@]}" "$tl" run -n "$lock" echo SECOND >"$work/scratch/l3d.out" 2>&1
    rc=$?
    { [ "$rc" = 1 ] && ! grep -q SECOND "$work/scratch/l3d.out"; } ||
      problems="run -n beside a holder with --lease 86400 exited $rc: $(head -1 "$work/scratch/l3d.out")"
    stop_holder l3d
    [ "$holder_rc" = 0 ] || problems="$problems; the holder with --lease 86400 exited $holder_rc"
  else
    stop_holder l3d
    problems="run --lease 86400 did not start its command (exit $holder_rc): $(first_line "$work/scratch/l3d.err")"
  fi
  report "attack 3d" "$problems" "a holder with --lease 86400 keeps run -n out (exit 1)"
}

attack_3() {
  "${as_victim[@]}" sleep 600 &
  lease_owner=$!
  started_pids+=("$lease_owner")
  huge_lease_run
  huge_lease_token 3b acquire
  huge_lease_token 3c refresh
  largest_lease_holds
}

# 6: the creation sweep beside D follows a link named like a leftover of
# a dead creator to another lock of the victim's.
attack_6() {
  local other=$home/locks/other lock=$shared/six s=$work/scratch/six problems="" rc
  local planted=$shared/six.init.${stale_token#lockfile.}
  "${as_victim[@]}" "$tl" run "$other" true || { report "attack 6" "cannot make the victim's other lock" ""; return; }
  "${as_attacker[@]}" ln -s "$other" "$planted"
  "${as_victim[@]}" "$tl" run -n "$lock" true 2>"$s.err"
  rc=$?
  [ -d "$other/lockfile" ] || problems="run -n $lock (exit $rc) removed $other/lockfile through the link $planted"
  if ! "${as_victim[@]}" "$tl" run -n "$other" true 2>"$s.err2"; then
    problems="$problems; the other lock then fails: $(first_line "$s.err2")"
  fi
  [ -L "$planted" ] || problems="$problems; the attacker's link was touched"
  report "attack 6" "$problems" "run -n exited $rc; $other still has its token and works"
}

# 7: kill -9 of `tokenlock run` left its command running, unlocked.
attack_7() {
  local lock=$home/locks/l7 s=$work/scratch/seven problems="" run_pid cmd_pid rc i
  rm -f "$s.pid"
  "${as_victim[@]}" "$tl" run "$lock" sh -c 'echo $$ >"$1.tmp" && mv "$1.tmp" "$1" && exec sleep 300' sh "$s.pid" &
  run_pid=$!
  started_pids+=("$run_pid")
  wait_for_file "$s.pid" || { report "attack 7" "run did not start its command" ""; return; }
  cmd_pid=$(cat "$s.pid")
  started_pids+=("$cmd_pid")
  kill -KILL "$run_pid"
  wait "$run_pid" 2>/dev/null
  # The command is stopped, or the lock stays held while it lives: polled
  # for 5 s, the time a parent-death signal may take on a loaded host.
  for ((i = 0; i < 50; i++)); do
    alive "$cmd_pid" || break
    "${as_victim[@]}" "$tl" run -n "$lock" echo SECOND >"$s.out" 2>&1
    rc=$?
    if [ "$rc" = 0 ] && alive "$cmd_pid"; then
      problems="after kill -9 of run, its command (pid $cmd_pid) still runs and run -n got the lock"
      break
    fi
    sleep 0.1
  done
  local how="the lock stayed held while the command lived (run -n exited ${rc:-none})"
  alive "$cmd_pid" || how="its command was stopped"
  kill -KILL "$cmd_pid" 2>/dev/null
  report "attack 7" "$problems" "after kill -9 of run, $how"
}

# What a refused update must leave: $1 holding $2, no temporary file under
# the victim's data directory, the lock $3 free.
left_intact() {
  local file=$1 want=$2 lock=$3 temps
  [ "$(cat "$file")" = "$want" ] || printf '%s ' "$file now holds '$(head -c 40 "$file")', not '$want';"
  temps=$(find "$home/data" -name '*.tmp.*' | head -3 | tr '\n' ' ')
  [ -z "$temps" ] || printf '%s ' "temporary files left: $temps;"
  lock_free "$lock" || printf '%s ' "the lock $lock is not free: $("${as_victim[@]}" "$tl" status "$lock" 2>&1 | head -1);"
}

# 8a: RLIMIT_FSIZE on incr and write: exit 73, nothing left behind.
file_size_limit() {
  local data=$home/data s=$work/scratch/eight problems="" rc
  echo 41 >"$data/c8.count" && echo old >"$data/w8.txt" && chown tl_victim: "$data/c8.count" "$data/w8.txt"
  # In a subshell whose stderr is dropped: the shell that sees SIGXFSZ
  # kill a job says so on its own stderr.
  ("${as_victim[@]}" bash -c 'ulimit -f 0; exec "$1" incr "$2"' sh "$tl" "$data/c8.count" \
    >/dev/null 2>"$s.err"; exit $?) 2>/dev/null
  rc=$?
  [ "$rc" = 73 ] || problems="incr under ulimit -f 0 exited $rc, not 73: $(first_line "$s.err");"
  problems="$problems$(left_intact "$data/c8.count" 41 "$data/c8.count.lock")"
  (head -c 4000 /dev/zero | tr '\0' x |
    "${as_victim[@]}" bash -c 'ulimit -f 1; exec "$1" write --lock "$2" "$3"' sh "$tl" "$data/w8.lock" \
      "$data/w8.txt" 2>"$s.err2"; exit $?) 2>/dev/null
  rc=$?
  [ "$rc" = 73 ] || problems="$problems write --lock of 4000 bytes under ulimit -f 1 exited $rc, not 73: $(first_line "$s.err2");"
  problems="$problems$(left_intact "$data/w8.txt" old "$data/w8.lock")"
  report "attack 8a" "$problems" "exit 73 with: $(first_line "$s.err"), data, lock and directory as they were"
}

# 8b: the attacker's empty D in a sticky directory made run wait forever.
sticky_empty_dir() {
  local lock=$sticky/d8 s=$work/scratch/eightb problems="" rc
  "${as_attacker[@]}" mkdir "$lock"
  timeout -k 2 10 "${as_victim[@]}" "$tl" run "$lock" true 2>"$s.err"
  rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    problems="run $lock was still waiting after 10 s (killed by timeout)"
  elif [ "$rc" != 77 ]; then
    problems="run $lock exited $rc, not 77: $(first_line "$s.err")"
  elif ! refusal_explained "$s.err" "$attacker_uid"; then
    problems="exit 77 without 'refusing' and uid $attacker_uid: $(first_line "$s.err")"
  fi
  [ "$(stat -c %U "$lock")" = tl_attacker ] && [ -z "$(ls -A "$lock")" ] ||
    problems="$problems; the attacker's directory was changed"
  report "attack 8b" "$problems" "exit 77 at once: $(first_line "$s.err")"
}

# 8c: leases too small to be one: all usage errors.
tiny_leases() {
  local lock=$home/locks/l8c problems="" rc lease cmd
  for lease in 1e-9 0 -1 0.0001; do
    for cmd in run acquire; do
      if [ "$cmd" = run ]; then
        "${as_victim[@]}" "$tl" run --lease "$lease" "$lock" echo RAN >"$work/scratch/l8c.out" 2>&1
      else
        "${as_victim[@]}" "$tl" acquire -n --lease "$lease" --pid $$ "$lock" >"$work/scratch/l8c.out" 2>&1
      fi
      rc=$?
      [ "$rc" = 64 ] || problems="$problems $cmd --lease $lease exited $rc, not 64;"
    done
  done
  lock_free "$lock" || [ ! -e "$lock" ] || problems="$problems the lock is not free afterwards"
  report "attack 8c" "$problems" "run and acquire with --lease 1e-9, 0, -1 and 0.0001 exit 64"
}

# 8d: names from the filesystem reach the terminal with their control
# bytes. The attacker shares the lock by group (chosen by the victim), and
# plants a token name with an escape sequence.
control_bytes() {
  local lock=$group_locks/ctl s=$work/scratch/ctl problems="" rc out
  "${as_attacker[@]}" sh -c 'umask 0; mkdir -m 2770 "$1" && chgrp tl_share "$1" &&
    mkdir -m 2770 "$1/$(printf "lockfile.\033]0;pwned\007\033[2J")"' sh "$lock"
  "${as_victim[@]}" env TOKENLOCK_GROUP=tl_share "$tl" run -n "$lock" true >"$s.out" 2>"$s.err"
  rc=$?
  "${as_victim[@]}" env TOKENLOCK_GROUP=tl_share "$tl" status "$lock" >>"$s.out" 2>>"$s.err"
  for out in "$s.out" "$s.err"; do
    tr -d '\n' <"$out" | LC_ALL=C grep -q '[[:cntrl:]]' &&
      problems="$problems $(basename "$out") carries raw control bytes: $(od -c "$out" | head -2 | tr -s ' ' | tr '\n' ' ');"
  done
  [ "$rc" != 0 ] || problems="$problems run -n exited 0 in a lock with a malformed token;"
  grep -qi -e '\\x1b' -e refusing "$s.err" || problems="$problems the name is not shown escaped (\\x1b): $(first_line "$s.err");"
  report "attack 8d" "$problems" "run -n exited $rc: $(first_line "$s.err")"
}

# 8h: a release that fails for another reason than a lost lock: the
# group member who owns the lock directory takes its write permission
# away while the victim's command runs. run must not exit 0.
failed_release() {
  local lock=$group_locks/rel s=$work/scratch/rel problems=""
  "${as_attacker[@]}" sh -c 'mkdir -m 2770 "$1" "$1/lockfile"' sh "$lock"
  if start_holder "$lock" 60 rel TOKENLOCK_GROUP=tl_share; then
    "${as_attacker[@]}" chmod 2550 "$lock"
    stop_holder rel
    [ "$holder_rc" != 0 ] || problems="run exited 0 although its release failed (lock directory made read-only)"
    [ "$holder_rc" != 0 ] && ! [ -s "$s.err" ] && problems="run exited $holder_rc and said nothing"
    [ -e "$lock/lockfile" ] && problems="the release did not fail: the attack did not take place"
  else
    stop_holder rel
    problems="run in the group-shared lock did not start its command (exit $holder_rc): $(first_line "$s.err")"
  fi
  chmod 2770 "$lock"
  report "attack 8h" "$problems" "run exited $holder_rc: $(first_line "$s.err")"
}

attack_8() {
  file_size_limit
  sticky_empty_dir
  tiny_leases
  control_bytes
  failed_release
}

# The documented group set-up across two real users: a data directory
# of mode 2770 in a group both are in; each increments one counter naming
# that group (one by --group, one by TOKENLOCK_GROUP), and the count is
# exact. A lock directory of the other user's is refused when the group is
# not named: group write in one's own dir_mode (TOKENLOCK_DIR_MODE=0775)
# shares only one's own lock directories.
group_shared_setup() {
  local data=$work/group-data s=$work/scratch/group problems="" rc p1 p2
  mkdir -m 2770 "$data" && chgrp tl_share "$data"
  "${as_victim[@]}" sh -c 'umask 002; i=0; while [ $i -lt 50 ]; do
      "$1" incr --group tl_share "$2" >/dev/null || exit 1; i=$((i + 1)); done' sh "$tl" "$data/c.count" \
    2>"$s.victim" &
  p1=$!
  "${as_attacker[@]}" env TOKENLOCK_GROUP=tl_share sh -c 'umask 002; i=0; while [ $i -lt 50 ]; do
      "$1" incr "$2" >/dev/null || exit 1; i=$((i + 1)); done' sh "$tl" "$data/c.count" \
    2>"$s.other" &
  p2=$!
  wait "$p1" || problems="the victim's increments failed: $(first_line "$s.victim");"
  wait "$p2" || problems="$problems the other user's increments failed: $(first_line "$s.other");"
  [ "$(cat "$data/c.count" 2>/dev/null)" = 100 ] ||
    problems="$problems the counter holds '$(cat "$data/c.count" 2>/dev/null)', not 100;"
  report_setup "setup: two users naming their group increment one counter in a 2770 group directory" \
    "$problems" "100 increments, count exact"
  problems=""
  "${as_attacker[@]}" sh -c 'umask 002; mkdir -m 0775 "$1" "$1/lockfile"' sh "$data/d.count.lock"
  for how in "" TOKENLOCK_DIR_MODE=0775; do
    # shellcheck disable=SC2086 # $how is one assignment or none
    "${as_victim[@]}" env $how "$tl" incr "$data/d.count" >/dev/null 2>"$s.err"
    rc=$?
    if [ "$rc" != 77 ]; then
      problems="$problems incr ${how:-with no group sharing} in the other user's lock directory of mode $(stat -c %a "$data/d.count.lock") exited $rc, not 77;"
    elif ! refusal_explained "$s.err" "$attacker_uid"; then
      problems="$problems exit 77 without 'refusing' and uid $attacker_uid: $(first_line "$s.err");"
    fi
  done
  [ ! -e "$data/d.count" ] || problems="$problems d.count was written: $(cat "$data/d.count")"
  report "setup: a group-writable lock directory of another user, its group not named" \
    "$problems" "exit 77: $(first_line "$s.err")"
}
