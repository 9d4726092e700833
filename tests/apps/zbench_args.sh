#!/usr/bin/env bash
# zbench (apps/zbench.cpp): bad options exit 2 naming the option, before any
# GPU or communicator is touched (so this runs without a GPU).
set -euo pipefail
: "${ZBENCH:?}"
. "$(dirname "$0")/lib.sh"
BAD_CMD=("$ZBENCH")
expect_bad_options zbench "--dtype bogus" "--min-bytes nan" "--min-bytes 0.5" "--max-bytes 3Q" "--ops ," "--check 5" \
  "--factor 1"
finish
