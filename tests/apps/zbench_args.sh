#!/usr/bin/env bash
# zbench (apps/zbench.cpp): bad options exit 2 naming the option, before any
# GPU or communicator is touched (so this runs without a GPU).
set -euo pipefail
: "${ZBENCH:?}"
for bad in "--dtype bogus" "--min-bytes nan" "--min-bytes 0.5" "--max-bytes 3Q" "--ops ," "--check 5" "--factor 1"; do
  set +e
  msg=$("$ZBENCH" $bad 2>&1)
  rc=$?
  set -e
  opt=${bad%% *}
  [ $rc = 2 ] || { echo "zbench $bad: exit $rc, expected 2: $msg"; exit 1; }
  echo "$msg" | grep -q -- "$opt" || { echo "zbench $bad: the message does not name $opt: $msg"; exit 1; }
done
echo "zbench bad options: exit 2, named"
