#!/usr/bin/env bash
# zbench_aio (src/runtime/aio/zbench_aio.cpp): a small run with the thread
# pool reads back what it wrote; bad options exit 2 naming the option.
set -euo pipefail
: "${ZBENCH_AIO:?}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
out=$("$ZBENCH_AIO" --dir "$dir" --size-gib 0.01 --repeat 1 --chunk-mib 1 --backend threads --verify)
echo "$out"
echo "$out" | grep -q "read back verified" || { echo "zbench_aio: no verified read-back"; exit 1; }
for bad in "--size-gib abc" "--repeat 99999999999" "--chunk-mib 1x" "--queue-depth 0" "--in-flight" "--bogus"; do
  set +e
  msg=$("$ZBENCH_AIO" --dir "$dir" $bad 2>&1)
  rc=$?
  set -e
  opt=${bad%% *}
  [ $rc = 2 ] || { echo "zbench_aio $bad: exit $rc, expected 2: $msg"; exit 1; }
  echo "$msg" | grep -q -- "$opt" || { echo "zbench_aio $bad: the message does not name $opt: $msg"; exit 1; }
done
echo "zbench_aio bad options: exit 2, named"
