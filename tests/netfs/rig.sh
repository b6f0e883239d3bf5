#!/usr/bin/env bash
# A private network filesystem share with two client mounts, on this machine
# only: sshfs, GlusterFS or MooseFS.
#
# Sourced by netfs_test.sh; run directly to get a shell on a share:
#   tests/netfs/rig.sh sshfs|glusterfs|glusterfs-nocache|moosefs [CMD [ARGS...]]
# runs CMD (default: $SHELL) with RIG_M1 and RIG_M2 in its environment and
# tears everything down when it ends.
#
#   rig_require FS        0 when this machine can run FS; otherwise 1 with
#                         the reason in RIG_SKIP_REASON (not root, no FUSE,
#                         no network namespaces, a missing program)
#   rig_start FS WORK     starts the servers and mounts the share twice:
#                         RIG_M1 with the client's default caching, RIG_M2
#                         with its caching off. WORK: an empty directory.
#                         Returns 1 (reason on stderr) when something did
#                         not come up; call rig_stop in any case.
#   rig_stop              unmounts and stops everything rig_start started,
#                         by pid, and removes the network namespace.
#                         Idempotent; call it from an EXIT trap.
#
# FS glusterfs-nocache is GlusterFS with the volume options
# performance.stat-prefetch and performance.open-behind off.
# RIG_GLUSTER_M1_OPTIONS adds glusterfs client options to the first mount
# (for experiments: "--entry-timeout=0 --attribute-timeout=0").
#
# Network: sshd listens on 127.0.0.1 (a free port). GlusterFS refuses bricks
# on 127.0.0.1 and the MooseFS master refuses chunkservers from there, so
# their daemons and clients run in a network namespace made here
# (tlnetfs<pid>), address 10.213.0.1/32 on its loopback, entered with
# `nsenter --net` only (`ip netns exec` would also give a private mount
# namespace and hide the mounts). Every daemon runs in the foreground as a
# child of this shell or writes a pid file; nothing is ever stopped by name.

RIG_ADDR=10.213.0.1
RIG_NS=
RIG_NS_CREATED=0
RIG_M1=
RIG_M2=
RIG_WORK=
RIG_FS=
RIG_GLUSTER_SOCK=
RIG_GLUSTER_VOL=
RIG_GLUSTER_STARTED=0
RIG_MOUNTS=()   # "mountpoint client-pid"
RIG_DAEMONS=()  # "pid name": all sent SIGTERM at once, then waited for
RIG_LOGS=()     # shown when something does not come up

rig_log() { echo "rig: $*" >&2; }

# A pid counts as gone when /proc has no entry for it or shows a zombie
# (init reaps late here) or a dead task.
rig_pid_gone() {
  local st
  st=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  st=${st##*) }
  case ${st%% *} in Z | X | x) return 0 ;; esac
  return 1
}

# rig_wait_gone PID SECONDS: polls until PID is gone; 1 when it is not.
rig_wait_gone() {
  local pid=$1 deadline=$((SECONDS + $2))
  while ! rig_pid_gone "$pid"; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.02
  done
  wait "$pid" 2>/dev/null || true  # reaps it when it is our child
  return 0
}

# rig_stop_pid PID NAME: SIGTERM, then SIGKILL if it does not end.
rig_stop_pid() {
  local pid=$1 name=$2
  rig_pid_gone "$pid" && { wait "$pid" 2>/dev/null || true; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  rig_wait_gone "$pid" 20 && return 0
  rig_log "$name (pid $pid) ignored SIGTERM for 20 s; SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  rig_wait_gone "$pid" 10 || rig_log "$name (pid $pid) is still there"
}

# rig_until SECONDS CMD...: polls CMD until it succeeds (0); 1 on timeout
# or when CMD returns 2 (it gave up: the daemon died).
rig_until() {
  local deadline=$((SECONDS + $1)) rc
  shift
  while :; do
    "$@"
    rc=$?
    [ $rc = 0 ] && return 0
    [ $rc = 2 ] && return 1
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.05
  done
}

rig_port_is_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# [19000, 20000): below the kernel's range for outgoing connections, and
# apart from the web servers' ports (tests/e2e/webserver.sh) and the C++
# tests' servers (tests/support/ports.hpp), which may run beside this.
rig_pick_port() {
  local p=$((19000 + RANDOM % 900))
  while ! rig_port_is_free "$p"; do p=$((p + 1)); done
  echo "$p"
}

# For commands started in the background: not through a function, whose
# subshell would own $! instead of the daemon.
rig_in_ns() { nsenter --net="/run/netns/$RIG_NS" "$@"; }

rig_ns_port_open() { rig_in_ns bash -c "exec 3<>/dev/tcp/$RIG_ADDR/$1" 2>/dev/null; }

rig_missing_programs() {
  local p missing=()
  for p in "$@"; do command -v "$p" >/dev/null 2>&1 || missing+=("$p"); done
  echo "${missing[*]}"
}

rig_require() {
  local fs=$1 progs missing
  RIG_SKIP_REASON=
  if [ "$(id -u)" -ne 0 ]; then
    RIG_SKIP_REASON="needs root (daemons, mounts, network namespaces)"
    return 1
  fi
  if [ ! -c /dev/fuse ] || ! (exec 3<>/dev/fuse) 2>/dev/null; then
    RIG_SKIP_REASON="/dev/fuse is missing or cannot be opened"
    return 1
  fi
  progs="mountpoint umount nsenter unshare ip perl"
  case $fs in
    sshfs) progs="$progs sshfs ssh ssh-keygen /usr/sbin/sshd" ;;
    glusterfs | glusterfs-nocache) progs="$progs glusterd gluster glusterfs" ;;
    moosefs) progs="$progs mfsmaster mfschunkserver mfsmount" ;;
    *)
      RIG_SKIP_REASON="unknown filesystem '$fs'"
      return 1
      ;;
  esac
  # shellcheck disable=SC2086
  missing=$(rig_missing_programs $progs)
  if [ -n "$missing" ]; then
    RIG_SKIP_REASON="missing programs: $missing (scripts/install-deps installs them)"
    return 1
  fi
  if ! perl -MTime::HiRes -e 1 2>/dev/null; then
    RIG_SKIP_REASON="perl's Time::HiRes is missing (package perl)"
    return 1
  fi
  if [ "$fs" = moosefs ] && [ ! -f /var/lib/mfs/metadata.mfs.empty ]; then
    RIG_SKIP_REASON="/var/lib/mfs/metadata.mfs.empty is missing (package moosefs-master)"
    return 1
  fi
  if [ "$fs" = moosefs ] && ! id mfs >/dev/null 2>&1; then
    RIG_SKIP_REASON="no user mfs (package moosefs-master)"
    return 1
  fi
  if [ "$fs" != sshfs ]; then
    local probe=tlnetfsprobe$$
    if ! ip netns add "$probe" 2>/dev/null; then
      RIG_SKIP_REASON="cannot create a network namespace (ip netns add)"
      return 1
    fi
    ip netns del "$probe" 2>/dev/null || true
  fi
  return 0
}

rig_make_ns() {
  RIG_NS=tlnetfs$$
  ip netns add "$RIG_NS" || { rig_log "ip netns add $RIG_NS failed"; return 1; }
  RIG_NS_CREATED=1
  rig_in_ns ip link set lo up &&
    rig_in_ns ip addr add "$RIG_ADDR/32" dev lo || { rig_log "cannot set up lo in $RIG_NS"; return 1; }
}

# rig_mount_client MOUNTPOINT LOG CMD...: starts a FUSE client in the
# foreground (as our child) and waits until the mount is there.
rig_mount_client() {
  local mnt=$1 log=$2 pid
  shift 2
  mkdir -p "$mnt"
  "$@" >"$log" 2>&1 </dev/null &
  pid=$!
  RIG_MOUNTS+=("$mnt $pid")
  RIG_LOGS+=("$log")
  local deadline=$((SECONDS + 30))
  until mountpoint -q "$mnt"; do
    if rig_pid_gone "$pid"; then
      rig_log "the client for $mnt exited"
      return 1
    fi
    [ $SECONDS -lt $deadline ] || { rig_log "$mnt not mounted after 30 s"; return 1; }
    sleep 0.02
  done
}

# The two mounts show one share: a file written through one reads back
# through the other (MooseFS: also proves the chunkserver has registered).
rig_check_share() {
  local probe=.rig-probe.$$ deadline=$((SECONDS + 40))
  until timeout 10 sh -c "echo shared >'$RIG_M1/$probe'" 2>/dev/null &&
    [ "$(cat "$RIG_M2/$probe" 2>/dev/null)" = shared ]; do
    [ $SECONDS -lt $deadline ] || { rig_log "a file written to $RIG_M1 does not show in $RIG_M2"; return 1; }
    sleep 0.1
  done
  rm -f "$RIG_M1/$probe"
  local t=$((SECONDS + 10))
  while [ -e "$RIG_M2/$probe" ]; do
    [ $SECONDS -lt $t ] || { rig_log "a file removed in $RIG_M1 stays in $RIG_M2"; return 1; }
    sleep 0.05
  done
}

rig_start_sshfs() {
  local w=$RIG_WORK port
  mkdir -p "$w/export" "$w/ssh" /run/sshd
  chmod 0700 "$w/ssh"
  ssh-keygen -q -t ed25519 -N '' -f "$w/ssh/host_key" </dev/null || return 1
  ssh-keygen -q -t ed25519 -N '' -f "$w/ssh/id" </dev/null || return 1
  cp "$w/ssh/id.pub" "$w/ssh/authorized_keys"
  port=$(rig_pick_port)
  cat >"$w/ssh/sshd_config" <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey $w/ssh/host_key
PidFile $w/ssh/sshd.pid
AuthorizedKeysFile $w/ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
Subsystem sftp internal-sftp
EOF
  /usr/sbin/sshd -D -f "$w/ssh/sshd_config" -E "$w/ssh/sshd.log" </dev/null &
  RIG_DAEMONS+=("$! sshd")
  RIG_LOGS+=("$w/ssh/sshd.log")
  local sshd_pid=$! deadline=$((SECONDS + 20))
  until ! rig_port_is_free "$port"; do
    rig_pid_gone "$sshd_pid" && { rig_log "sshd exited"; return 1; }
    [ $SECONDS -lt $deadline ] || { rig_log "sshd not listening after 20 s"; return 1; }
    sleep 0.02
  done
  # sshfs starts ssh detached from itself; the wrapper records its pid.
  cat >"$w/ssh/ssh-wrapper" <<EOF
#!/bin/sh
echo \$\$ >>"$w/ssh/ssh-client.pids"
exec ssh "\$@"
EOF
  chmod 0755 "$w/ssh/ssh-wrapper"
  local common="IdentityFile=$w/ssh/id,StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,BatchMode=yes,LogLevel=ERROR,ssh_command=$w/ssh/ssh-wrapper"
  RIG_M1=$w/m1 RIG_M2=$w/m2
  rig_mount_client "$RIG_M1" "$w/sshfs1.log" sshfs -f "root@127.0.0.1:$w/export" "$RIG_M1" -p "$port" \
    -o "$common" || return 1
  rig_mount_client "$RIG_M2" "$w/sshfs2.log" sshfs -f "root@127.0.0.1:$w/export" "$RIG_M2" -p "$port" \
    -o "$common,dir_cache=no" || return 1
}

rig_gluster() {
  gluster --mode=script --glusterd-sock="$RIG_GLUSTER_SOCK" --log-file="$RIG_WORK/gluster/logs/cli.log" "$@"
}

rig_glusterd_ready() {  # PID
  rig_pid_gone "$1" && return 2
  rig_gluster volume list >/dev/null 2>&1
}

rig_start_glusterfs() {
  local w=$RIG_WORK v=tl$$
  rig_make_ns || return 1
  mkdir -p "$w/gluster/wd" "$w/gluster/run" "$w/gluster/logs" "$w/gluster/brick"
  RIG_GLUSTER_SOCK=$w/gluster/gd.sock
  cat >"$w/gluster/glusterd.vol" <<EOF
volume management
    type mgmt/glusterd
    option working-directory $w/gluster/wd
    option run-directory $w/gluster/run
    option glusterd-sockfile $RIG_GLUSTER_SOCK
    option transport-type socket
    option transport.socket.listen-address $RIG_ADDR
    option ping-timeout 0
    option event-threads 1
end-volume
EOF
  nsenter --net="/run/netns/$RIG_NS" glusterd -N -f "$w/gluster/glusterd.vol" -p "$w/gluster/glusterd.pid" \
    -l "$w/gluster/logs/glusterd.log" </dev/null >"$w/gluster/logs/glusterd.out" 2>&1 &
  local gd=$!
  RIG_DAEMONS+=("$gd glusterd")
  RIG_LOGS+=("$w/gluster/logs/glusterd.log")
  rig_until 30 rig_glusterd_ready "$gd" ||
    { rig_log "glusterd does not answer"; return 1; }
  RIG_GLUSTER_VOL=$v
  rig_gluster volume create "$v" "$RIG_ADDR:$w/gluster/brick" force >"$w/gluster/logs/cli.out" 2>&1 ||
    { cat "$w/gluster/logs/cli.out" >&2; return 1; }
  if [ "$RIG_FS" = glusterfs-nocache ]; then
    rig_gluster volume set "$v" performance.stat-prefetch off >>"$w/gluster/logs/cli.out" 2>&1 &&
      rig_gluster volume set "$v" performance.open-behind off >>"$w/gluster/logs/cli.out" 2>&1 ||
      { cat "$w/gluster/logs/cli.out" >&2; return 1; }
  fi
  rig_gluster volume start "$v" >>"$w/gluster/logs/cli.out" 2>&1 || { cat "$w/gluster/logs/cli.out" >&2; return 1; }
  RIG_GLUSTER_STARTED=1
  RIG_M1=$w/m1 RIG_M2=$w/m2
  rig_mount_client "$RIG_M1" "$w/gluster/logs/client1.out" nsenter --net="/run/netns/$RIG_NS" glusterfs -N \
    --volfile-server="$RIG_ADDR" --volfile-id="$v" --pid-file="$w/gluster/client1.pid" \
    --log-file="$w/gluster/logs/client1.log" ${RIG_GLUSTER_M1_OPTIONS:-} "$RIG_M1" || return 1
  rig_mount_client "$RIG_M2" "$w/gluster/logs/client2.out" nsenter --net="/run/netns/$RIG_NS" glusterfs -N \
    --volfile-server="$RIG_ADDR" --volfile-id="$v" --pid-file="$w/gluster/client2.pid" \
    --log-file="$w/gluster/logs/client2.log" \
    --attribute-timeout=0 --entry-timeout=0 --negative-timeout=0 "$RIG_M2" || return 1
  RIG_LOGS+=("$w/gluster/logs/client1.log" "$w/gluster/logs/client2.log")
}

rig_mfsmaster_ready() {  # PID
  rig_pid_gone "$1" && return 2
  rig_ns_port_open 9421
}

rig_start_moosefs() {
  local w=$RIG_WORK
  rig_make_ns || return 1
  local m=$w/mfs
  mkdir -p "$m/master" "$m/cs" "$m/chunks"
  cp /var/lib/mfs/metadata.mfs.empty "$m/master/metadata.mfs"
  echo "* / rw,alldirs,admin,maproot=0:0" >"$m/exports.cfg"
  : >"$m/topology.cfg"
  echo "$m/chunks" >"$m/hdd.cfg"
  chown -R mfs "$m/master" "$m/cs" "$m/chunks"
  chmod 0755 "$w" "$m"
  cat >"$m/master.cfg" <<EOF
WORKING_USER = mfs
DATA_PATH = $m/master
EXPORTS_FILENAME = $m/exports.cfg
TOPOLOGY_FILENAME = $m/topology.cfg
MATOCS_LISTEN_HOST = $RIG_ADDR
MATOCL_LISTEN_HOST = $RIG_ADDR
MATOML_LISTEN_HOST = $RIG_ADDR
EOF
  cat >"$m/chunkserver.cfg" <<EOF
WORKING_USER = mfs
DATA_PATH = $m/cs
HDD_CONF_FILENAME = $m/hdd.cfg
MASTER_HOST = $RIG_ADDR
BIND_HOST = $RIG_ADDR
CSSERV_LISTEN_HOST = $RIG_ADDR
EOF
  nsenter --net="/run/netns/$RIG_NS" mfsmaster -f -c "$m/master.cfg" start </dev/null >"$m/master.log" 2>&1 &
  local mp=$!
  RIG_DAEMONS+=("$mp mfsmaster")
  RIG_LOGS+=("$m/master.log")
  rig_until 30 rig_mfsmaster_ready "$mp" ||
    { rig_log "mfsmaster does not listen"; return 1; }
  nsenter --net="/run/netns/$RIG_NS" mfschunkserver -f -c "$m/chunkserver.cfg" start </dev/null >"$m/chunkserver.log" 2>&1 &
  RIG_DAEMONS+=("$! mfschunkserver")
  RIG_LOGS+=("$m/chunkserver.log")
  RIG_M1=$w/m1 RIG_M2=$w/m2
  rig_mount_client "$RIG_M1" "$m/client1.log" nsenter --net="/run/netns/$RIG_NS" mfsmount -f "$RIG_M1" -H "$RIG_ADDR" || return 1
  rig_mount_client "$RIG_M2" "$m/client2.log" nsenter --net="/run/netns/$RIG_NS" mfsmount -f "$RIG_M2" -H "$RIG_ADDR" \
    -o mfscachemode=DIRECT,mfsattrcacheto=0,mfsdirentrycacheto=0 || return 1
}

rig_start() {
  RIG_FS=$1 RIG_WORK=$2
  local ok=0
  case $RIG_FS in
    sshfs) rig_start_sshfs && ok=1 ;;
    glusterfs | glusterfs-nocache) rig_start_glusterfs && ok=1 ;;
    moosefs) rig_start_moosefs && ok=1 ;;
    *) rig_log "unknown filesystem $RIG_FS" ;;
  esac
  [ $ok = 1 ] && rig_check_share && return 0
  local l
  for l in "${RIG_LOGS[@]}"; do
    [ -s "$l" ] || continue
    echo "--- $l (last lines):" >&2
    tail -15 "$l" >&2
  done
  return 1
}

rig_stop() {
  local i entry mnt pid f
  # Mounts first: a client ends when its mount goes. All are asked first,
  # then waited for, so that their shutdowns overlap.
  for ((i = ${#RIG_MOUNTS[@]} - 1; i >= 0; i--)); do
    mnt=${RIG_MOUNTS[i]% *}
    if mountpoint -q "$mnt"; then
      umount "$mnt" 2>/dev/null || {
        rig_log "$mnt is busy; lazy unmount"
        umount -l "$mnt" || true
      }
    fi
  done
  for entry in "${RIG_MOUNTS[@]}"; do
    pid=${entry##* }
    rig_wait_gone "$pid" 15 || rig_stop_pid "$pid" "client of ${entry% *}"
  done
  RIG_MOUNTS=()
  if [ -n "$RIG_WORK" ] && [ -f "$RIG_WORK/ssh/ssh-client.pids" ]; then
    while read -r pid; do rig_wait_gone "$pid" 10 || rig_stop_pid "$pid" "ssh client"; done \
      <"$RIG_WORK/ssh/ssh-client.pids"
    rm -f "$RIG_WORK/ssh/ssh-client.pids"
  fi
  if [ $RIG_GLUSTER_STARTED = 1 ]; then
    # Ends the brick processes; their pids are in the run directory.
    rig_gluster volume stop "$RIG_GLUSTER_VOL" >/dev/null 2>&1 || rig_log "gluster volume stop failed"
    for f in "$RIG_WORK/gluster/run/vols/$RIG_GLUSTER_VOL"/*.pid; do
      [ -f "$f" ] || continue
      pid=$(cat "$f" 2>/dev/null)
      [ -n "$pid" ] && { rig_wait_gone "$pid" 15 || rig_stop_pid "$pid" "brick"; }
    done
    RIG_GLUSTER_STARTED=0
    # The brick's log goes to the system's log directory, named for the brick.
    local b=${RIG_WORK#/}
    rm -f "/var/log/glusterfs/bricks/${b//\//-}-gluster-brick.log"
  fi
  for entry in "${RIG_DAEMONS[@]}"; do kill -TERM "${entry%% *}" 2>/dev/null; done
  for ((i = ${#RIG_DAEMONS[@]} - 1; i >= 0; i--)); do
    entry=${RIG_DAEMONS[i]}
    rig_wait_gone "${entry%% *}" 20 || rig_stop_pid "${entry%% *}" "${entry#* }"
  done
  RIG_DAEMONS=()
  if [ $RIG_NS_CREATED = 1 ]; then
    # Anything still in the namespace was started by this rig (a daemon's
    # helper): stop it by its pid before the namespace goes.
    for pid in $(ip netns pids "$RIG_NS" 2>/dev/null); do
      rig_pid_gone "$pid" && continue
      rig_log "still in $RIG_NS: pid $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null))"
      rig_stop_pid "$pid" "leftover in $RIG_NS"
    done
    ip netns del "$RIG_NS" || rig_log "ip netns del $RIG_NS failed"
    RIG_NS_CREATED=0
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -uo pipefail
  fs=${1:?usage: rig.sh sshfs|glusterfs|glusterfs-nocache|moosefs [CMD [ARGS...]]}
  shift
  rig_require "$fs" || { echo "rig: cannot run $fs here: $RIG_SKIP_REASON" >&2; exit 1; }
  work=$(mktemp -d /tmp/tlnetfs.XXXXXX)
  trap 'rig_stop; rm -rf "$work"' EXIT
  rig_start "$fs" "$work" || exit 1
  export RIG_M1 RIG_M2
  echo "rig: $fs mounted at RIG_M1=$RIG_M1 (default caching) and RIG_M2=$RIG_M2 (no caching)" >&2
  if [ $# -gt 0 ]; then "$@"; else "${SHELL:-bash}"; fi
fi
