# Attacks on the data (sourced by attacks.sh): 2 a planted workspace, 4 writes through another user's link, 5 unbounded or blocking reads.

# 2: the attacker pre-creates the lock's workspace `w` (mode 0777) and
# renames her own file onto the updater's temporary file as soon as it
# appears. Odd tries run incr, even ones write --lock.
attack_2() {
  local lock=$sticky/c2.count.lock s=$work/scratch/two start=$SECONDS count=5
  local try rc racer_pid problems="" unrefused="" detail="no try ran" target prefix want
  echo $count >"$sticky/c2.count" && echo "victim data" >"$sticky/d2.txt"
  chown tl_victim: "$sticky/c2.count" "$sticky/d2.txt" && chmod 0644 "$sticky/c2.count" "$sticky/d2.txt"
  for ((try = 1; try <= tries && SECONDS - start < race_seconds; try++)); do
    "${as_attacker[@]}" sh -c 'umask 0; [ -e "$1" ] || mkdir -p "$1/lockfile/w"; [ ! -d "$1/lockfile" ] || mkdir -p "$1/lockfile/w"
      echo 999999 >"$2"' sh "$lock" "$sticky/attacker.src"
    if ((try % 2)); then target=$sticky/c2.count prefix=.c2.count.tmp.; else target=$sticky/d2.txt prefix=.d2.txt.tmp.; fi
    rm -f "$s.ready"
    "${as_attacker[@]}" "$racer" swap-temp "$lock/lockfile/w" "$prefix" "$sticky/attacker.src" "$s.ready" 10000 >"$s.racer" 2>&1 &
    racer_pid=$!
    wait_for_file "$s.ready" || { problems="the racer did not start: $(head -1 "$s.racer")"; break; }
    if ((try % 2)); then
      "${as_victim[@]}" "$tl" incr "$target" >/dev/null 2>"$s.err"
      rc=$?
      [ "$rc" = 0 ] && count=$((count + 1))
      want=$count
    else
      echo "victim data" | "${as_victim[@]}" "$tl" write --lock "$lock" "$target" 2>"$s.err"
      rc=$?
      want="victim data"
    fi
    kill "$racer_pid" 2>/dev/null
    wait "$racer_pid" 2>/dev/null
    if [ "$(cat "$target")" != "$want" ] || [ "$(stat -c %U "$target")" != tl_victim ]; then
      problems="try $try: $(basename "$target") now holds '$(head -c 20 "$target")', owner $(stat -c %U "$target"), mode $(stat -c %a "$target") (victim's command exited $rc)"
      break
    fi
    if [ "$rc" != 77 ]; then
      # Not refused, but the race not won yet: the next try may win it.
      [ -n "$unrefused" ] ||
        unrefused="the victim's update in the attacker's lock directory (mode 0777) exited $rc, not 77 (the race was not won in $try tries): $(first_line "$s.err")"
    elif ! refusal_explained "$s.err" "$attacker_uid"; then
      problems="exit 77 without 'refusing' and uid $attacker_uid: $(first_line "$s.err")"
      break
    fi
    detail="$try tries, data and owner intact: $(first_line "$s.err")"
  done
  report "attack 2" "${problems:-$unrefused}" "$detail"
}

# 4: root writes with --mode 0600 onto a link the attacker made in a
# sticky directory, to her own file or to a setuid-root program.
root_write_through_link() {
  local label=$1 to=$2 follow=$3 out=$sticky/out4 s=$work/scratch/four problems="" rc f mode
  rm -f "$out" "$sticky/att4"
  "${as_attacker[@]}" sh -c 'umask 0; echo attacker >"$1"' sh "$sticky/att4"
  cp /bin/true "$work/suid/prog" && chmod 4755 "$work/suid/prog"
  "${as_attacker[@]}" ln -s "$to" "$out"
  # shellcheck disable=SC2086 # $follow is one option or none
  echo "root secret" | "$tl" write --mode 0600 $follow "$out" 2>"$s.err"
  rc=$?
  for f in "$out" "$sticky/att4" "$work/suid/prog"; do
    "${as_attacker[@]}" cat "$f" 2>/dev/null | grep -q "root secret" && problems="$problems the attacker reads root's data in $f;"
    [ -L "$f" ] || ! grep -q "root secret" "$f" 2>/dev/null && continue
    mode=$(stat -c %a "$f")
    [ "$mode" = 600 ] || problems="$problems root's data is in $f with mode $mode, not 600;"
    [ "$(stat -c %U "$f")" = root ] || problems="$problems root's data is in $f owned by $(stat -c %U "$f");"
  done
  cmp -s /bin/true "$work/suid/prog" || problems="$problems the setuid program was replaced;"
  if [ "$rc" != 0 ] && { [ "$rc" != 77 ] || ! grep -q refusing "$s.err"; }; then
    problems="$problems write exited $rc (neither done nor refused): $(first_line "$s.err")"
  fi
  report "attack 4$label" "$problems" "write --mode 0600 $follow exited $rc: $(first_line "$s.err")"
}

attack_4() {
  mkdir -m 0755 "$work/suid"
  root_write_through_link a "$sticky/att4" ""
  root_write_through_link b "$work/suid/prog" ""
  root_write_through_link c "$sticky/att4" --follow-symlinks
  root_write_through_link d "$work/suid/prog" --follow-symlinks
}

# 5a: incr on the attacker's link to /dev/zero, under 200 MB of address
# space and a timeout: refused at once, with little memory.
endless_counter() {
  local s=$work/scratch/five problems="" rc sig code rss vlimit=200000 asan=${ASAN_OPTIONS:-}
  # AddressSanitizer reserves terabytes of address space: in such a build
  # its own limit on the resident size stands in for the address space's.
  if grep -aq __asan_init "$tl"; then
    vlimit=unlimited asan=${asan:+$asan:}hard_rss_limit_mb=200
  fi
  "${as_attacker[@]}" ln -s /dev/zero "$sticky/z5.count"
  rm -f "$s.rusage"
  timeout -k 2 20 "${as_victim[@]}" env ASAN_OPTIONS="$asan" \
    bash -c 'ulimit -v "$1"; exec "$2" rusage "$3" "$4" incr "$5"' sh \
    "$vlimit" "$racer" "$s.rusage" "$tl" "$sticky/z5.count" >/dev/null 2>"$s.err"
  rc=$?
  read -r sig code rss 2>/dev/null <"$s.rusage" || { sig=timeout code=$rc rss=0; }
  if [ "$sig" != 0 ] || [ "$code" -lt 1 ] || [ "$code" = 70 ] || [ "$code" -gt 77 ] ||
    grep -Eqi 'memory|bad_alloc|rss limit' "$s.err"; then
    # Killed, succeeded, or out of memory: the read had no bound.
    problems="incr on a link to /dev/zero: signal $sig, exit $code, $rss KB at most: $(first_line "$s.err")"
  elif [ "$rss" -gt 100000 ]; then
    problems="incr on a link to /dev/zero used $rss KB (exit $code)"
  fi
  lock_free "$sticky/z5.count.lock" || problems="$problems; the lock is not free afterwards"
  report "attack 5a" "$problems" "exit $code with $rss KB at most: $(first_line "$s.err")"
}

# 5b: incr on the attacker's FIFO, and on her link to a FIFO: must not
# block, and the lock is free afterwards.
fifo_counter() {
  local s=$work/scratch/fiveb problems="" rc name
  "${as_attacker[@]}" mkfifo -m 0666 "$sticky/f5.count"
  "${as_attacker[@]}" ln -s "$sticky/f5.count" "$sticky/l5.count"
  for name in f5 l5; do
    timeout -k 2 10 "${as_victim[@]}" "$tl" incr "$sticky/$name.count" >/dev/null 2>"$s.err"
    rc=$?
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      problems="$problems incr on $name.count ($(stat -c %F "$sticky/$name.count")) still blocked after 10 s;"
    elif [ "$rc" = 0 ]; then
      problems="$problems incr on $name.count ($(stat -c %F "$sticky/$name.count")) succeeded;"
    fi
    lock_free "$sticky/$name.count.lock" ||
      problems="$problems the lock is not free: $("${as_victim[@]}" "$tl" status "$sticky/$name.count.lock" 2>&1 | head -1);"
  done
  report "attack 5b" "$problems" "exit $rc at once on a link to a FIFO: $(first_line "$s.err")"
}

# 5c: counter.cgi with peek=1 on the attacker's FIFO.
fifo_cgi() {
  local s=$work/scratch/fivec problems="" rc
  "${as_attacker[@]}" mkfifo -m 0666 "$sticky/fc.count"
  timeout -k 2 10 "${as_victim[@]}" \
    env -i REQUEST_METHOD=GET QUERY_STRING='id=fc&peek=1' TOKENLOCK_COUNTER_DIR="$sticky" \
    "$cgi" >"$s.out" 2>"$s.err"
  rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    problems="counter.cgi?id=fc&peek=1 on a FIFO still blocked after 10 s"
  elif ! grep -q '^Status: 5' "$s.out"; then
    problems="counter.cgi answered $(head -1 "$s.out" | tr -d '\r') to a FIFO, not a 5xx status"
  fi
  report "attack 5c" "$problems" "counter.cgi: $(head -1 "$s.out" | tr -d '\r'), log: $(first_line "$s.err")"
}

attack_5() {
  endless_counter
  fifo_counter
  fifo_cgi
}
