#!/usr/bin/env bash
# Installs the built tokenlock into a scratch prefix and builds a C and a C++
# program against it with make and pkg-config only, then runs them on one
# counter.   run.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build_dir=$1 source_dir=$2
command -v pkg-config >/dev/null || { echo "SKIP: pkg-config is not installed"; exit 77; }
command -v make >/dev/null || { echo "SKIP: make is not installed"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
pc=$(find "$work/prefix" -name tokenlock.pc)
[ -n "$pc" ] || { echo "tokenlock.pc was not installed"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
echo "pkg-config --cflags --libs tokenlock: $(pkg-config --cflags --libs tokenlock)"
[ "$(pkg-config --modversion tokenlock)" = "$(sed -n 's/^#define TOKENLOCK_VERSION "\(.*\)"/\1/p' "$work/prefix/include/tokenlock/version.hpp")" ]
cp "$source_dir"/Makefile "$source_dir"/hits.c "$source_dir"/cxx_hits.cpp "$work/"
make -s -C "$work" >"$work/make.log" 2>&1 || { cat "$work/make.log"; exit 1; }
[ "$("$work/hits" "$work/n.count")" = 1 ]
[ "$("$work/cxx_hits" "$work/n.count")" = 2 ]
[ "$("$work/hits" "$work/n.count")" = 3 ]
[ "$(cat "$work/n.count")" = 3 ]
echo "ok: a C and a C++ program built with make and pkg-config count together"
