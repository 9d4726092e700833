#!/usr/bin/env bash
# zbench_aio (src/runtime/aio/zbench_aio.cpp): a small run with the thread
# pool reads back what it wrote; bad options exit 2 naming the option.
set -euo pipefail
: "${ZBENCH_AIO:?}"
. "$(dirname "$0")/lib.sh"
dir=$WORK/aio
mkdir -p "$dir"
out=$("$ZBENCH_AIO" --dir "$dir" --size-gib 0.01 --repeat 1 --chunk-mib 1 --backend threads --verify)
echo "$out"
if echo "$out" | grep -q "read back verified"; then echo "ok: the read-back is verified"; else fail "no verified read-back"; fi
BAD_CMD=("$ZBENCH_AIO" --dir "$dir")
expect_bad_options zbench_aio "--size-gib abc" "--repeat 99999999999" "--chunk-mib 1x" "--queue-depth 0" "--in-flight" \
  "--bogus"
finish
