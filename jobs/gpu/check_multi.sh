#!/usr/bin/env bash
# GPU host checks that need a GPU per rank (see docs/scaling.md and
# docs/monitoring.md), for a host with N >= 2 GPUs:
#   - test_device_comm on N ranks, one GPU each: NCCL's collectives, and the
#     time of each call and the time waited for it with a peer 100 ms late
#     (DeviceComm.CollectivesCarryTheirTimeAndTheTimeWaited), which one GPU
#     cannot run;
#   - zbench: all-reduce, reduce-scatter and all-gather bus bandwidth over
#     the N GPUs (the planner's intra-node figure, docs/plan.md);
#   - the scaling study of docs/scaling.md's two-GPU table: GPT-2 124M, ZeRO
#     0, 2 and 3, weak scaling over 1 and N GPUs, with communication bytes,
#     waited time and hidden fraction from wall_clock_breakdown.
# Usage (on the GPU host, from the repository root; the bundle holds ztrain,
# test_device_comm and zbench):
#   jobs/gpu/check_multi.sh BUNDLE_DIR OUT_DIR
set -uo pipefail
# shellcheck source=jobs/gpu/lib.sh
. "$(dirname "$0")/lib.sh" check_multi.sh "$@"
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$n" -lt 2 ]; then
  note "check_multi.sh: $n GPU(s) here; these checks need at least 2"
  exit 2
fi
note "GPUs: $n ($(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | tr -s ' ' | tr '\n' ';'))"
"${mpi[@]}" -np "$n" "$bundle/bin/test_device_comm" > "$out/comm_np$n.log" 2>&1
note "test_device_comm np $n: rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/comm_np$n.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' "$out/comm_np$n.log" | tee -a "$summary"
"${mpi[@]}" -np "$n" "$bundle/bin/zbench" > "$out/zbench.log" 2>&1
note "zbench np $n: rc=$?"
tail -n 20 "$out/zbench.log" | tee -a "$summary"
python3 jobs/scaling/run.py --ranks "1 $n" --models gpt2-124m --stages "0 2 3" --mode weak --steps 6 \
  --device cuda --ztrain "$bundle/bin/ztrain" --config data/configs/gpt2-bench.json \
  --launcher "${mpi[*]} -np" --out "$out/scaling/report.md" --raw "$out/scaling/raw" > "$out/scaling.log" 2>&1
note "scaling 1 and $n GPUs: rc=$? (report: $out/scaling/report.md)"
tail -n 5 "$out/scaling.log" | tee -a "$summary"
