#!/usr/bin/env bash
# Submits a ztrain run to PBS with arguments of any kind (commas, spaces,
# quotes: qsub -v would split them at commas). From the repository root:
#   jobs/pbs/submit.sh [QSUB_OPTIONS...] -- CONFIG.json [ztrain options...]
# The run directory (RUN_DIR; default a new runs/pbs-<UTC date and time>-<six
# random characters>, made by mktemp) gets
# `args` (the ztrain arguments) and `qsub_args` (the qsub options), both
# NUL-separated; the job reads them, and its continuations are submitted with
# the same qsub options. The script is jobs/pbs/ztrain.pbs (PBS Pro, OpenPBS)
# or jobs/pbs/ztrain.torque (Torque), as `qsub --version` tells; ZT_PBS_SCRIPT
# chooses another. Prints the job ID.
set -euo pipefail
cd "$(dirname "$0")/../.."
qsub_args=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do qsub_args+=("$1"); shift; done
[ $# -ge 2 ] || { echo "usage: jobs/pbs/submit.sh [QSUB_OPTIONS...] -- CONFIG.json [ztrain options...]" >&2; exit 2; }
shift
[ -f "$1" ] || { echo "jobs/pbs/submit.sh: config '$1' not found (paths are from the repository root)" >&2; exit 2; }
if [ -n "${RUN_DIR:-}" ]; then
  run_dir=$RUN_DIR
  mkdir -p "$run_dir"
else  # a directory of its own, even for jobs submitted in the same second
  mkdir -p runs
  # mktemp replaces the template's six X with random characters.
  run_dir=$(mktemp -d "runs/pbs-$(date -u +%Y%m%d-%H%M%S)-XXXXXX")
fi
run_dir=$(cd "$run_dir" && pwd)
case $run_dir in *,*) echo "jobs/pbs/submit.sh: RUN_DIR '$run_dir' has a comma, which qsub -v cannot pass" >&2; exit 2 ;; esac
if [ -z "${ZT_PBS_SCRIPT:-}" ]; then
  # PBS Pro and OpenPBS print "pbs_version = ...", Torque "Version: ...".
  if qsub --version 2>&1 | grep -qi pbs_version; then ZT_PBS_SCRIPT=jobs/pbs/ztrain.pbs; else ZT_PBS_SCRIPT=jobs/pbs/ztrain.torque; fi
fi
printf '%s\0' "$@" > "$run_dir/args"
# ZT_RUN_DIR joins the -v list the options already have, if any.
v=-1
for i in "${!qsub_args[@]}"; do [ "${qsub_args[i]}" = -v ] && v=$((i + 1)); done
if [ "$v" -ge 0 ] && [ "$v" -lt "${#qsub_args[@]}" ]; then
  qsub_args[v]+=",ZT_RUN_DIR=$run_dir"
else
  qsub_args+=(-v "ZT_RUN_DIR=$run_dir")
fi
printf '%s\0' "${qsub_args[@]}" > "$run_dir/qsub_args"
qsub "${qsub_args[@]}" "$ZT_PBS_SCRIPT"
