#!/usr/bin/env bash
# GPU host checks of the watchdog and the flight recorder (docs/reliability.md,
# "Hangs"), with comm.timeout = 10 s, so every process must be gone within 25 s:
#   - np 1, NCCL: the compute stream stalls at step 3
#     (ZT_INJECT_FAULT=stall-stream), so the NCCL reduce-scatter queued after
#     it never runs: the watchdog sees it in flight through its events
#     (cudaEventQuery), writes the dump, aborts the communicator and exits 3
#     within the bound; zdiag names rank 0 (the only member: its own device
#     never ran the collective);
#   - np 2 on one GPU (the host-staged MPI path): rank 1's stream stalls at
#     step 3; rank 0 times out inside the staged collective, both ranks dump,
#     the job exits 3 within the bound and `zdiag flight` names rank 1;
#   - np 1, NCCL: SIGUSR2 writes the dump and the run goes on.
# Usage (on the GPU host, from the repository root; the bundle holds
# bin/ztrain and bin/zdiag, see jobs/gpu/pack.sh):
#   jobs/gpu/watchdog.sh BUNDLE_DIR OUT_DIR
# Prints each check and its verdict (also in OUT_DIR/summary.txt); exits 1
# when one failed.
set -uo pipefail
# shellcheck source=jobs/gpu/lib.sh
. "$(dirname "$0")/lib.sh" watchdog.sh "$@"
fails=0
check() {  # check NAME CONDITION-TEXT: records ok/FAIL from the previous command's status
  if [ "$1" = 0 ]; then note "ok: $2"; else note "FAIL: $2"; fails=$((fails + 1)); fi
}
timeout_s=10
bound=$((timeout_s + 15))
cat > "$out/wd.json" <<JSON
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1,
 "zero_optimization": {"stage": 2},
 "model": {"n_layer": 2, "n_head": 4, "d_model": 128, "seq_len": 64, "vocab_size": 256},
 "train": {"steps": 100000, "eval_interval": 0}, "comm": {"timeout": $timeout_s}}
JSON
# run NAME NP [args]: ztrain in the foreground with ZT_INJECT_FAULT passed on;
# sets rc and secs.
run() {
  local name=$1 np=$2
  shift 2
  rm -rf "$out/$name"
  local t0
  t0=$(date +%s%N)
  timeout 120 "${mpi[@]}" -np "$np" -x ZT_INJECT_FAULT "$bundle/bin/ztrain" "$out/wd.json" --device cuda \
    --log-dir "$out/$name" "$@" > "$out/$name.log" 2>&1
  rc=$?
  secs=$(( ($(date +%s%N) - t0) / 1000000000 ))
}

# 1. np 1, NCCL, a stalled stream. The bound counts from the start of the
# run: step 3 comes within a few seconds of it, so this is stricter.
export ZT_INJECT_FAULT=stall-stream:rank=0,step=3
run nccl1 1
grep -q "data-parallel communicator" "$out/nccl1.log"
backend=$(grep -o "data-parallel communicator [a-z/]*" "$out/nccl1.log" | head -1)
note "np 1 stall-stream: exit $rc after $secs s (bound $bound + start-up), $backend"
[ "$rc" = 3 ] && [ "$secs" -le $((bound + 30)) ] \
  && grep -q "error on rank 0: collective #[0-9]* reduce_scatter .* on communicator 'dp' has not completed after" "$out/nccl1.log"
check $? "np 1, NCCL: a stalled stream ends the run with exit 3 naming the NCCL collective"
grep "error on rank\|injected" "$out/nccl1.log" | cut -c1-400 | sed 's/^/  /' | tee -a "$summary"
[ "$rc" = 3 ] || tail -15 "$out/nccl1.log" | sed 's/^/  log: /'
"$bundle/bin/zdiag" flight "$out/nccl1/flight" > "$out/nccl1.diag" 2>&1
drc=$?
sed 's/^/  /' "$out/nccl1.diag" | tee -a "$summary"
[ "$drc" = 0 ] && grep -q "^on 'dp' (nccl, rank 0): collective #[0-9]* reduce_scatter .* never completed" "$out/nccl1.diag" \
  && grep -qx "culprit: rank 0" "$out/nccl1.diag"
check $? "np 1, NCCL: zdiag flight names rank 0, whose device never ran the collective"

# 2. np 2 on one GPU: the host-staged MPI path.
export ZT_INJECT_FAULT=stall-stream:rank=1,step=3
run staged2 2
note "np 2 staged stall-stream: exit $rc after $secs s; $(grep -o 'data-parallel communicator [a-z/]*' "$out/staged2.log" | head -1)"
[ "$rc" = 3 ] && [ "$secs" -le $((bound + 30)) ] && [ -s "$out/staged2/flight/rank_0.json" ] \
  && [ -s "$out/staged2/flight/rank_1.json" ]
check $? "np 2, staged: exit 3 within the bound, both ranks' dumps written"
"$bundle/bin/zdiag" flight "$out/staged2/flight" > "$out/staged2.diag" 2>&1
drc=$?
sed 's/^/  /' "$out/staged2.diag" | tee -a "$summary"
[ "$rc" = 3 ] || tail -15 "$out/staged2.log" | sed 's/^/  log: /'
[ "$drc" = 0 ] && grep -qx "culprit: rank 1" "$out/staged2.diag"
check $? "np 2, staged: zdiag flight names rank 1"

# 3. SIGUSR2 on the GPU: the dump, and the run goes on.
unset ZT_INJECT_FAULT
rm -rf "$out/usr"
"${mpi[@]}" -np 1 "$bundle/bin/ztrain" "$out/wd.json" --device cuda --log-dir "$out/usr" --steps 400 \
  > "$out/usr.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do grep -q "^step *5/" "$out/usr.log" 2>/dev/null && break; sleep 0.2; done
kill -USR2 "$pid"
for _ in $(seq 1 50); do [ -s "$out/usr/flight/rank_0.json" ] && break; sleep 0.2; done
wait "$pid"
rc=$?
[ "$rc" = 0 ] && [ -s "$out/usr/flight/rank_0.json" ] && grep -q "^step *400/400" "$out/usr.log" \
  && grep -q '"reason": "SIGUSR2' "$out/usr/flight/rank_0.json"
check $? "np 1, NCCL: SIGUSR2 wrote the dump and the run finished its 400 steps (exit $rc)"

note "watchdog checks: $fails failed"
[ "$fails" = 0 ]
