#!/usr/bin/env bash
# Runs ztrain on this machine under mpirun.
#   jobs/local.sh NP CONFIG.json [ztrain options...]
set -euo pipefail
cd "$(dirname "$0")/.."
np=${1:?usage: jobs/local.sh NP CONFIG.json [options]}
shift
flags=(--oversubscribe --bind-to none)
if [ "$(id -u)" = 0 ]; then flags+=(--allow-run-as-root); fi
exec mpirun "${flags[@]}" -np "$np" "${BUILD_DIR:-build}/bin/ztrain" "$@"
