#!/usr/bin/env bash
# Runs the whole test suite (unit, MPI, end-to-end) on a build made by jobs/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
