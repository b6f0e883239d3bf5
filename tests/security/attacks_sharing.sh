# Attacks through what locks share (sourced by attacks.sh): 9 a group the
# victim is merely in, 10 the wait board beside the lock.

# 9: the attacker shares only one group with the victim (tl_share stands
# for `users`, which a host gives every account). The victim chose group
# write for its own lock directories (TOKENLOCK_DIR_MODE=0775) but named
# no group. The attacker plants the lock directory with its workspace in
# that group and renames her own file onto the updater's temporary file as
# soon as it appears; the victim's `write --lock` must be refused.
attack_9() {
  local lock=$sticky/cfg.lock target=$home/data/cfg s=$work/scratch/nine start=$SECONDS
  local try rc racer_pid problems="" detail="no try ran"
  echo "victim config" >"$target" && chown tl_victim: "$target" && chmod 0644 "$target"
  "${as_attacker[@]}" sh -c 'umask 002; mkdir -p "$1/lockfile/w" && chgrp -R tl_share "$1" &&
    echo "ATTACKER DATA" >"$2"' sh "$lock" "$sticky/attacker9.src"
  for ((try = 1; try <= tries && SECONDS - start < race_seconds; try++)); do
    rm -f "$s.ready"
    "${as_attacker[@]}" "$racer" swap-temp "$lock/lockfile/w" .cfg.tmp. "$sticky/attacker9.src" "$s.ready" 10000 >"$s.racer" 2>&1 &
    racer_pid=$!
    wait_for_file "$s.ready" || { problems="the racer did not start: $(head -1 "$s.racer")"; break; }
    echo "victim config" | "${as_victim[@]}" env TOKENLOCK_DIR_MODE=0775 "$tl" write --lock "$lock" "$target" 2>"$s.err"
    rc=$?
    kill "$racer_pid" 2>/dev/null
    wait "$racer_pid" 2>/dev/null
    if [ "$(cat "$target")" != "victim config" ] || [ "$(stat -c %U "$target")" != tl_victim ]; then
      problems="try $try: cfg now holds '$(head -c 20 "$target")', owner $(stat -c %U "$target") (write exited $rc)"
      break
    fi
    if [ "$rc" != 77 ]; then
      problems="try $try: write --lock in the attacker's lock directory of group tl_share exited $rc, not 77: $(first_line "$s.err")"
      break
    fi
    refusal_explained "$s.err" "$attacker_uid" ||
      { problems="exit 77 without 'refusing' and uid $attacker_uid: $(first_line "$s.err")"; break; }
    detail="$try tries, cfg and its owner intact: $(first_line "$s.err")"
  done
  report "attack 9" "$problems" "$detail"
}

# 10: where hard links to other users' files are allowed
# (fs.protected_hardlinks=0), the attacker links a file of the victim's at
# the wait board's name beside the victim's lock. A waiter of the victim's
# must neither extend nor write that file.
attack_10() {
  local lock=$sticky/l10.lock notes=$home/data/notes s=$work/scratch/ten problems="" before
  local protect
  protect=$(cat /proc/sys/fs/protected_hardlinks 2>/dev/null)
  if ! echo 0 >/proc/sys/fs/protected_hardlinks 2>/dev/null; then
    echo "attack 10: skipped (fs.protected_hardlinks cannot be set to 0 here)"
    return
  fi
  printf 'victim notes\n' >"$notes" && chown tl_victim: "$notes" && chmod 0644 "$notes"
  before=$(sha256sum <"$notes")
  "${as_attacker[@]}" ln "$notes" "$lock.wait" 2>"$s.ln" ||
    problems="the attacker could not link the victim's file: $(first_line "$s.ln")"
  echo "$protect" >/proc/sys/fs/protected_hardlinks
  if [ -z "$problems" ]; then
    if start_holder "$lock" 60 ten ""; then
      "${as_victim[@]}" "$tl" run -w 0.3 "$lock" true 2>"$s.err"
      [ $? = 1 ] || problems="the waiter did not time out on the held lock: $(first_line "$s.err");"
    else
      problems="the victim's holder did not start: $(first_line "$s.err");"
    fi
    stop_holder ten
  fi
  [ "$(sha256sum <"$notes")" = "$before" ] ||
    problems="$problems the victim's notes changed: $(stat -c %s "$notes") bytes, starting '$(head -c 16 "$notes" | od -An -c | tr -s ' ')'"
  report "attack 10" "$problems" "the linked file was left as it was ($(stat -c %s "$notes") bytes)"
}
