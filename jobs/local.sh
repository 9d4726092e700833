#!/usr/bin/env bash
# Runs ztrain on this machine under mpirun.
#   jobs/local.sh NP CONFIG.json [ztrain options...]
#
# SIGTERM to this script (how a batch system or `kill` ends a job) reaches
# the ranks as SIGUSR1 through mpirun, which forwards it: every rank finishes
# its step, the checkpoint is saved (with checkpoint.dir) and the job exits 0.
# mpirun itself answers SIGTERM by killing the ranks one second later and
# exiting 1, too soon for a save; OMPI_MCA_odls_base_sigkill_timeout (seconds,
# default here 60) is how long it waits when SIGTERM reaches it directly.
set -euo pipefail
cd "$(dirname "$0")/.."
np=${1:?usage: jobs/local.sh NP CONFIG.json [options]}
shift
flags=(--oversubscribe --bind-to none)
if [ "$(id -u)" = 0 ]; then flags+=(--allow-run-as-root); fi
export OMPI_MCA_odls_base_sigkill_timeout=${OMPI_MCA_odls_base_sigkill_timeout:-60}
mpirun "${flags[@]}" -np "$np" "${BUILD_DIR:-build}/bin/ztrain" "$@" &
pid=$!
trap 'kill -USR1 "$pid" 2>/dev/null || true' TERM
# wait returns early when the trap runs: wait again for mpirun's exit code.
rc=0
while kill -0 "$pid" 2>/dev/null; do
  wait "$pid" && rc=0 || rc=$?
done
exit "$rc"
