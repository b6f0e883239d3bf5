#!/usr/bin/env bash
# Makes the Debian package with CPack, unpacks it into a scratch root (not
# the system), checks its contents and dependencies, runs its command, and
# builds and runs consumers against it: with find_package, and with make and
# pkg-config.   run.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build_dir=$1 source_dir=$2
for need in cpack dpkg-deb pkg-config make; do
  command -v "$need" >/dev/null || { echo "SKIP: $need is not installed"; exit 77; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
(cd "$work" && cpack -G DEB --config "$build_dir/CPackConfig.cmake" -B "$work/out" >"$work/cpack.log" 2>&1) ||
  { cat "$work/cpack.log"; fail "cpack failed"; }
deb=$(ls "$work"/out/tokenlock_*.deb)
echo "package: $(basename "$deb"), $(du -k "$deb" | cut -f1) KiB"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
[[ $depends == *libboost-filesystem-dev* ]] || fail "does not depend on Boost.Filesystem's development files"
[[ $depends == *libc6* ]] || fail "no libc6 dependency (dpkg-shlibdeps)"
root=$work/root
dpkg-deb -x "$deb" "$root"
for f in usr/bin/tokenlock usr/share/man/man1/tokenlock.1 usr/include/tokenlock/tokenlock.hpp \
  usr/include/tokenlock/tokenlock.h usr/include/tokenlock/version.hpp \
  usr/lib/cmake/tokenlock/tokenlock-config.cmake usr/lib/pkgconfig/tokenlock.pc \
  usr/lib/libtokenlock.a usr/share/doc/tokenlock/copyright; do
  [ -e "$root/$f" ] || fail "the package lacks /$f"
done
grep -q '^License: Expat$' "$root/usr/share/doc/tokenlock/copyright" || fail "the copyright file names no licence"
if readelf -S "$root/usr/bin/tokenlock" | grep -q '\.debug_info'; then fail "the command is not stripped"; fi
"$root/usr/bin/tokenlock" --version | grep -q "^tokenlock " || fail "the packaged command does not run"
"$root/usr/bin/tokenlock" run "$work/cmd.lock" -- true || fail "the packaged command cannot lock"

# find_package against the unpacked root.
cmake -S "$source_dir/tests/find-package-test" -B "$work/fp" -DCMAKE_PREFIX_PATH="$root/usr" \
  >"$work/fp.log" 2>&1 || { cat "$work/fp.log"; fail "find_package consumer: configure"; }
cmake --build "$work/fp" >"$work/fpb.log" 2>&1 || { cat "$work/fpb.log"; fail "find_package consumer: build"; }
out=$("$work/fp/consumer" "$work/fp.lock")
[[ $out == "tokenlock "*" held lockfile."* ]] || fail "find_package consumer printed: $out"

# make and pkg-config against the unpacked root.
export PKG_CONFIG_PATH=$root/usr/lib/pkgconfig
cp "$source_dir"/tests/pkg-config-test/{Makefile,hits.c,cxx_hits.cpp} "$work/"
make -s -C "$work" >"$work/make.log" 2>&1 || { cat "$work/make.log"; fail "pkg-config consumers: build"; }
[ "$("$work/hits" "$work/n.count")" = 1 ] && [ "$("$work/cxx_hits" "$work/n.count")" = 2 ] ||
  fail "pkg-config consumers did not count"
echo "ok: the package unpacks, its command runs, and consumers build against it with find_package and pkg-config"
