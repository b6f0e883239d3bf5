#!/usr/bin/env bash
# The lock's three places side by side, as the command uses them: one
# process per call, each taking the lock, running `true` under it and
# releasing (bench/command_calls: rounds in a new random order each, the
# median over rounds of the mean time per call). docs/etcd.md, "Files,
# Redis or etcd", has a table from one run.
#   directory   tokenlock run LOCKDIR -- true         (a local disk)
#   redis       tokenlock run --redis URL NAME -- true (one redis-server)
#   etcd        tokenlock run --etcd URL NAME -- true  (three etcd members)
#   flock       flock FILE true                         (the reference)
#   etcdctl     etcdctl lock NAME true                  (etcd's own client)
#   incr_*      tokenlock incr under each (a fenced read-modify-write)
# All servers on 127.0.0.1, started here and stopped by their pids.
#   bench/backends.sh -b BUILD_DIR [-q] [-o OTHER_TOKENLOCK]
# -q: a quick run (2 rounds of 5 calls) that only checks that it works.
# -o: another build's command beside this one (etcd_other, incr_etcd_other,
#     in the same rounds), to compare two versions of the etcd client.
# Exit 77 when redis-server, etcd or etcdctl is missing.
set -euo pipefail
build=build quick=0 other=
while getopts "b:qo:" o; do
  case $o in
    b) build=$OPTARG ;; q) quick=1 ;; o) other=$OPTARG ;;
    *) echo "usage: backends.sh -b BUILD_DIR [-q] [-o OTHER_TOKENLOCK]" >&2; exit 64 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
tool=$build/tools/tokenlock calls=$build/bench/command_calls
for p in "$tool" "$calls"; do [ -x "$p" ] || { echo "backends.sh: build $p first" >&2; exit 1; }; done
command -v redis-server >/dev/null || { echo "SKIP: redis-server is not installed"; exit 77; }
command -v flock >/dev/null || { echo "SKIP: flock(1) is not installed (util-linux)"; exit 77; }
"$tool" run --help | grep -q -- --etcd || { echo "SKIP: $tool has no --etcd"; exit 77; }
. "$here/redis_server.sh"
. "$here/etcd_cluster.sh"
etcd_cluster_require backends.sh
work=$(mktemp -d)
trap 'redis_server_stop; etcd_cluster_stop; rm -rf "$work"' EXIT
redis_server_start
etcd_cluster_start backends.sh
t=$(command -v true)
args=("flock=flock|$work/f|$t"
  "directory=$tool|run|$work/l|--|$t"
  "redis=$tool|run|--redis|$redis_server_url|b|--|$t"
  "etcd=$tool|run|--etcd|$etcd_cluster_url|b|--|$t"
  "etcdctl=etcdctl|--endpoints=$etcd_cluster_endpoints|lock|b|$t"
  "incr_directory=$tool|incr|$work/c1"
  "incr_redis=$tool|incr|--redis|$redis_server_url|--lock|c|$work/c2"
  "incr_etcd=$tool|incr|--etcd|$etcd_cluster_url|--lock|c|$work/c3")
if [ -n "$other" ]; then
  args+=("etcd_other=$other|run|--etcd|$etcd_cluster_url|b|--|$t"
    "incr_etcd_other=$other|incr|--etcd|$etcd_cluster_url|--lock|c|$work/c4")
fi
if [ $quick = 1 ]; then set -- -r 2 -n 5; else set -- -r 15 -n 40; fi
out=$("$calls" "$@" "${args[@]}")
echo "$out"
value() { sed -n "s/^calls_us_$1=//p" <<<"$out"; }
ratio() { awk -v a="$(value "$1")" -v b="$(value "$2")" 'BEGIN { printf "%.2f", a / b }'; }
for b in directory redis etcd etcdctl; do echo "backends_${b}_vs_flock=$(ratio "$b" flock)"; done
echo "backends_etcd_vs_etcdctl=$(ratio etcd etcdctl)"
echo "backends_etcd_vs_redis=$(ratio etcd redis)"
echo "backends_incr_redis_vs_directory=$(ratio incr_redis incr_directory)"
echo "backends_incr_etcd_vs_directory=$(ratio incr_etcd incr_directory)"
if [ -n "$other" ]; then
  echo "backends_etcd_vs_other=$(ratio etcd etcd_other)"
  echo "backends_incr_etcd_vs_other=$(ratio incr_etcd incr_etcd_other)"
fi
# Every increment counted: the counters hold what the calls added.
for c in c1 c2 c3 ${other:+c4}; do
  [ "$(cat "$work/$c")" -gt 0 ] || { echo "backends.sh: counter $c was not counted" >&2; exit 1; }
done
