#!/usr/bin/env bash
# The whole test suite under a sanitizer (docs/reliability.md, "Sanitizers"):
#
#   jobs/sanitizers.sh asan     # AddressSanitizer + UndefinedBehaviorSanitizer (gcc), build-asan/
#   jobs/sanitizers.sh tsan     # ThreadSanitizer (clang and its libomp), build-tsan/
#
# Extra arguments go to ctest (-R NAME, -j N). Too long for CI on two cores
# (tests/sanitizers/ci.sh is the subset CI runs); run it before a release or
# after touching threads, and on any new report fix the code, or, for a
# library's own report, extend tests/sanitizers/*.supp with a comment saying why.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:?usage: jobs/sanitizers.sh asan|tsan [ctest arguments]}
shift
cmake --preset "$preset" ${CMAKE_ARGS:-}
cmake --build --preset "$preset" -j "${JOBS:-$(nproc)}"
ctest --preset "$preset" -j "${JOBS:-$(nproc)}" "$@"
