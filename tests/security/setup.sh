# The accounts, the work area and the helpers of attacks.sh (sourced).

created_users=()
created_group=""
work=""
reported=0
succeeded=0
# Processes the suite started and must stop (by pid) before it ends.
started_pids=()

cleanup() {
  local p
  for p in ${started_pids[@]+"${started_pids[@]}"}; do kill -KILL "$p" 2>/dev/null; done
  for p in ${started_pids[@]+"${started_pids[@]}"}; do wait "$p" 2>/dev/null; done
  [ -n "$work" ] && rm -rf "$work"
  for p in ${created_users[@]+"${created_users[@]}"}; do userdel "$p" 2>/dev/null; done
  [ -n "$created_group" ] && groupdel "$created_group" 2>/dev/null
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# An account for the attacks: made (and removed at the end) unless a
# previous run left it; never root.
ensure_user() {
  local name=$1
  if ! id -u "$name" >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin --groups tl_share "$name" ||
      { echo "FAIL: cannot create the account $name" >&2; exit 1; }
    created_users+=("$name")
  else
    usermod -a -G tl_share "$name"
  fi
  if [ "$(id -u "$name")" = 0 ]; then
    echo "FAIL: the account $name exists with uid 0" >&2
    exit 1
  fi
}

make_accounts() {
  if ! getent group tl_share >/dev/null; then
    groupadd --system tl_share || { echo "FAIL: cannot create the group tl_share" >&2; exit 1; }
    created_group=tl_share
  fi
  ensure_user tl_victim
  ensure_user tl_attacker
  attacker_uid=$(id -u tl_attacker)
}

# Commands to run as either account; setpriv execs the command, so $! of
# one run in the background is the command's pid.
as_victim=(setpriv --reuid=tl_victim --regid=tl_victim --init-groups --)
as_attacker=(setpriv --reuid=tl_attacker --regid=tl_attacker --init-groups --)

# The binaries are copied where both accounts can run them (a build
# directory under /root is not reachable).
make_world() {
  make_accounts
  work=$(mktemp -d /tmp/tokenlock-security.XXXXXX)
  chmod 0755 "$work"
  mkdir -m 0755 "$work/bin"
  cp "$1" "$work/bin/tokenlock" && cp "$2" "$work/bin/counter.cgi" && cp "$3" "$work/bin/racer" ||
    { echo "FAIL: cannot copy the binaries to $work/bin" >&2; exit 1; }
  chmod 0755 "$work/bin"/*
  tl=$work/bin/tokenlock cgi=$work/bin/counter.cgi racer=$work/bin/racer
  sticky=$work/sticky shared=$work/shared home=$work/victim rootdir=$work/rootdir
  mkdir "$sticky" "$shared" "$home" "$rootdir" "$work/scratch"
  chmod 1777 "$sticky" && chmod 0777 "$shared" "$work/scratch"
  # Where both accounts share locks by group, as docs/security.md sets up.
  group_locks=$work/group-locks
  mkdir -m 2770 "$group_locks" && chgrp tl_share "$group_locks"
  plant_canaries "$home" tl_victim
  plant_canaries "$rootdir" root
  mkdir -m 0755 "$home/locks" "$home/data"
  chown tl_victim: "$home/locks" "$home/data"
  make_stale_token
}

# Canary files an attack must not touch: a file at the top, and files in
# two subdirectories the attacker can name (a home's docs/ and .ssh/).
plant_canaries() {
  local dir=$1 owner=$2 f
  mkdir -p "$dir/docs/deep" "$dir/.ssh"
  for f in top.txt docs/a.txt docs/deep/b.txt .ssh/id_ed25519; do
    echo "canary $f of $owner" >"$dir/$f"
  done
  chmod 0755 "$dir"
  chmod 0700 "$dir/.ssh"
  chown -R "$owner:" "$dir"
}

# Prints what is missing or changed among the canaries of `dir`.
canaries_damage() {
  local dir=$1 owner=$2 f
  for f in top.txt docs/a.txt docs/deep/b.txt .ssh/id_ed25519; do
    if [ ! -f "$dir/$f" ] || [ -L "$dir/$f" ]; then
      printf '%s ' "$dir/$f gone"
    elif [ "$(cat "$dir/$f")" != "canary $f of $owner" ] ||
      [ "$(stat -c %U "$dir/$f")" != "$owner" ]; then
      printf '%s ' "$dir/$f changed"
    fi
  done
}

# After attack $1: any damage to the canaries counts as its success, and
# they are planted again for the next one.
canaries_checked() {
  local damage
  damage="$(canaries_damage "$home" tl_victim)$(canaries_damage "$rootdir" root)"
  [ -z "$damage" ] && return 0
  report "$1" "canaries damaged: $damage" ""
  plant_canaries "$home" tl_victim
  plant_canaries "$rootdir" root
}

# A held token of the attacker's whose owner is dead: stale on this host.
# Made with the command in a private directory of the attacker's, so that
# its name is one the protocol accepts. Sets stale_token.
make_stale_token() {
  local private=$work/attacker-private owner
  mkdir -m 0755 "$private" && chown tl_attacker: "$private"
  "${as_attacker[@]}" sleep 600 &
  owner=$!
  started_pids+=("$owner")
  stale_token=$("${as_attacker[@]}" "$tl" acquire -n --pid "$owner" "$private/l")
  kill -KILL "$owner"
  wait "$owner" 2>/dev/null
  case $stale_token in
    lockfile.*) ;;
    *) echo "FAIL: the attacker's acquire printed no token: '$stale_token'" >&2; exit 1 ;;
  esac
}

# Waits (bounded, 10 s) until a file appears; 1 if it did not.
wait_for_file() {
  local i
  for ((i = 0; i < 1000; i++)); do
    [ -e "$1" ] && return 0
    sleep 0.01
  done
  return 1
}

# Whether pid $1 is a live process (not a zombie waiting to be reaped).
alive() {
  [ -r "/proc/$1/stat" ] || return 1
  local state
  state=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

# Whether a message file says why it refused: "refusing" and the uid of
# the owner it distrusts.
refusal_explained() {
  grep -q refusing "$1" && grep -Eq "(^|[^0-9])$2([^0-9]|$)" "$1"
}

# The lock at $1 is free: `status` says so.
lock_free() {
  [ "$("${as_victim[@]}" "$tl" status "$1" 2>/dev/null | head -1)" = free ]
}

# Records one verdict: report NAME "" DETAIL (refused) or report NAME
# "reasons" (succeeded).
report() {
  local name=$1 problems=$2 detail=$3
  reported=$((reported + 1))
  if [ -z "$problems" ]; then
    echo "$name: refused ($detail)"
  else
    succeeded=$((succeeded + 1))
    echo "$name: SUCCEEDED ($problems)"
  fi
}

# The set-up must work: a failure of it counts like a succeeded attack.
report_setup() {
  local name=$1 problems=$2 detail=$3
  reported=$((reported + 1))
  if [ -z "$problems" ]; then
    echo "$name: works ($detail)"
  else
    succeeded=$((succeeded + 1))
    echo "$name: FAILS ($problems)"
  fi
}

# The first line of a message, for a verdict line.
first_line() { head -c 300 "$1" | head -1 | tr -d '\000-\010\013-\037\177'; }
