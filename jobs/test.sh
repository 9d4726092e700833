#!/usr/bin/env bash
# Runs the whole test suite (unit, MPI, end-to-end) on a build made by jobs/setup.sh,
# then (without arguments; ZT_SANITIZER_CHECKS=0 skips them) the fuzz targets
# and the sanitizer subset (docs/reliability.md, "Sanitizers", "Fuzzing").
set -euo pipefail
cd "$(dirname "$0")/.."
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
if (($# == 0)) && [ "${ZT_SANITIZER_CHECKS:-1}" != 0 ]; then
  tests/fuzz/run.sh
  tests/sanitizers/ci.sh
fi
