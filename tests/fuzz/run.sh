#!/usr/bin/env bash
# Builds the libFuzzer targets (the "fuzz" preset: clang, ASan + UBSan, only
# the libraries they need) and runs each one: first every input of its corpus
# tests/fuzz/<target>/ (seeds and the inputs of past findings, replayed), then
# new inputs mutated from them, FUZZ_RUNS per target with a fixed seed, so
# that CI runs the same inputs each time. A crash, a sanitizer report, an
# exception other than zt::UserError, or an input slower than 10 s fails the
# run; the input is left in the work directory printed, to be fixed and then
# kept in tests/fuzz/<target>/ (docs/reliability.md, "Fuzzing").
#
#   tests/fuzz/run.sh                    # all targets, FUZZ_RUNS (2000) each
#   FUZZ_RUNS=100000 tests/fuzz/run.sh fuzz_config   # longer, one target
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${FUZZ_RUNS:-2000}
SEED=${FUZZ_SEED:-1}
BUILD=build-fuzz

start=$(date +%s)
cmake --preset fuzz ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target zt_fuzzers
built=$(date +%s)
echo "fuzz: built in $((built - start)) s"

targets=("$@")
if ((${#targets[@]} == 0)); then
  for d in tests/fuzz/fuzz_*/; do targets+=("$(basename "$d")"); done
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/zt_fuzz_run_XXXXXX")
total=0
for t in "${targets[@]}"; do
  mkdir -p "$work/$t"
  t0=$(date +%s)
  # The first directory receives new interesting inputs, so the corpus in
  # the tree is read and never written.
  if ! "$BUILD/bin/$t" -runs="$RUNS" -seed="$SEED" -timeout=10 -rss_limit_mb=3072 -print_final_stats=1 \
       -artifact_prefix="$work/$t/" "$work/$t" "tests/fuzz/$t" >"$work/$t.log" 2>&1; then
    tail -60 "$work/$t.log"
    echo "fuzz: $t FAILED; the input is in $work/$t/ (crash-*, timeout-*, leak-*, oom-*)" >&2
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log" | tail -1)
  total=$((total + ${runs:-0}))
  echo "fuzz: $t: ${runs:-?} inputs in $(($(date +%s) - t0)) s, no finding"
done
rm -rf "$work"
echo "fuzz: $total inputs over ${#targets[@]} targets in $(($(date +%s) - built)) s (build $((built - start)) s)"
