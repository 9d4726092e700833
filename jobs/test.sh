#!/usr/bin/env bash
# Runs the whole test suite (unit, MPI, end-to-end) on a build made by jobs/setup.sh,
# then (without arguments; ZT_SANITIZER_CHECKS=0 skips them) the fuzz targets
# and the sanitizer subset (docs/reliability.md, "Sanitizers", "Fuzzing").
set -euo pipefail
cd "$(dirname "$0")/.."
# Most tests are short MPI runs whose ranks spend much of their time starting
# and waiting for each other, so CTest schedules ranks for three times the
# cores (each test's PROCESSORS is its rank count). On 2 cores the suite took
# 582 s so, against 670 s at twice the cores the same afternoon (README,
# "Tests").
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${JOBS:-$((3 * $(nproc)))}" "$@"
if (($# == 0)) && [ "${ZT_SANITIZER_CHECKS:-1}" != 0 ]; then
  tests/fuzz/run.sh
  tests/sanitizers/ci.sh
fi
