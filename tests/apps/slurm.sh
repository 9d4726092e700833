#!/usr/bin/env bash
# The jobs/slurm scripts under a real SLURM: the test starts munged,
# slurmctld and slurmd on this machine (one node, its own slurm.conf, munge
# key, ports and state in a temporary directory), submits the single-node
# (mpirun), multi-node srun --mpi=pmix and multi-node mpirun scripts on one
# node with 2 ranks each, sends each job's batch shell SIGUSR1 mid-run as
# --signal=B:USR1@LEAD does before a time limit, and checks that each job
# saved, requeued itself, resumed from its checkpoint in a second start,
# kept the metrics of both starts and its output, and ended with the loss of
# every step equal, bit for bit, to a run straight through without SLURM.
# A job past the lead time of --signal=B:USR1@LEAD (--time=1, LEAD 50 s)
# gets SLURM's own signal, saves, requeues and resumes. A job ended by scancel
# saves and is not requeued. Also: jobs/slurm/bind_gpu.sh
# gives each local rank its GPU.
# Skips (exit 77) when SLURM or munge is not installed (jobs/setup.sh installs
# them), when not root, or when a daemon cannot run here, saying why.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"

# bind_gpu.sh: local rank L gets the L-th GPU of the job's list.
gpu_of() { env -u CUDA_VISIBLE_DEVICES "$@" "$SRC/jobs/slurm/bind_gpu.sh" sh -c 'echo "$CUDA_VISIBLE_DEVICES"'; }
if [ "$(gpu_of SLURM_LOCALID=3 CUDA_VISIBLE_DEVICES=4,5,6,7)" = 7 ] &&
   [ "$(gpu_of SLURM_LOCALID=5 CUDA_VISIBLE_DEVICES=2,3)" = 3 ] &&
   [ "$(gpu_of SLURM_LOCALID=2 SLURM_GPUS_ON_NODE=4)" = 2 ] &&
   ! gpu_of SLURM_GPUS_ON_NODE=4 > /dev/null 2>&1; then
  echo "ok: bind_gpu.sh gives local rank L the L-th GPU of the job"
else
  fail "bind_gpu.sh"
fi

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "slurmd must run as root to start jobs (this is uid $(id -u))"
for c in munged munge slurmctld slurmd sbatch scontrol scancel sinfo; do
  command -v "$c" > /dev/null || skip "$c is not installed (jobs/setup.sh installs slurm-wlm and munge)"
done

S=$WORK/slurm
mkdir -p "$S/munge" "$S/state" "$S/spool" "$S/log"
chmod 700 "$S/munge"
pids=()
teardown() {
  set +e
  # Jobs first, so that no step outlives the daemons (at most KillWait).
  if [ -n "${SLURM_CONF:-}" ] && kill -0 "${pids[1]:-0}" 2>/dev/null; then
    squeue -h -o %i 2>/dev/null | xargs -r scancel --full --quiet 2>/dev/null
    for _ in $(seq 1 150); do [ -z "$(squeue -h -o %i 2>/dev/null | head -1)" ] && break; sleep 0.1; done
  fi
  # Daemons last to first: slurmd, slurmctld, munged.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
  done
  wait 2>/dev/null
  if [ -n "${KEEP_WORK:-}" ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap teardown EXIT
# daemon_gone NAME PID LOG: skip, saying why, when the daemon has exited.
daemon_gone() {
  kill -0 "$2" 2>/dev/null && return 0
  echo "---- $3 ----"; tail -20 "$3"
  skip "$1 cannot run on this machine (its log is above)"
}

# munge with its own key and socket, so that no system munged is needed.
dd if=/dev/urandom of="$S/munge/key" bs=1024 count=1 status=none
chmod 400 "$S/munge/key"
munged -F -f -S "$S/munge/sock" --key-file="$S/munge/key" --pid-file="$S/munge/pid" \
  --seed-file="$S/munge/seed" --log-file="$S/log/munged.log" > "$S/log/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 1 50); do [ -S "$S/munge/sock" ] && break; daemon_gone munged "${pids[0]}" "$S/log/munged.out"; sleep 0.1; done
munge -S "$S/munge/sock" -n | unmunge -S "$S/munge/sock" > /dev/null || skip "munge cannot encode and decode a credential"

# The reference: the same config straight through, without SLURM.
cat > c.json <<'JSON'
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 40, "warmup_num_steps": 5}},
 "model": {"n_layer": 2, "n_head": 2, "d_model": 64, "seq_len": 64, "vocab_size": 64},
 "train": {"steps": 40, "eval_interval": 0}}
JSON
# shellcheck disable=SC2086
"$MPIEXEC" $MPI_FLAGS --bind-to none -np 2 "$ZTRAIN" c.json --log-dir ref > ref.out 2>&1 &
ref_pid=$!

node=ztnode
port=$((20000 + RANDOM % 20000))
cat > "$S/slurm.conf" <<EOF
ClusterName=ztest
SlurmctldHost=$(hostname)(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: a requeued job waits this long before it may start again
# (120 s by default).
AuthInfo=socket=$S/munge/sock,cred_expire=5
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=600
# SIGKILL this long after scancel's SIGTERM (30 s by default).
KillWait=10
NodeName=$node NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=8 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$S/slurm.conf
slurmctld -D -c > "$S/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N "$node" > "$S/log/slurmd.out" 2>&1 &
pids+=($!)
up=0
for _ in $(seq 1 100); do
  daemon_gone slurmctld "${pids[1]}" "$S/log/slurmctld.out"
  daemon_gone slurmd "${pids[2]}" "$S/log/slurmd.out"
  if [ "$(sinfo -h -n "$node" -o %t 2>/dev/null)" = idle ]; then up=1; break; fi
  sleep 0.2
done
if [ "$up" != 1 ]; then
  tail -5 "$S/log/slurmctld.log" "$S/log/slurmd.log"
  fail "node $node is not idle 20 s after the daemons started: $(sinfo -h -n "$node" -o '%t %E' 2>&1)"
  finish
fi
echo "ok: slurmctld and slurmd up ($(sinfo -V)), node $node idle"

# The time limit itself: a run longer than its 1 minute limit, with
# --signal=B:USR1@50, gets SIGUSR1 from SLURM about 10 s into every start;
# it is cancelled once a second start has resumed.
cat > long.json <<'JSON'
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1,
 "model": {"n_layer": 2, "n_head": 2, "d_model": 64, "seq_len": 64, "vocab_size": 64},
 "train": {"steps": 1000000, "eval_interval": 0}}
JSON
tl=$(cd "$SRC" && ZTRAIN=$ZTRAIN RUN_DIR=$WORK/run_tl sbatch --parsable --job-name=timelimit --time=1 --signal=B:USR1@50 \
  --output="$WORK/tl-%j.out" --nodes=1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=1 jobs/slurm/ztrain.sbatch "$WORK/long.json")
echo "submitted jobs/slurm/ztrain.sbatch --time=1 --signal=B:USR1@50 as job $tl"

# Every shape on one node, 2 ranks, submitted from the repository root as
# the scripts' headers say; "cancel" is single_node.sbatch again, ended by
# scancel (SIGTERM to every process of the job) instead of SIGUSR1.
scripts=(single_node ztrain mpirun cancel)
declare -A job
for s in "${scripts[@]}"; do
  f=jobs/slurm/${s/cancel/single_node}.sbatch
  job[$s]=$(cd "$SRC" && ZTRAIN=$ZTRAIN RUN_DIR=$WORK/run_$s sbatch --parsable --job-name="$s" \
    --output="$WORK/$s-%j.out" --nodes=1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=1 "$f" "$WORK/c.json")
  echo "submitted $f as job ${job[$s]} ($s)"
done
last_step() { grep -o '"step":[0-9]*' "$1" 2>/dev/null | tail -1 | cut -d: -f2; }
# SIGUSR1 to each batch shell once its run has done 3 steps: what SLURM
# sends at the --signal=B:USR1@LEAD lead time.
declare -A signalled=()
nsig=0
for _ in $(seq 1 900); do
  for s in "${scripts[@]}"; do
    [ -z "${signalled[$s]:-}" ] || continue
    n=$(last_step "$WORK/run_$s/metrics.jsonl")
    if [ "${n:-0}" -ge 3 ]; then
      if [ "$s" = cancel ]; then scancel "${job[$s]}"; else scancel --signal=USR1 --batch "${job[$s]}"; fi
      signalled[$s]=$n
      nsig=$((nsig + 1))
    fi
  done
  [ "$nsig" = "${#scripts[@]}" ] && break
  sleep 0.1
done
state() { scontrol show job "$1" 2>/dev/null | grep -o -E '(JobState|Restarts|ExitCode)=[^ ]*' | tr '\n' ' '; }
tl_cancelled=""
for _ in $(seq 1 1200); do
  pending=0
  for id in "${job[@]}" "$tl"; do
    case $(state "$id") in *COMPLETED*|*FAILED*|*CANCELLED*|*TIMEOUT*|*NODE_FAIL*) ;; *) pending=1 ;; esac
  done
  if [ -z "$tl_cancelled" ] && grep -q "resumed from" "$WORK/tl-$tl.out" 2>/dev/null; then
    tl_state=$(state "$tl")
    scancel "$tl"
    tl_cancelled=1
  fi
  [ "$pending" = 0 ] && break
  sleep 0.1
done
rc=0
wait "$ref_pid" || rc=$?
[ "$rc" = 0 ] || fail "the reference run exited $rc: $(tail -3 ref.out)"
losses ref/metrics.jsonl > ref.losses
[ "$(wc -l < ref.losses)" = 40 ] || fail "the reference run logged $(wc -l < ref.losses) steps, not 40"

# The time limit's signal: saved, requeued, resumed (before the limit).
o=$WORK/tl-$tl.out
saved=$(sed -n 's/^stop signal received: checkpoint saved at step \([0-9]*\),.*/\1/p' "$o" | head -1)
if [[ ${tl_state:-} == *Restarts=1* ]] && grep -q "start 1 on" "$o" && grep -q "SIGUSR1, saving and requeueing" "$o" &&
   [ -n "$saved" ] && grep -q "start 2 on" "$o" && grep -q "resumed from $WORK/run_tl/checkpoints/step_$saved at step $saved" "$o" &&
   ! grep -q "DUE TO TIME LIMIT" "$o"; then
  echo "ok: --time=1 --signal=B:USR1@50: SLURM's signal saved step $saved before the limit, the job requeued and resumed there"
else
  echo "---- $o ----"; grep -v '^step' "$o" | tail -20
  fail "time limit signal (job $tl): ${tl_state:-never resumed}, saved '${saved}'"
fi

# scancel: the ranks (signalled by SLURM directly) saved and ended
# normally, and the job stays cancelled (not requeued). mpirun, signalled
# too, lingers and is killed after KillWait, with the ranks' last output.
id=${job[cancel]}
st=$(state "$id")
ck=$(ls "$WORK/run_cancel/checkpoints" 2>/dev/null | grep '^step_[0-9]*$' || true)
if [[ $st == *JobState=CANCELLED*Restarts=0* ]] && grep -q "SIGTERM, saving" "$WORK/cancel-$id.out" && [ -n "$ck" ] &&
   grep -q "\"event\":\"end\".*\"steps\":${ck#step_}," "$WORK/run_cancel/metrics.jsonl"; then
  echo "ok: scancel after step ${signalled[cancel]:-?}: $ck saved, the job stays cancelled ($st)"
else
  echo "---- cancel-$id.out ----"; tail -15 "$WORK/cancel-$id.out" 2>/dev/null
  fail "scancel of jobs/slurm/single_node.sbatch (job $id): $st; checkpoints '$ck'"
fi

for s in "${scripts[@]}"; do
  [ "$s" != cancel ] || continue
  id=${job[$s]}
  out=$WORK/$s-$id.out
  m=$WORK/run_$s/metrics.jsonl
  st=$(state "$id")
  losses "$m" > "$s.losses" 2>/dev/null || true
  resumes=$(grep -c '"event":"resume"' "$m" 2>/dev/null || true)
  if [[ $st == *JobState=COMPLETED*Restarts=1*ExitCode=0:0* ]] &&
     grep -q "start 1 on" "$out" && grep -q "start 2 on" "$out" &&
     grep -q "stop signal received: checkpoint saved" "$out" && grep -q "requeueing at" "$out" &&
     grep -q "resumed from $WORK/run_$s/checkpoints/step_" "$out" && [ "$resumes" = 1 ] &&
     [ -s "$s.losses" ] && cmp -s ref.losses "$s.losses"; then
    echo "ok: jobs/slurm/$s.sbatch: signalled after step ${signalled[$s]:-?}, saved at step" \
      "$(grep -o '"event":"resume"[^}]*"step":[0-9]*' "$m" | grep -o '[0-9]*$'), requeued, resumed;" \
      "$(wc -l < "$s.losses") steps over 2 starts, every loss equal to the run without SLURM (final $(tail -1 "$s.losses"))"
  else
    echo "---- $out ----"; tail -25 "$out" 2>/dev/null
    fail "jobs/slurm/$s.sbatch (job $id): $st; $resumes resume records; losses $(wc -l < "$s.losses") vs 40;" \
      "first difference: $(cmp ref.losses "$s.losses" 2>&1 | head -1)"
  fi
done
finish
