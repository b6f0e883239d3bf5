#!/usr/bin/env bash
# Installs the built tokenlock into a scratch prefix, builds the consumer
# project against it with find_package, and runs it.
set -euo pipefail
build_dir=$1 source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$source_dir" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
out=$("$work/build/consumer" "$work/consumer.lock")
echo "$out"
[[ $out == "tokenlock "*" held lockfile."* ]]
[[ -d $work/consumer.lock/lockfile ]]
