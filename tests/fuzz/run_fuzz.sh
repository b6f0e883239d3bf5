#!/usr/bin/env bash
# Builds a libFuzzer target with clang (ASan + UBSan) and runs it for a
# bounded time on its committed corpus.
#   run_fuzz.sh SOURCE_DIR TARGET SECONDS
# TARGET is the name of tests/fuzz/TARGET_fuzz.cpp; corpus in
# tests/fuzz/corpus/TARGET. Longer runs: TOKENLOCK_FUZZ_SECONDS=600.
set -euo pipefail
src=$1 target=$2 seconds=${TOKENLOCK_FUZZ_SECONDS:-$3}
# libFuzzer comes with clang and its runtime (Debian: clang, libclang-rt-14-dev).
command -v clang++ >/dev/null ||
  { echo "SKIP: clang++ is not installed (scripts/install-deps installs clang)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
  clang++ -x c++ -fsanitize=fuzzer - -o "$work/probe" 2>/dev/null ||
  { echo "SKIP: clang cannot link a libFuzzer program (scripts/install-deps installs libclang-rt-14-dev)"; exit 77; }
# The core library's sources; those of the lock servers (redis/, etcd/) and
# their network code are left out: the one target of theirs (answer) takes
# its single file, which needs nlohmann-json only.
lib=("$src"/lib/src/*.cpp)
for d in core doctor files lockdir posix wait; do
  lib+=("$src"/lib/src/$d/*.cpp)
done
lib_includes=(-I "$src/lib/src" -I "$src/lib/include" -I "$work/include")
mkdir -p "$work/include/tokenlock"
sed 's/@PROJECT_VERSION[A-Z_]*@/0/g' "$src/lib/include/tokenlock/version.hpp.in" >"$work/include/tokenlock/version.hpp"
case $target in
  query) sources=("$src/cgi-examples/counter/cgi.cpp"); includes=(-I "$src/cgi-examples/counter") ;;
  # The etcd client's reading of answers' JSON, apart from its transport.
  answer) sources=("$src/lib/src/etcd/etcd_answer.cpp"); includes=(-I "$src/lib/src") ;;
  token) sources=("$src/lib/src/lockdir/token_name.cpp"); includes=("${lib_includes[@]}") ;;
  counter) sources=("${lib[@]}"); includes=("${lib_includes[@]}"); libs=(-lboost_filesystem) ;;
  # commands_server.cpp as a build without lock servers has it (cli.cpp
  # adds its options): the library's own sources are all this links.
  cli) sources=("${lib[@]}" "$src/tools/cli.cpp" "$src/tools/commands_server.cpp" "$src/tools/url_source.cpp")
       includes=("${lib_includes[@]}" -I "$src/tools" -DTOKENLOCK_HAVE_REDIS=0 -DTOKENLOCK_HAVE_ETCD=0)
       libs=(-lboost_filesystem -lboost_program_options) ;;
  *) echo "run_fuzz: unknown target $target" >&2; exit 64 ;;
esac
# Compiled one file per core at a time: the library's sources take most of
# this test's time otherwise.
sanitize=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
mkdir -p "$work/obj"
i=0 running=0
for f in "$src/tests/fuzz/${target}_fuzz.cpp" "${sources[@]}"; do
  (clang++ -std=c++17 -O1 -g "${sanitize[@]}" "${includes[@]}" -c "$f" -o "$work/obj/$i.o" ||
    touch "$work/failed") &
  i=$((i + 1)) running=$((running + 1))
  if [ "$running" -ge "$(nproc)" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait
[ ! -e "$work/failed" ] || { echo "run_fuzz: compiling the $target target failed" >&2; exit 1; }
clang++ "${sanitize[@]}" "$work"/obj/*.o ${libs[@]+"${libs[@]}"} -o "$work/fuzz"
# New inputs go to a scratch directory: the committed corpus stays as it is.
mkdir -p "$work/new"
"$work/fuzz" -max_total_time="$seconds" -max_len=4096 -timeout=10 -print_final_stats=1 \
  "$work/new" "$src/tests/fuzz/corpus/$target" 2>&1 | tail -15
