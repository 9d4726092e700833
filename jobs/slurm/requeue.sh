# shellcheck shell=bash
# Sourced by the jobs/slurm/*.sbatch scripts (from the directory sbatch was
# run in, the repository root): the run's directories, the arguments every
# start passes to ztrain, and zt_run, which runs the launcher so that the job
# survives its time limit or a preemption notice by saving and requeueing.
#
#   RUN_DIR   the run's directory (metrics.jsonl, checkpoints/); default
#             runs/$SLURM_JOB_ID, which a requeued job keeps (same job ID)
#   ZTRAIN    the binary; default build/bin/ztrain
#
# [Note: the save-and-requeue cycle]
# The scripts ask for `--signal=B:USR1@LEAD`: LEAD seconds before the time
# limit SLURM sends SIGUSR1 to the batch shell only (B:), not to the ranks.
# zt_run traps it and passes it on to the launcher (srun and mpirun forward
# SIGUSR1 to every rank); each rank finishes its step, the checkpoint is
# written, ztrain exits 0, and the script runs `scontrol requeue` on its own
# job. The requeued job keeps its ID, so it starts again with the same
# RUN_DIR, `--resume auto` loads the newest checkpoint, metrics.jsonl is
# appended to after a {"event":"resume"} record, and the job's output file
# is appended to (--open-mode=append). Every start passes --resume auto: the
# first one finds no checkpoint and starts from scratch.
# SIGTERM (scancel, the time limit itself, preemption in CANCEL mode) goes
# from SLURM to every process of the job, ranks included, and SIGKILL
# follows KillWait seconds later (30 by default): the ranks save if the save
# fits in that, but the job is not requeued (a cancelled job stays
# cancelled; a later submission with the same RUN_DIR resumes). mpirun,
# signalled too, waits odls_base_sigkill_timeout before killing its ranks
# (raised below so that it never cuts a save short), lingers twice that
# long, and so ends by SIGKILL at KillWait, dropping the ranks' last lines
# of output.
#
# The job ends 0 only when the launcher does; a rank that failed is not
# requeued (the same failure would come back).

: "${SLURM_JOB_ID:?run this script with sbatch}"
RUN_DIR=${RUN_DIR:-runs/$SLURM_JOB_ID}
ZTRAIN=${ZTRAIN:-build/bin/ztrain}
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
# srun of SLURM 22.05 does not take --cpus-per-task from the job (each task
# would get one core for all its threads) unless SRUN_CPUS_PER_TASK says so.
if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK; fi
# mpirun answers SIGTERM by killing its ranks odls_base_sigkill_timeout
# seconds later (Open MPI's default 1 s is too short for a save).
export OMPI_MCA_odls_base_sigkill_timeout=${OMPI_MCA_odls_base_sigkill_timeout:-60}
# checkpoint.dir is the run's, whatever the config says, so that a requeued
# job finds its own checkpoints; a --set checkpoint.dir among the script's
# options comes later and wins.
# shellcheck disable=SC2034  # used by the script that sources this one
# The directory goes into a JSON string: quotes and backslashes would change it.
case $RUN_DIR in *'"'* | *'\'*) echo "ztrain job: RUN_DIR '$RUN_DIR' has a quote or a backslash; choose another" >&2; exit 2 ;; esac
ZT_ARGS=(--log-dir "$RUN_DIR" --set "checkpoint.dir=\"$RUN_DIR/checkpoints\"" --resume auto)
mkdir -p "$RUN_DIR"
echo "ztrain job $SLURM_JOB_ID: start $((${SLURM_RESTART_COUNT:-0} + 1)) on $(hostname) at $(date -u '+%F %T') UTC, run dir $RUN_DIR"

zt_forward() { if [ -n "$ZT_PID" ]; then kill -USR1 "$ZT_PID" 2>/dev/null || true; fi; }

# zt_run LAUNCHER [ARGS...]: runs the launcher in the background, forwards
# SIGUSR1 and SIGTERM to it as SIGUSR1, waits for it, and requeues the job
# when SIGUSR1 asked for it and the launcher exited 0. Returns its exit code.
zt_run() {
  local rc=0
  ZT_REQUEUE=0 ZT_PID=""
  # The traps come first: a signal before the launcher runs must not end
  # the script (SIGUSR1's default action).
  trap 'ZT_REQUEUE=1; echo "ztrain job: SIGUSR1, saving and requeueing"; zt_forward' USR1
  trap 'echo "ztrain job: SIGTERM, saving"; zt_forward' TERM
  "$@" &
  ZT_PID=$!
  local pid=$ZT_PID
  # wait returns early each time a trap runs: wait again, until the launcher
  # is gone, for its exit code (bash keeps it when the launcher ended before
  # the first wait).
  while :; do
    wait "$pid" && rc=0 || rc=$?
    kill -0 "$pid" 2>/dev/null || break
  done
  trap - USR1 TERM
  if [ "$ZT_REQUEUE" = 1 ]; then
    if [ "$rc" = 0 ]; then
      echo "ztrain job $SLURM_JOB_ID: saved, requeueing at $(date -u '+%F %T') UTC"
      # The controller ends this script once the job is requeued.
      scontrol requeue "$SLURM_JOB_ID"
    else
      echo "ztrain job $SLURM_JOB_ID: the ranks exited $rc after SIGUSR1; not requeued" >&2
    fi
  fi
  return "$rc"
}
