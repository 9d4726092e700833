# shellcheck shell=bash
# Sourced by jobs/pbs/ztrain.pbs and jobs/pbs/ztrain.torque (from
# $PBS_O_WORKDIR, the repository root): the run's directory and arguments,
# and zt_run, which runs mpirun so that the job survives its walltime by
# saving and resubmitting itself. The caller sets ZT_SELF (its own path).
#
# [Note: PBS jobs that continue]
# PBS has no signal ahead of the walltime: at the walltime (and on qdel) it
# sends SIGTERM and SIGKILL kill_delay seconds later (PBS Pro's default is
# 10 s, Torque's 2 s), rarely enough for a save. So zt_run arms its own
# timer: ZT_SAVE_LEAD seconds (default 600) before the walltime (PBS_WALLTIME
# as Torque sets it, else Resource_List.walltime from qstat -f, else
# ZT_WALLTIME in seconds) it sends the ranks SIGUSR1, they finish the step,
# save and exit 0, and the job submits its continuation with the same qsub
# options, `-W depend=afterany:<this job>` so that it cannot start before
# this one ends. `qsig -s USR1 <job>` does the same at any time. The
# continuation reads the same run directory, resumes (--resume auto) and
# appends to metrics.jsonl and to RUN_DIR/job.out.
# SIGTERM (qdel, the walltime itself) reaches the ranks as SIGUSR1 and they
# save if kill_delay allows, but nothing is resubmitted. A job the server
# reruns (-r y: a node failure, preemption by requeue, qrerun) starts again
# with the same job ID and run directory and resumes likewise.
#
# Arguments reach the job through the run directory, not through qsub -v,
# whose list is split at commas (--set optimizer.params.betas=[0.9,0.95]):
# jobs/pbs/submit.sh writes RUN_DIR/args (NUL-separated) and passes only
# ZT_RUN_DIR. Submitted with plain qsub, the job takes CONFIG and ZTRAIN_ARGS
# (split at spaces, no commas) from -v and writes RUN_DIR=runs/$PBS_JOBID/args.

: "${PBS_JOBID:?run this script with qsub}"
: "${PBS_NODEFILE:?PBS_NODEFILE is not set}"
ZTRAIN=${ZTRAIN:-build/bin/ztrain}
if [ -n "${ZT_RUN_DIR:-}" ]; then
  RUN_DIR=$ZT_RUN_DIR
  [ -s "$RUN_DIR/args" ] || { echo "ztrain job: $RUN_DIR/args is missing (written by jobs/pbs/submit.sh)" >&2; exit 2; }
else
  RUN_DIR=runs/$PBS_JOBID
  mkdir -p "$RUN_DIR"
  # ZTRAIN_ARGS split at blanks, without filename expansion.
  read -r -a extra <<< "${ZTRAIN_ARGS:-}"
  words=("${CONFIG:?set CONFIG=path/to/config.json with qsub -v, or submit with jobs/pbs/submit.sh}" "${extra[@]}")
  printf '%s\0' "${words[@]}" > "$RUN_DIR/args"
fi
mapfile -d '' -t ZT_USER_ARGS < "$RUN_DIR/args"
qsub_args=()
if [ -f "$RUN_DIR/qsub_args" ]; then mapfile -d '' -t qsub_args < "$RUN_DIR/qsub_args"; fi
# The job's output goes to RUN_DIR/job.out, appended to by every start (PBS
# writes its own output file anew when a job is rerun).
echo "ztrain job $PBS_JOBID: output appended to $RUN_DIR/job.out"
exec >> "$RUN_DIR/job.out" 2>&1
echo "ztrain job $PBS_JOBID: start on $(hostname) at $(date -u '+%F %T') UTC, run dir $RUN_DIR${PBS_RUN_COUNT:+, run $PBS_RUN_COUNT}"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# mpirun answers SIGTERM by killing its ranks odls_base_sigkill_timeout
# seconds later (Open MPI's default 1 s is too short for a save).
export OMPI_MCA_odls_base_sigkill_timeout=${OMPI_MCA_odls_base_sigkill_timeout:-60}
# checkpoint.dir is the run's, whatever the config says, so that the
# continuation finds its checkpoints; a --set checkpoint.dir among the
# job's arguments comes later and wins.
# The directory goes into a JSON string: quotes and backslashes would change it.
case $RUN_DIR in *'"'* | *'\'*) echo "ztrain job: RUN_DIR '$RUN_DIR' has a quote or a backslash; choose another" >&2; exit 2 ;; esac
ZT_ARGS=(--log-dir "$RUN_DIR" --set "checkpoint.dir=\"$RUN_DIR/checkpoints\"" --resume auto)

# walltime_s: the job's walltime in seconds, empty when unknown.
walltime_s() {
  local w=${PBS_WALLTIME:-}
  if [ -z "$w" ] && command -v qstat > /dev/null; then
    w=$(qstat -f "$PBS_JOBID" 2>/dev/null | sed -n 's/^ *Resource_List.walltime = *//p' | head -1)
  fi
  w=${w:-${ZT_WALLTIME:-}}
  # [[D:]H:]M:S or seconds, as PBS writes it; anything else: unknown.
  if [[ $w =~ ^([0-9]+:)?([0-9]+):([0-9]+):([0-9]+)$ ]]; then
    local d=${BASH_REMATCH[1]%:}
    echo $((10#${d:-0} * 86400 + 10#${BASH_REMATCH[2]} * 3600 + 10#${BASH_REMATCH[3]} * 60 + 10#${BASH_REMATCH[4]}))
  elif [[ $w =~ ^[0-9]+$ ]]; then
    echo "$w"
  elif [ -n "$w" ]; then
    echo "ztrain job: walltime '$w' is not [[D:]H:]M:S or seconds: taken as unknown" >&2
  fi
}
lead=${ZT_SAVE_LEAD:-600}
if ! [[ $lead =~ ^[0-9]+$ ]]; then
  echo "ztrain job: ZT_SAVE_LEAD='$lead': expected a number of seconds" >&2
  exit 2
fi

zt_forward() { if [ -n "$ZT_PID" ]; then kill -USR1 "$ZT_PID" 2>/dev/null || true; fi; }

# zt_run: runs ztrain under mpirun on the nodes of PBS_NODEFILE, forwards
# SIGUSR1 (the timer's or qsig's) and SIGTERM to it as SIGUSR1, waits, and
# submits the continuation after SIGUSR1 when mpirun exited 0.
zt_run() {
  local rc=0 timer="" wt np flags=()
  # Before mpirun: nothing below may end the script while the ranks run.
  wt=$(walltime_s) || wt=""
  np=$(wc -l < "$PBS_NODEFILE")
  if [ "$(id -u)" = 0 ]; then flags+=(--allow-run-as-root); fi
  # The hang settings reach the ranks on every node (docs/reliability.md, "Hangs").
  local v
  for v in ZTRAIN_COMM_TIMEOUT NCCL_IB_TIMEOUT NCCL_IB_RETRY_CNT; do
    if [ -n "${!v:-}" ]; then flags+=(-x "$v"); fi
  done
  ZT_CONTINUE=0 ZT_PID=""
  # The traps come first: a signal before mpirun runs must not end the
  # script (SIGUSR1's default action).
  trap 'ZT_CONTINUE=1; echo "ztrain job: SIGUSR1, saving and continuing in a new job"; zt_forward' USR1
  trap 'echo "ztrain job: SIGTERM, saving"; zt_forward' TERM
  mpirun "${flags[@]}" -np "$np" --hostfile "$PBS_NODEFILE" -x OMP_NUM_THREADS \
    "$ZTRAIN" "${ZT_USER_ARGS[0]}" "${ZT_ARGS[@]}" "${ZT_USER_ARGS[@]:1}" &
  ZT_PID=$!
  local pid=$ZT_PID
  if [ -n "$wt" ] && [ "$wt" -gt "$lead" ]; then
    echo "ztrain job: walltime ${wt} s; saving $lead s before it (ZT_SAVE_LEAD)"
    # The timer's sleep ends with it (kill below), so nothing outlives the job.
    (
      sleep $((wt - lead)) &
      s=$!
      trap 'kill $s; exit 0' TERM
      wait $s && kill -USR1 $$
    ) &
    timer=$!
  elif [ -n "$wt" ]; then
    echo "ztrain job: walltime ${wt} s is not more than ZT_SAVE_LEAD=$lead s: no save before the walltime"
  else
    echo "ztrain job: walltime unknown (no PBS_WALLTIME, qstat -f or ZT_WALLTIME): no save before the walltime"
  fi
  # wait returns early each time a trap runs: wait again, until mpirun is
  # gone, for its exit code (bash keeps it when mpirun ended before the
  # first wait).
  while :; do
    wait "$pid" && rc=0 || rc=$?
    kill -0 "$pid" 2>/dev/null || break
  done
  trap - USR1 TERM
  if [ -n "$timer" ]; then
    kill "$timer" 2>/dev/null || true
    wait "$timer" 2>/dev/null || true
  fi
  if [ "$ZT_CONTINUE" = 1 ]; then
    if [ "$rc" = 0 ]; then
      local next opts=("${qsub_args[@]}")
      # jobs/pbs/submit.sh's options carry ZT_RUN_DIR; plain qsub's did not.
      ((${#opts[@]})) || opts=(-v "ZT_RUN_DIR=$(cd "$RUN_DIR" && pwd)")
      next=$(cd "${PBS_O_WORKDIR:-.}" && qsub "${opts[@]}" -W "depend=afterany:$PBS_JOBID" "$ZT_SELF")
      echo "ztrain job $PBS_JOBID: saved; continues as job $next at $(date -u '+%F %T') UTC"
    else
      echo "ztrain job $PBS_JOBID: the ranks exited $rc after SIGUSR1; no continuation submitted" >&2
    fi
  fi
  return "$rc"
}
