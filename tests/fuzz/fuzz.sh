#!/usr/bin/env bash
# libFuzzer targets, built with clang (ASan + UBSan) once per test run and
# then each run for a bounded time on its committed corpus.
#   fuzz.sh build SOURCE_DIR OUT_DIR        builds every target into OUT_DIR
#   fuzz.sh run SOURCE_DIR OUT_DIR TARGET SECONDS
# TARGET is the name of tests/fuzz/TARGET_fuzz.cpp; corpus in
# tests/fuzz/corpus/TARGET. Longer runs: TOKENLOCK_FUZZ_SECONDS=600.
set -euo pipefail
mode=$1 src=$2 out=$3
targets=(query token counter cli answer)

# libFuzzer comes with clang and its runtime (Debian: clang, libclang-rt-14-dev).
need_clang() {
  command -v clang++ >/dev/null ||
    { echo "SKIP: clang++ is not installed (scripts/install-deps installs clang)"; exit 77; }
  local probe
  probe=$(mktemp -d)
  if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
    clang++ -x c++ -fsanitize=fuzzer - -o "$probe/probe" 2>/dev/null; then
    rm -rf "$probe"
    echo "SKIP: clang cannot link a libFuzzer program (scripts/install-deps installs libclang-rt-14-dev)"
    exit 77
  fi
  rm -rf "$probe"
}

# The objects are instrumented for coverage (fuzzer-no-link) and compiled
# one file per core at a time; only the targets' links take -fsanitize=fuzzer.
sanitize=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
compile() {  # OBJECT SOURCE [FLAGS...]
  local obj=$1 source=$2
  shift 2
  clang++ -std=c++17 -O1 -g -fsanitize=fuzzer-no-link "${sanitize[@]}" "$@" -c "$source" -o "$obj" ||
    touch "$out/failed"
}
parallel_compile() {  # DIR FLAGS... -- SOURCES...
  local dir=$1 flags=() running=0 f
  shift
  while [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  mkdir -p "$dir"
  for f in "$@"; do
    compile "$dir/$(basename "${f%.cpp}").o" "$f" "${flags[@]}" &
    running=$((running + 1))
    if [ "$running" -ge "$(nproc)" ]; then
      wait -n || true
      running=$((running - 1))
    fi
  done
  wait
}

build() {
  rm -rf "$out"
  mkdir -p "$out/include/tokenlock"
  sed 's/@PROJECT_VERSION[A-Z_]*@/0/g' "$src/lib/include/tokenlock/version.hpp.in" \
    >"$out/include/tokenlock/version.hpp"
  # The core library's sources; those of the lock servers (redis/, etcd/)
  # and their network code (net/) are left out: the one target of theirs
  # (answer) takes its single file, which needs nlohmann-json only.
  local lib=("$src"/lib/src/*.cpp) d t
  for d in core doctor files lockdir posix wait; do
    lib+=("$src"/lib/src/$d/*.cpp)
  done
  local inc=(-I "$src/lib/src" -I "$src/lib/include" -I "$out/include")
  parallel_compile "$out/lib" "${inc[@]}" -- "${lib[@]}"
  # The command's option code with open_lock as a build without lock
  # servers has it (cli.cpp adds their options): the library's own
  # sources are all this links.
  parallel_compile "$out/tools" "${inc[@]}" -I "$src/tools" -DTOKENLOCK_HAVE_REDIS=0 -DTOKENLOCK_HAVE_ETCD=0 -- \
    "$src/tools/cli.cpp" "$src/tools/lock_target.cpp" "$src/tools/json_output.cpp" \
    "$src/tools/url_source.cpp" "$src/lib/src/open/open_lock.cpp" "$src/lib/src/open/lock_spec.cpp" \
    "$src/lib/src/net/server_url.cpp" "$src/tests/fuzz/cli_fuzz.cpp"
  parallel_compile "$out/cgi" -I "$src/cgi-examples/counter" -- \
    "$src/cgi-examples/counter/cgi.cpp" "$src/tests/fuzz/query_fuzz.cpp"
  parallel_compile "$out/entry" "${inc[@]}" -- "$src/tests/fuzz/token_fuzz.cpp" "$src/tests/fuzz/counter_fuzz.cpp"
  # The etcd client's reading of answers' JSON, apart from its transport.
  parallel_compile "$out/etcd" -I "$src/lib/src" -- "$src/lib/src/etcd/etcd_answer.cpp" "$src/tests/fuzz/answer_fuzz.cpp"
  [ ! -e "$out/failed" ] || { echo "fuzz.sh: compiling the fuzz targets failed (see above)" >&2; exit 1; }
  local link=(clang++ -fsanitize=fuzzer "${sanitize[@]}")
  "${link[@]}" "$out/cgi/"*.o -o "$out/query"
  "${link[@]}" "$out/entry/token_fuzz.o" "$out/lib/token_name.o" -o "$out/token"
  "${link[@]}" "$out/entry/counter_fuzz.o" "$out/lib/"*.o -lboost_filesystem -o "$out/counter"
  "${link[@]}" "$out/tools/"*.o "$out/lib/"*.o -lboost_filesystem -lboost_program_options -o "$out/cli"
  "${link[@]}" "$out/etcd/"*.o -o "$out/answer"
  for t in "${targets[@]}"; do
    [ -x "$out/$t" ] || { echo "fuzz.sh: $out/$t was not made" >&2; exit 1; }
  done
  echo "fuzz targets built in $out: ${targets[*]}"
}

run() {
  local target=$1 seconds=${TOKENLOCK_FUZZ_SECONDS:-$2}
  [ -x "$out/$target" ] ||
    { echo "fuzz.sh: $out/$target is missing: the fuzz_build test must pass first" >&2; exit 1; }
  # New inputs go to a scratch directory: the committed corpus stays as it is.
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  "$out/$target" -max_total_time="$seconds" -max_len=4096 -timeout=10 -print_final_stats=1 \
    "$scratch" "$src/tests/fuzz/corpus/$target" 2>&1 | tail -15
}

need_clang
case $mode in
  build) build ;;
  run) run "$4" "$5" ;;
  *) echo "usage: fuzz.sh build|run SOURCE_DIR OUT_DIR [TARGET SECONDS]" >&2; exit 64 ;;
esac
