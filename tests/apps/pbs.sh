#!/usr/bin/env bash
# The jobs/pbs scripts in a fake PBS (tests/apps/fake_pbs: qsub and qstat
# that read the #PBS directives as PBS Pro or Torque would and queue the job;
# this test runs the queued jobs as the server would, with PBS_JOBID,
# PBS_O_WORKDIR, PBS_NODEFILE, the -v variables and nothing else of the
# test's environment):
#  - PBS Pro, submitted by jobs/pbs/submit.sh with ztrain arguments that hold
#    commas: SIGUSR1 mid-run (qsig -s USR1) saves, exits 0 and submits the
#    continuation with the same options, after this job (depend=afterany);
#    the continuation resumes and ends with every loss equal to a run
#    straight through;
#  - Torque, plain qsub -v CONFIG=...: SIGTERM mid-run (qdel, the walltime)
#    saves and exits 0 without a continuation; the server's rerun (-r y, same
#    job ID) resumes and ends with the same losses;
#  - the walltime timer: ZT_SAVE_LEAD seconds before the walltime (from
#    qstat -f) the ranks save and the continuation is submitted.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
Q=$WORK/pbs
mkdir -p "$Q"
export FAKE_PBS_DIR=$Q
PATH=$SRC/tests/apps/fake_pbs:$PATH
export PATH
# The jobs are submitted from a copy of the repository's jobs/ (their
# default run directories are relative to it).
mkdir repo
cp -r "$SRC/jobs" repo/
REPO=$WORK/repo

# The -r y, select and nodes directives are checked by the fake qsub.
cat > c.json <<'JSON'
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 40, "warmup_num_steps": 5}},
 "model": {"n_layer": 2, "n_head": 2, "d_model": 64, "seq_len": 64, "vocab_size": 64},
 "train": {"steps": 40, "eval_interval": 0}}
JSON
# The same with the betas that case 1 passes on the command line.
sed 's/"weight_decay": 0.1}/"weight_decay": 0.1, "betas": [0.8, 0.9]}/' c.json > c2.json
grep -q '"betas": \[0.8, 0.9\]' c2.json
# shellcheck disable=SC2086
"$MPIEXEC" $MPI_FLAGS --bind-to none -np 2 "$ZTRAIN" c2.json --log-dir ref > ref.out 2>&1 &
ref_pid=$!

# start_job ID: runs a queued job's script in the background as the server
# would (PID in JOB_PID): two slots on this host, the -v variables.
start_job() {
  local d=$Q/$1 vars=()
  mapfile -d '' -t vars < "$d/vars"
  hostname > "$d/nodes"
  hostname >> "$d/nodes"
  local w=() wt
  wt=$(cat "$d/walltime")
  # Torque passes the walltime in seconds; PBS Pro's is in qstat -f.
  if [ "$FAKE_PBS_FLAVOR" = torque ] && [ -n "$wt" ]; then
    IFS=: read -r h m s <<< "$wt"
    w=(PBS_WALLTIME=$((10#$h * 3600 + 10#$m * 60 + 10#$s)))
  fi
  env -i PATH="$PATH" HOME="$WORK" FAKE_PBS_DIR="$Q" FAKE_PBS_FLAVOR="$FAKE_PBS_FLAVOR" \
    PBS_JOBID="$1" PBS_JOBNAME=ztrain PBS_ENVIRONMENT=PBS_BATCH PBS_O_WORKDIR="$(cat "$d/workdir")" \
    PBS_NODEFILE="$d/nodes" "${w[@]}" "${vars[@]}" bash "$d/script" >> "$d/pbs.out" 2>&1 &
  JOB_PID=$!
}
# wait_step FILE N: until FILE (a metrics.jsonl) has step N, at most 60 s.
wait_step() {
  for _ in $(seq 1 600); do
    [ "$(grep -o '"step":[0-9]*' "$1" 2>/dev/null | tail -1 | cut -d: -f2)" -ge "$2" ] 2>/dev/null && return 0
    kill -0 "$JOB_PID" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
# job_rc: waits for the job started last; its exit code in rc.
job_rc() { rc=0; wait "$JOB_PID" || rc=$?; }
jobs_queued() { ls "$Q" | grep -c fakepbs; }
rc=0
wait "$ref_pid" || rc=$?
[ "$rc" = 0 ] || fail "the reference run exited $rc: $(tail -3 ref.out)"
losses ref/metrics.jsonl > ref.losses
[ "$(wc -l < ref.losses)" = 40 ] || fail "the reference run logged $(wc -l < ref.losses) steps, not 40"

# check_run DIR NAME: both starts in DIR/job.out, one resume record, every
# loss equal to the reference.
check_run() {
  losses "$1/metrics.jsonl" > "$2.losses" 2>/dev/null || true
  local r starts
  r=$(grep -c '"event":"resume"' "$1/metrics.jsonl" 2>/dev/null || true)
  starts=$(grep -c "^ztrain job .*: start on" "$1/job.out" 2>/dev/null || true)
  if [ "$r" = 1 ] && [ "$starts" = 2 ] && grep -q "stop signal received: checkpoint saved" "$1/job.out" &&
     grep -q "resumed from .*checkpoints/step_" "$1/job.out" && [ -s "$2.losses" ] && cmp -s ref.losses "$2.losses"; then
    echo "ok: $2: saved, resumed in a second start, $(wc -l < "$2.losses") steps, every loss equal to the run straight through"
  else
    echo "---- $1/job.out ----"; tail -20 "$1/job.out" 2>/dev/null
    fail "$2: $r resume records, $starts starts, losses: $(cmp ref.losses "$2.losses" 2>&1 | head -1)"
  fi
}

# 1. PBS Pro, jobs/pbs/submit.sh, arguments with commas, qsig -s USR1.
export FAKE_PBS_FLAVOR=pro
R1=$WORK/run1
id=$(cd "$REPO" && RUN_DIR=$R1 jobs/pbs/submit.sh -l walltime=02:00:00 -v "ZTRAIN=$ZTRAIN" \
  -- "$WORK/c.json" --set "optimizer.params.betas=[0.8,0.9]")
opts1=$(tr '\0' ' ' < "$R1/qsub_args")
start_job "$id"
wait_step "$R1/metrics.jsonl" 3 || fail "PBS Pro job $id did not reach step 3"
kill -USR1 "$JOB_PID"
job_rc
next=$(sed -n 's/.*continues as job \([^ ]*\) .*/\1/p' "$R1/job.out")
if [ "$rc" = 0 ] && [ "$next" = 2.fakepbs ] && [ "$(cat "$Q/$next/depend")" = "$id" ] &&
   [ "$(tr '\0' ' ' < "$R1/qsub_args")" = "$opts1" ] && grep -q "^ztrain job $id: output appended to $R1/job.out" "$Q/$id/pbs.out" &&
   grep -q "walltime 7200 s; saving 600 s before it" "$R1/job.out"; then
  echo "ok: PBS Pro: SIGUSR1 saved, exit 0, continuation $next submitted after $id with the same options ($opts1)"
else
  fail "PBS Pro SIGUSR1: exit $rc, continuation '$next', depend '$(cat "$Q/$next/depend" 2>/dev/null)'; $(tail -5 "$R1/job.out")"
fi
if [ -n "$next" ]; then
  start_job "$next"
  job_rc
  [ "$rc" = 0 ] || fail "PBS Pro continuation exited $rc"
fi
check_run "$R1" "PBS Pro continuation (betas [0.8,0.9] through submit.sh)"

# 2. Torque, plain qsub -v, SIGTERM, then the server's rerun of the same job.
export FAKE_PBS_FLAVOR=torque
before=$(jobs_queued)
id=$(cd "$REPO" && qsub -v "CONFIG=$WORK/c2.json,ZTRAIN=$ZTRAIN,ZTRAIN_ARGS=--steps 40" jobs/pbs/ztrain.torque)
R2=$REPO/runs/$id
start_job "$id"
wait_step "$R2/metrics.jsonl" 3 || fail "Torque job $id did not reach step 3"
kill -TERM "$JOB_PID"
job_rc
if [ "$rc" = 0 ] && [ "$(jobs_queued)" = $((before + 1)) ] && grep -q "walltime 3600 s; saving 600 s" "$R2/job.out" &&
   [ -d "$R2/checkpoints" ]; then
  echo "ok: Torque: SIGTERM saved, exit 0, nothing resubmitted (PBS_WALLTIME read)"
else
  fail "Torque SIGTERM: exit $rc, $(jobs_queued) jobs queued; $(tail -5 "$R2/job.out" 2>/dev/null)"
fi
start_job "$id"
job_rc
[ "$rc" = 0 ] || fail "Torque rerun exited $rc"
check_run "$R2" "Torque rerun (-r y) of job $id"

# 3. The walltime timer (PBS Pro, qstat -f): 8 s, the save 2 s before it
# (6 s in: well after the ranks are up).
export FAKE_PBS_FLAVOR=pro
R3=$WORK/run3
id=$(cd "$REPO" && RUN_DIR=$R3 jobs/pbs/submit.sh -l walltime=00:00:08 -v "ZTRAIN=$ZTRAIN,ZT_SAVE_LEAD=2" \
  -- "$WORK/c.json" --steps 100000)
t0=$SECONDS
start_job "$id"
job_rc
t=$((SECONDS - t0))
next=$(sed -n 's/.*continues as job \([^ ]*\) .*/\1/p' "$R3/job.out")
if [ "$rc" = 0 ] && [ -n "$next" ] && [ "$(cat "$Q/$next/depend")" = "$id" ] && ls "$R3/checkpoints" | grep -q '^step_[0-9]*$' &&
   grep -q "walltime 8 s; saving 2 s before it" "$R3/job.out"; then
  echo "ok: walltime timer: saved $(ls "$R3/checkpoints" | grep '^step_') and submitted $next; the job ended after $t s of an 8 s walltime"
else
  fail "walltime timer: exit $rc, continuation '$next'; $(tail -5 "$R3/job.out" 2>/dev/null)"
fi

# 4. A launcher that fails at once is the job's failure, whatever the
# walltime query does in between; a walltime of D:HH:MM:SS is read (PBS Pro
# writes days that way); ZT_SAVE_LEAD and submit.sh's config are checked.
printf '#!/bin/sh\nexit 3\n' > fail_ztrain
chmod +x fail_ztrain
R4=$WORK/run4
id=$(cd "$REPO" && RUN_DIR=$R4 jobs/pbs/submit.sh -l walltime=1:00:00:00 \
  -v "ZTRAIN=$WORK/fail_ztrain,OMPI_MCA_odls_base_sigkill_timeout=1" -- "$WORK/c.json")
start_job "$id"
job_rc
if [ "$rc" != 0 ] && grep -q "walltime 86400 s; saving 600 s before it" "$R4/job.out"; then
  echo "ok: a failing launcher fails the job (exit $rc); a walltime with days is read"
else
  fail "failing launcher: exit $rc; $(tail -5 "$R4/job.out" 2>/dev/null)"
fi
id=$(cd "$REPO" && RUN_DIR=$WORK/run5 jobs/pbs/submit.sh -v "ZTRAIN=$ZTRAIN,ZT_SAVE_LEAD=10m" -- "$WORK/c.json")
start_job "$id"
job_rc
[ "$rc" = 2 ] && grep -q "ZT_SAVE_LEAD='10m': expected a number of seconds" "$WORK/run5/job.out" \
  && echo "ok: ZT_SAVE_LEAD is checked" || fail "ZT_SAVE_LEAD=10m: exit $rc; $(tail -3 "$WORK/run5/job.out" 2>/dev/null)"
set +e; out=$(cd "$REPO" && jobs/pbs/submit.sh -- "$WORK/none.json" 2>&1); src=$?; set -e
[ "$src" = 2 ] && echo "$out" | grep -q "config '$WORK/none.json' not found" && echo "ok: submit.sh checks the config" \
  || fail "submit.sh without a config: exit $src: $out"
a=$(cd "$REPO" && jobs/pbs/submit.sh -- "$WORK/c.json"); b=$(cd "$REPO" && jobs/pbs/submit.sh -- "$WORK/c.json")
[ "$(cat "$Q/$a/vars" | tr '\0' '\n' | grep ZT_RUN_DIR)" != "$(cat "$Q/$b/vars" | tr '\0' '\n' | grep ZT_RUN_DIR)" ] \
  && echo "ok: two runs submitted in the same second get their own directories" || fail "submit.sh run directories"
finish
