#!/usr/bin/env bash
# The Python module (bindings/python/tokenlock.py) and counter.py attacked
# by a hostile local user (docs/security.md), with the two real accounts of
# setup.sh, once per backend of the module:
#   attacks_python.sh TOKENLOCK COUNTER_CGI RACER [LIBTOKENLOCK_C]
# Without LIBTOKENLOCK_C (a build without the shared C library) only the
# command backend is attacked, and the set-up runs both users on it.
# py5a-e: unbounded and blocking reads (the attacker's link to /dev/zero,
# FIFO, oversized counter, and a racer swapping them), against the module
# and counter.py; py9: a group the victim is merely in. Each prints one
# line, "attack pyN (backend): refused (...)" or "... SUCCEEDED (...)"; the
# documented group set-up through the module prints "setup (Python): ..."
# lines ("works" or "FAILS"). The suite exits 1 when any attack succeeded
# or the set-up failed.
#
# Needs root (the accounts tl_victim and tl_attacker, the group tl_share)
# and /usr/bin/python3; skipped (77) otherwise. Everything lives in one
# directory under /tmp, removed at the end (setup.sh).
set -uo pipefail
if [ $# -ne 3 ] && [ $# -ne 4 ]; then
  echo "usage: attacks_python.sh TOKENLOCK COUNTER_CGI RACER [LIBTOKENLOCK_C]" >&2
  exit 64
fi
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: the security suite needs root, to create the accounts tl_victim and tl_attacker (run ctest -L security as root)"
  exit 77
fi
for tool in setpriv useradd userdel groupadd groupdel mkfifo timeout stat /usr/bin/python3; do
  command -v "$tool" >/dev/null ||
    { echo "SKIP: $tool is not installed (util-linux, passwd, coreutils, python3)"; exit 77; }
done
tries=${TL_SECURITY_TRIES:-100}
race_seconds=${TL_SECURITY_RACE_SECONDS:-15}
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
# shellcheck source=tests/security/setup.sh
. "$here/setup.sh"

# The module, counter.py, the library and a victim's driver where both
# accounts can read them (root's build tree may not be reachable).
make_python_world() {
  py=$work/py
  mkdir -m 0755 "$py"
  if ! cp -L "$src/bindings/python/tokenlock.py" "$src/cgi-examples/python/counter.py" "$py/" ||
    { [ -n "$1" ] && ! cp "$1" "$work/bin/libtokenlock_c.so"; }; then
    echo "FAIL: cannot copy the module, counter.py or $1 to $work" >&2
    exit 1
  fi
  write_victim_driver >"$py/victim.py"
  chmod 0644 "$py"/*.py
  [ -z "$1" ] || chmod 0644 "$work/bin/libtokenlock_c.so"
  chmod 0755 "$py/counter.py"
}

# victim.py OP PATH [ARG]: one call of the module; prints "ok VALUE" or
# "error CODE ERRNO MESSAGE" (one line). OP "reads" calls read_counter ARG
# times and prints how each ended, "ok 5: 40, EINVAL: 30"; "update-lock"
# updates PATH under the lock directory ARG; "incrs" increments ARG times,
# and stops at the first error.
write_victim_driver() {
  cat <<'PY'
import collections, errno, sys
import tokenlock
op, path = sys.argv[1], sys.argv[2]
def outcome(call):
    try:
        return "ok %s" % (call(),)
    except tokenlock.Error as e:
        return "error %s %d %s" % (e.code, e.errno or 0, str(e).replace("\n", " "))
calls = {
    "read": lambda: tokenlock.read_counter(path),
    "incr": lambda: tokenlock.increment(path, wait=2),
    "update": lambda: len(tokenlock.update_file(path, lambda old: b"victim data\n", wait=2)),
    "update-lock": lambda: len(tokenlock.update_file(path, lambda old: b"victim data\n",
                                                     lock=sys.argv[3], wait=2)),
    "incrs": lambda: [tokenlock.increment(path, wait=10) for _ in range(int(sys.argv[3]))][-1],
}
if op == "reads":
    seen = collections.Counter()
    for _ in range(int(sys.argv[3])):
        words = outcome(calls["read"]).split()
        key = "ok " + words[1] if words[0] == "ok" else errno.errorcode.get(int(words[2]), words[1])
        seen[key] += 1
    print(", ".join("%s: %d" % kv for kv in sorted(seen.items())))
else:
    print(outcome(calls[op]))
PY
}

# Runs victim.py as the victim with backend $1 (and VAR=VALUE words before
# its arguments in its environment), under 1 GB of address space and a
# timeout of 20 s: "$s.out" its line, "$s.rusage" "SIGNAL EXIT maxrss_kb"
# (racer rusage); returns its exit status.
as_python_victim() {
  python_as victim "$@"
}

# The same as the account $1 (victim or attacker).
python_as() {
  local who=$1 backend=$2 env=()
  shift 2
  while [ $# -gt 0 ] && [[ $1 == *=* ]]; do env+=("$1"); shift; done
  local -n account=as_$who
  timeout -k 2 20 "${account[@]}" env -i PATH=/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1 \
    PYTHONPATH="$py" TOKENLOCK_BACKEND="$backend" TOKENLOCK_LIBRARY="$work/bin/libtokenlock_c.so" \
    TOKENLOCK_COMMAND="$tl" ${env[@]+"${env[@]}"} bash -c 'ulimit -v 1000000; exec "$@"' sh \
    "$racer" rusage "$s.rusage" /usr/bin/python3 "$py/victim.py" "$@" >"$s.out" 2>"$s.err"
}

# The verdict on one refused call: $1 what, $2 the errno names accepted
# (regex). Appends to `problems`; the output line goes to `detail`.
judge_refusal() {
  local what=$1 accepted=$2 rc=$3 sig rss
  read -r sig _ rss 2>/dev/null <"$s.rusage" || { sig=timeout rss=0; }
  if [ "$rc" = 124 ] || [ "$rc" = 137 ] || [ "$sig" != 0 ]; then
    problems="$problems $what still blocked or killed after 20 s (exit $rc, signal $sig, $rss KB);"
  elif [ "$rss" -gt 100000 ]; then
    problems="$problems $what used $rss KB: $(first_line "$s.out")$(first_line "$s.err");"
  elif ! grep -Eq "^error ($accepted) " "$s.out"; then
    problems="$problems $what was not refused with $accepted: $(first_line "$s.out")$(tail -1 "$s.err");"
  fi
  detail="$rss KB at most; $(cut -c1-160 "$s.out" | head -1)"
}

# py5a: read_counter, increment and update_file on the attacker's link to
# /dev/zero: refused at once (ELOOP, the link is not followed), with little
# memory; the link left, the lock free.
attack_py5a() {
  local backend=$1 s=$work/scratch/py5a-$1 target=$sticky/z-$1.count problems="" detail="" op
  "${as_attacker[@]}" ln -s /dev/zero "$target"
  for op in read incr update; do
    as_python_victim "$backend" "$op" "$target"
    judge_refusal "$op on a link to /dev/zero" "system 40" $?
  done
  [ "$(readlink "$target")" = /dev/zero ] || problems="$problems the link was changed: $(ls -l "$target");"
  [ ! -e "$target.lock" ] || lock_free "$target.lock" || problems="$problems the lock is not free;"
  report "attack py5a ($backend)" "$problems" "$detail"
}

# py5b: the same on the attacker's FIFO, and on her link to it: refused
# without blocking (EINVAL for the FIFO, ELOOP for the link).
attack_py5b() {
  local backend=$1 s=$work/scratch/py5b-$1 problems="" detail="" op name rc
  "${as_attacker[@]}" mkfifo -m 0666 "$sticky/f-$backend.count"
  "${as_attacker[@]}" ln -s "$sticky/f-$backend.count" "$sticky/l-$backend.count"
  for name in f l; do
    for op in read incr update; do
      as_python_victim "$backend" "$op" "$sticky/$name-$backend.count"
      rc=$?
      judge_refusal "$op on $name-$backend.count ($(stat -c %F "$sticky/$name-$backend.count"))" \
        "system (22|40)" "$rc"
    done
    [ ! -e "$sticky/$name-$backend.count.lock" ] || lock_free "$sticky/$name-$backend.count.lock" ||
      problems="$problems the lock of $name-$backend.count is not free;"
  done
  [ -p "$sticky/f-$backend.count" ] || problems="$problems the FIFO was replaced;"
  report "attack py5b ($backend)" "$problems" "$detail"
}

# py5c: counter.py (a hit, and peek=1) on the attacker's FIFO and on her
# link to /dev/zero: a 5xx status at once, the path in the log.
attack_py5c() {
  local backend=$1 s=$work/scratch/py5c-$1 problems="" rc name query
  "${as_attacker[@]}" mkfifo -m 0666 "$sticky/cf-$backend.count"
  "${as_attacker[@]}" ln -s /dev/zero "$sticky/cz-$backend.count"
  for name in cf cz; do
    for query in "id=$name-$backend&peek=1" "id=$name-$backend"; do
      timeout -k 2 10 "${as_victim[@]}" env -i REQUEST_METHOD=GET QUERY_STRING="$query" \
        TOKENLOCK_COUNTER_DIR="$sticky" TOKENLOCK_BACKEND="$backend" PYTHONDONTWRITEBYTECODE=1 \
        TOKENLOCK_LIBRARY="$work/bin/libtokenlock_c.so" TOKENLOCK_COMMAND="$tl" \
        bash -c 'ulimit -v 1000000; exec "$@"' sh /usr/bin/python3 "$py/counter.py" >"$s.out" 2>"$s.err"
      rc=$?
      if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        problems="$problems counter.py?$query still blocked after 10 s;"
      elif ! grep -q '^Status: 5' "$s.out" || ! grep -q "$name-$backend.count" "$s.err"; then
        problems="$problems counter.py?$query answered $(head -1 "$s.out" | tr -d '\r'), log: $(tail -1 "$s.err");"
      fi
    done
  done
  report "attack py5c ($backend)" "$problems" "counter.py: $(head -1 "$s.out" | tr -d '\r'), log: $(first_line "$s.err")"
}

# py5d: the attacker's oversized counters, 65 bytes and 2 GiB (sparse):
# corrupt_data without reading them, with little memory; left as they are.
attack_py5d() {
  local backend=$1 s=$work/scratch/py5d-$1 problems="" detail="" op name size
  for size in 65 2147483648; do
    name=$sticky/big$size-$backend.count
    # shellcheck disable=SC2016 # expanded by the attacker's shell
    "${as_attacker[@]}" sh -c 'printf "%064d\n" 1 >"$1"; truncate -s "$2" "$1"' sh "$name" "$size"
    for op in read incr; do
      as_python_victim "$backend" "$op" "$name"
      judge_refusal "$op on a counter of $size bytes" "corrupt_data 0" $?
    done
    [ "$(stat -c %s:%U "$name")" = "$size:tl_attacker" ] || problems="$problems $name changed: $(stat -c %s:%U "$name");"
  done
  report "attack py5d ($backend)" "$problems" "$detail"
}

# py5e: the attacker swaps the counter's name among a FIFO, a link to
# /dev/zero and a counter holding 5 (rename(2) in a loop) while the victim
# reads it 300 times: every read is 5 or refused (EINVAL, ELOOP), none
# blocks or runs out of memory.
attack_py5e() {
  local backend=$1 s=$work/scratch/py5e-$1 target=$sticky/race-$1.count problems="" racer_pid rc
  rm -f "$s.ready"
  "${as_attacker[@]}" /usr/bin/python3 -c '
import os, sys, time
target, ready = sys.argv[1], sys.argv[2]
tmp = target + ".racer"
for i in range(3000000):
    if i % 3 == 0:
        os.mkfifo(tmp, 0o666)
    elif i % 3 == 1:
        os.symlink("/dev/zero", tmp)
    else:
        with open(tmp, "w") as f:
            f.write("5\n")
    os.rename(tmp, target)
    if i == 2:
        open(ready, "w").close()
' "$target" "$s.ready" 2>"$s.racer" &
  racer_pid=$!
  started_pids+=("$racer_pid")
  wait_for_file "$s.ready" || problems="the racer did not start: $(head -1 "$s.racer");"
  as_python_victim "$backend" reads "$target" 300
  rc=$?
  kill "$racer_pid" 2>/dev/null
  wait "$racer_pid" 2>/dev/null
  local sig rss
  read -r sig _ rss 2>/dev/null <"$s.rusage" || { sig=timeout rss=0; }
  if [ "$rc" = 124 ] || [ "$rc" = 137 ] || [ "$sig" != 0 ]; then
    problems="$problems 300 reads still blocked or killed after 20 s (exit $rc, signal $sig, $rss KB);"
  elif [ "$rss" -gt 100000 ]; then
    problems="$problems 300 reads used $rss KB: $(first_line "$s.out")$(tail -1 "$s.err");"
  elif ! grep -Eq '^((ok 5|EINVAL|ELOOP): [0-9]+(, |$))+$' "$s.out"; then
    problems="$problems a read ended otherwise: $(first_line "$s.out")$(tail -1 "$s.err");"
  fi
  report "attack py5e ($backend)" "$problems" "300 reads in the race, $rss KB at most: $(first_line "$s.out")"
}

# py9: attack 9 against the module. The attacker shares only tl_share (as
# every account shares `users`) with the victim, who chose group write for
# her own lock directories (TOKENLOCK_DIR_MODE=0775) but named no group.
# The attacker plants the lock directory and its workspace in tl_share and
# renames her file onto the update's temporary file as soon as it appears:
# the victim's update_file must be refused (untrusted), her file intact.
attack_py9() {
  local backend=$1 lock=$sticky/cfg-$1.lock target=$home/data/cfg-$1 s=$work/scratch/py9-$1
  local try rc racer_pid problems="" detail="no try ran" start=$SECONDS
  echo "victim config" >"$target" && chown tl_victim: "$target" && chmod 0644 "$target"
  # shellcheck disable=SC2016 # expanded by the attacker's shell
  "${as_attacker[@]}" sh -c 'umask 002; mkdir -p "$1/lockfile/w" && chgrp -R tl_share "$1" &&
    echo "ATTACKER DATA" >"$2"' sh "$lock" "$sticky/attacker9-$backend.src"
  for ((try = 1; try <= tries && SECONDS - start < race_seconds; try++)); do
    rm -f "$s.ready"
    "${as_attacker[@]}" "$racer" swap-temp "$lock/lockfile/w" ".cfg-$backend.tmp." \
      "$sticky/attacker9-$backend.src" "$s.ready" 10000 >"$s.racer" 2>&1 &
    racer_pid=$!
    wait_for_file "$s.ready" || { problems="the racer did not start: $(head -1 "$s.racer")"; break; }
    as_python_victim "$backend" TOKENLOCK_DIR_MODE=0775 update-lock "$target" "$lock"
    rc=$?
    kill "$racer_pid" 2>/dev/null
    wait "$racer_pid" 2>/dev/null
    if [ "$(cat "$target")" != "victim config" ] || [ "$(stat -c %U "$target")" != tl_victim ]; then
      problems="try $try: cfg now holds '$(head -c 20 "$target")', owner $(stat -c %U "$target") (exit $rc: $(first_line "$s.out"))"
      break
    fi
    if ! grep -q '^error untrusted ' "$s.out" || ! refusal_explained "$s.out" "$attacker_uid"; then
      problems="try $try: update_file in the attacker's lock directory of group tl_share was not refused naming uid $attacker_uid: $(first_line "$s.out")$(tail -1 "$s.err")"
      break
    fi
    detail="$try tries, cfg and its owner intact: $(cut -c1-200 "$s.out")"
  done
  report "attack py9 ($backend)" "$problems" "$detail"
}

# The documented group set-up through the module: the victim (library
# backend, the group option) and the other user (command backend,
# TOKENLOCK_GROUP) count one counter in a 2770 tl_share directory at once;
# a group-writable lock directory of the other user's, its group not named,
# is refused to the victim with either backend.
python_group_setup() {
  local data=$work/py-group-data s=$work/scratch/pygroup problems="" p1 p2 backend how
  mkdir -m 2770 "$data" && chgrp tl_share "$data"
  s=$work/scratch/pygroup-victim
  python_as victim "$library_backend" TOKENLOCK_GROUP=tl_share incrs "$data/c.count" 50 &
  p1=$!
  s=$work/scratch/pygroup-other
  python_as attacker command TOKENLOCK_GROUP=tl_share incrs "$data/c.count" 50 &
  p2=$!
  wait "$p1" || problems="the victim's increments failed: $(first_line "$work/scratch/pygroup-victim.out");"
  wait "$p2" || problems="$problems the other user's failed: $(first_line "$work/scratch/pygroup-other.out");"
  [ "$(cat "$data/c.count" 2>/dev/null)" = 100 ] ||
    problems="$problems the counter holds '$(cat "$data/c.count" 2>/dev/null)', not 100 ($(first_line "$work/scratch/pygroup-victim.out") / $(first_line "$work/scratch/pygroup-other.out"));"
  report_setup "setup (Python): two users naming their group count one counter in a 2770 group directory" \
    "$problems" "100 increments, count exact"
  problems="" s=$work/scratch/pygroup
  # shellcheck disable=SC2016 # expanded by the attacker's shell
  "${as_attacker[@]}" sh -c 'umask 002; mkdir -m 0775 "$1" "$1/lockfile"' sh "$data/d.count.lock"
  for backend in "${backends[@]}"; do
    for how in TOKENLOCK_BACKEND=$backend TOKENLOCK_DIR_MODE=0775; do
      as_python_victim "$backend" "$how" incr "$data/d.count"
      grep -q '^error untrusted ' "$s.out" && refusal_explained "$s.out" "$attacker_uid" ||
        problems="$problems $backend, $how: $(first_line "$s.out")$(tail -1 "$s.err");"
    done
  done
  [ ! -e "$data/d.count" ] || problems="$problems d.count was written: $(cat "$data/d.count")"
  report "setup (Python): a group-writable lock directory of another user, its group not named" \
    "$problems" "refused: $(cut -c1-200 "$s.out")"
}

make_world "$1" "$2" "$3"
make_python_world "${4:-}"
backends=(library command) library_backend=library
if [ -z "${4:-}" ]; then
  echo "skip the library backend: no libtokenlock_c.so was given (TOKENLOCK_C_SHARED is OFF)"
  backends=(command) library_backend=command
fi
for backend in "${backends[@]}"; do
  for attack in py5a py5b py5c py5d py5e py9; do
    "attack_$attack" "$backend"
    canaries_checked "attack $attack ($backend)"
  done
done
python_group_setup
echo "security suite (Python): $succeeded of $reported checks SUCCEEDED against tokenlock.py"
[ "$succeeded" = 0 ]
