#!/usr/bin/env bash
# Installs the built tokenlock into a scratch prefix, builds the consumer
# project against it with find_package, and runs it.
#   run.sh BUILD_DIR SOURCE_DIR [WITH_REDIS (ON|OFF)] [WITH_ETCD (ON|OFF)]
set -euo pipefail
build_dir=$1 source_dir=$2 with_redis=${3:-OFF} with_etcd=${4:-OFF}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$source_dir" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DWITH_REDIS="$with_redis" -DWITH_ETCD="$with_etcd" >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
out=$("$work/build/consumer" "$work/consumer.lock")
echo "$out"
[[ $out == "tokenlock "*" held lockfile."* ]]
[[ -d $work/consumer.lock/lockfile ]]
if [ "$with_redis" = ON ]; then
  [ -f "$work/prefix/include/tokenlock/redis_lock.hpp" ]
  # Port 1 on the loopback address: nothing listens there.
  out=$("$work/build/redis_consumer" redis://127.0.0.1:1)
  echo "$out"
  [[ $out == "refused: "*"127.0.0.1:1"* ]]
else
  [ ! -e "$work/prefix/include/tokenlock/redis_lock.hpp" ] || {
    echo "redis_lock.hpp installed without the library it declares"
    exit 1
  }
fi
if [ "$with_etcd" = ON ]; then
  [ -f "$work/prefix/include/tokenlock/etcd_lock.hpp" ]
  out=$("$work/build/etcd_consumer" etcd://127.0.0.1:1)
  echo "$out"
  [[ $out == "refused: "*"127.0.0.1:1"* ]]
else
  [ ! -e "$work/prefix/include/tokenlock/etcd_lock.hpp" ] || {
    echo "etcd_lock.hpp installed without the library it declares"
    exit 1
  }
fi
