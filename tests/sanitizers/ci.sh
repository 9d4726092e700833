#!/usr/bin/env bash
# The sanitizer subset that CI runs after the test suite (the whole suite
# under each sanitizer is jobs/sanitizers.sh; docs/reliability.md,
# "Sanitizers"). Only the targets these tests need are built:
#   ASan + UBSan (the "fuzz" preset's build, whose libraries the fuzz targets
#   already built): the parsers' own tests and the aio engines' threads;
#   ThreadSanitizer (the "tsan" preset): the aio engines (io_uring and thread
#   pool workers, the swap directory), the multi-threaded tokenizer and ZeRO
#   with the offloaded optimizer's update thread (zero_engine_test, on 1-3
#   ranks: the streamed update).
set -euo pipefail
cd "$(dirname "$0")/../.."
JOBS=${JOBS:-$(nproc)}

ASAN_TESTS=(core_config_test io_token_shard io_tokenizers runtime_aio_engine runtime_aio_swap_dir runtime_aio_fallback)
TSAN_TESTS=(runtime_aio_engine runtime_aio_swap_dir runtime_aio_fallback io_tokenizers zero_engine_test)

run() {  # PRESET TESTS...
  local preset=$1
  shift
  local t0
  t0=$(date +%s)
  cmake --preset "$preset" ${CMAKE_ARGS:-} >/dev/null
  cmake --build --preset "$preset" -j "$JOBS" --target "$@"
  local t1
  t1=$(date +%s)
  local regex
  regex="^($(IFS='|'; echo "$*"))(_np[0-9]+)?\$"
  ctest --preset "$preset" -j "$JOBS" -R "$regex"
  echo "sanitizers: $preset: $# tests passed; build $((t1 - t0)) s, tests $(($(date +%s) - t1)) s"
}

run fuzz "${ASAN_TESTS[@]}"
run tsan "${TSAN_TESTS[@]}"
